"""The README's, docs/cluster.rst's and docs/operations.rst's shell commands
stay runnable: the ZooKeeper script they name exists where Debian puts it,
and every ``pluglog`` and ``twistd pluglog`` command line parses with
today's options.

(Running them verbatim needs the fixed ports 2181 and 9091-9093 and takes
about 45 s; that was done by hand, see NEWS.rst.)
"""

import os
import re
import shlex

import pytest

from pluglog.cli.main import build_parser
from pluglog.tap import Options

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _commands(name, start, end=None):
    """Shell commands of the literal blocks between headings ``start`` and
    ``end``, continuation lines joined, ``$VAR`` filled in."""
    with open(os.path.join(ROOT, name), encoding="utf-8") as handle:
        text = handle.read()
    text = text[text.index(start) : text.index(end) if end else None]
    commands = []
    for block in re.findall(r"::\n\n((?:    .*\n|\n)+)", text):
        joined = re.sub(r"\\\n\s*", " ", "\n".join(line[4:] for line in block.splitlines()))
        for line in joined.splitlines():
            line = line.replace("$id", "1").replace("$B", "127.0.0.1:19092,127.0.0.1:19093")
            commands.append(line.strip())
    return commands


def _parse_pluglog(line):
    (command,) = [part for part in line.split("|") if part.strip().startswith("pluglog ")]
    words = shlex.split(command, comments=True)
    assert words[0] == "pluglog", line
    try:
        build_parser().parse_args(words[1:])
    except SystemExit:
        pytest.fail(f"does not parse: {line}")


README = ("README.rst", "Several brokers by hand", "To try a cluster without")
WALKTHROUGH = ("docs/cluster.rst", "Failover in five minutes", "Starting brokers")


def test_readme_cluster_commands_parse_and_name_real_files():
    commands = _commands(*README)
    zookeeper = [c for c in commands if "zkServer.sh" in c]
    assert zookeeper, commands
    script = shlex.split(zookeeper[0])[0]
    if not os.path.exists("/usr/share/zookeeper"):
        pytest.skip("the Debian zookeeper package is not installed")
    assert os.access(script, os.X_OK), script
    twistd = [c for c in commands if c.startswith("twistd ")]
    assert twistd
    for line in twistd:
        words = shlex.split(line)
        Options().parseOptions(words[words.index("pluglog") + 1 :])
    pluglog = [c for c in commands if c.startswith("pluglog ")]
    assert any("--replication-factor 3" in c for c in pluglog), pluglog
    for line in pluglog:
        _parse_pluglog(line)


def test_failover_walkthrough_commands_parse():
    commands = []
    for line in _commands(*WALKTHROUGH):
        if line.startswith(("stop:", "restart:")):  # the restart commands it prints
            line = line.split(":", 1)[1].split("(or:")[0].strip()
        if line.startswith("pluglog ") or "| pluglog " in line:
            commands.append(line)
    assert len(commands) >= 10, commands
    assert any("dev-cluster start 1" in c for c in commands), commands
    for line in commands:
        _parse_pluglog(line)


def test_operations_cli_commands_parse():
    commands = _commands("docs/operations.rst", "The ``pluglog`` command", "Avro values as JSON")
    assert any(c.startswith("pluglog transactions abort") for c in commands), commands
    for line in commands:
        if line:
            _parse_pluglog(line)
