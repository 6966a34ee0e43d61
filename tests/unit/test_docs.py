"""Docs stay in step with the code: hooks, config keys and options."""

import inspect
import os
import re

from pluglog import hookspecs
from pluglog.config import BROKER_KEYS, TOPIC_KEYS
from pluglog.tap import Options

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs")


def _read(name):
    with open(os.path.join(DOCS, name), encoding="utf-8") as handle:
        return handle.read()


def test_every_hook_has_a_heading():
    text = _read("plugin_hooks.rst")
    headings = set(re.findall(r"^(pluglog_\w+\([^)]*\))\n-+$", text, re.M))
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction):
        if not name.startswith("pluglog_"):
            continue
        args = ", ".join(inspect.signature(func).parameters)
        assert f"{name}({args})" in headings, f"docs/plugin_hooks.rst lacks {name}({args})"


def test_every_hook_section_has_arguments_returns_and_example():
    text = _read("plugin_hooks.rst")
    sections = re.split(r"^(pluglog_\w+\([^)]*\))\n-+$", text, flags=re.M)[1:]
    for heading, body in zip(sections[::2], sections[1::2]):
        name = heading.split("(")[0]
        assert "Arguments:" in body, heading
        assert "Return" in body, heading
        assert f"def {name}(" in body, f"{heading}: no example"


def test_every_config_key_is_documented():
    text = _read("configuration.rst")
    for key in BROKER_KEYS:
        assert f"``{key}``" in text, key
    for key, spec in TOPIC_KEYS.items():
        assert f"``{key}``" in text, key
        assert f"``{spec[3]}``" in text, spec[3]


def test_every_option_is_documented():
    text = _read("configuration.rst")
    for long_name, *_ in Options.optParameters:
        assert f"``--{long_name}``" in text, long_name
    assert "``--set``" in text


def test_protocol_page_lists_every_served_api():
    from pluglog import protocol as codec

    text = _read("protocol.rst")
    for key, (lo, hi) in codec.SUPPORTED.items():
        name = codec.API_NAMES[key]
        versions = f"{lo}-{hi}" if lo != hi else f"{lo}"
        pattern = rf"^{key}\s+{name}\s+{re.escape(versions)}\s"
        assert re.search(pattern, text, re.M), f"docs/protocol.rst: {key} {name} {versions}"


def test_sphinx_builds_without_warnings(tmp_path):
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", DOCS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
