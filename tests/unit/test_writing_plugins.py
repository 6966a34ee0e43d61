"""docs/writing_plugins.rst, followed literally: extract, install, load.

Every ``code-block`` with a ``:caption:`` is written to that path under a
temporary directory; the one console step (``pip install ./pluglog-firstbyte``)
runs as ``pip install --no-deps --no-build-isolation --target`` so it stays
fast and offline; ``check.py`` then runs in a fresh interpreter that finds
the package through its entry point.
"""

import os
import re
import subprocess
import sys
import textwrap

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BLOCK = re.compile(r"^\.\. code-block:: (\w+)\n((?:   :\w+: .*\n)*)\n((?:(?:   .*)?\n)+)", re.M)


def blocks():
    with open(os.path.join(DOCS, "writing_plugins.rst"), encoding="utf-8") as handle:
        text = handle.read()
    out = []
    for lang, options, body in BLOCK.findall(text):
        caption = re.search(r":caption: (.*)", options)
        out.append((lang, caption.group(1) if caption else None, textwrap.dedent(body)))
    return out


def install(tmp_path):
    files = {}
    commands = []
    for lang, caption, body in blocks():
        if caption:
            path = tmp_path / caption
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body.strip() + "\n")
            files[caption] = path
        elif lang == "console":
            commands += [ln[2:] for ln in body.splitlines() if ln.startswith("$ ")]
    assert commands == ["pip install ./pluglog-firstbyte"]
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
        + ["--target", str(target), "./pluglog-firstbyte"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), ROOT]))
    env.pop("PLUGLOG_DISABLE_PLUGIN_AUTOLOAD", None)
    return files, env


def test_walkthrough_builds_a_loadable_plugin(tmp_path):
    files, env = install(tmp_path)
    assert set(files) == {
        "pluglog-firstbyte/pluglog_firstbyte/__init__.py",
        "pluglog-firstbyte/pyproject.toml",
        "check.py",
    }
    result = subprocess.run(
        [sys.executable, str(files["check.py"])],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "loaded from firstbyte" in result.stdout


def test_incomplete_provider_fails_at_load_naming_plugin_interface_method(tmp_path):
    files, env = install(tmp_path)
    module = files["pluglog-firstbyte/pluglog_firstbyte/__init__.py"]
    installed = tmp_path / "site" / "pluglog_firstbyte" / "__init__.py"
    # The section 5 scenario: the same package without its partition method.
    source = module.read_text().replace("def partition(", "def partition_renamed(")
    installed.write_text(source)
    result = subprocess.run(
        [sys.executable, str(files["check.py"])],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("pluglog.errors.PluginError: plugin 'firstbyte' for IPartitioner")
    assert "lacks 'partition'" in last
