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


#: docutils' messages about what only Sphinx knows (roles, directives, options)
SPHINX_ONLY = r'Unknown (interpreted text role|directive)|Error in "code-block" directive'


def _tables(name):
    """``(doctree messages, [[row cells as text]] per table)`` of a doc page,
    parsed by docutils alone (Sphinx roles and directives show up as
    'unknown' messages, which are left to the Sphinx build above)."""
    import docutils.core
    import docutils.nodes as nodes

    tree = docutils.core.publish_doctree(
        _read(name), source_path=name, settings_overrides={"report_level": 5, "halt_level": 5}
    )
    messages = [
        m.astext()
        for m in tree.findall(nodes.system_message)
        if m["level"] >= 2 and not re.search(SPHINX_ONLY, m.astext())
    ]
    tables = [
        [
            [entry.astext() for entry in row.findall(nodes.entry)]
            for row in table.findall(nodes.row)
        ]
        for table in tree.findall(nodes.table)
    ]
    return messages, tables


def test_doc_tables_render_without_warnings():
    for name in sorted(os.listdir(DOCS)):
        if name.endswith(".rst"):
            messages, _tables_ = _tables(name)
            assert not messages, (name, messages)


def test_config_tables_hold_one_key_per_row():
    _messages, tables = _tables("configuration.rst")
    for table in tables:
        for row in table[1:]:
            assert all(cell.strip() for cell in row[:2]), row
            assert re.fullmatch(r"[\w.\-<>]+", row[0]), f"cell {row[0]!r} of {row}"


def test_plugins_table_matches_the_registry():
    from pluglog.plugins import make_plugin_manager
    from pluglog.registry import KINDS, Registry

    registry = Registry(make_plugin_manager(autoload=False))
    _messages, tables = _tables("plugins.rst")
    rows = {row[0]: row for row in tables[0][1:]}
    assert len(rows) == len(KINDS)
    for kind, (hook, interface) in KINDS.items():
        row = rows[kind.replace("_", " ")]
        assert row[1] == hook and row[2] == interface.__name__, row
        names = sorted(re.findall(r"[\w-]+", row[3])) if row[3] != "(none)" else []
        assert names == registry.names(kind), (kind, row[3])


def test_partitioning_is_documented_as_client_side():
    text = " ".join(_read("client.rst").split())
    assert "the broker never loads a partitioner" in text
    assert "plugins the broker and CLI load" not in text
