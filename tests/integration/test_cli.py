"""The ``pluglog`` operator CLI against the real broker."""

import subprocess
import sys

from tests.broker_process import ROOT


def cli(broker, *args, data=None, expect=0):
    result = subprocess.run(
        [sys.executable, "-m", "pluglog.cli.main", "-b", broker.bootstrap, *args],
        input=data,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == expect, result.stderr
    return result


def test_topics_lifecycle(shared_broker):
    cli(
        shared_broker,
        "topics",
        "create",
        "cli-t",
        "--partitions",
        "3",
        "--config",
        "retention.ms=1000",
    )
    assert "cli-t" in cli(shared_broker, "topics", "list").stdout.split()
    out = cli(shared_broker, "topics", "describe", "cli-t").stdout
    assert "PartitionCount: 3" in out
    assert "* retention.ms=1000" in out
    cli(shared_broker, "topics", "alter-config", "cli-t", "--set", "retention.ms=5000")
    assert "* retention.ms=5000" in cli(shared_broker, "topics", "describe", "cli-t").stdout
    err = cli(shared_broker, "topics", "create", "cli-t", expect=1).stderr
    assert "TOPIC_ALREADY_EXISTS" in err
    cli(shared_broker, "topics", "delete", "cli-t")
    assert "cli-t" not in cli(shared_broker, "topics", "list").stdout.split()


def test_produce_consume_keys_and_partitioning(shared_broker):
    cli(shared_broker, "topics", "create", "cli-pc", "--partitions", "4")
    lines = [f"user{i % 5}:event {i}" for i in range(200)]
    cli(
        shared_broker,
        "produce",
        "cli-pc",
        "--key-separator",
        ":",
        "--compression",
        "lz4",
        data="\n".join(lines) + "\n",
    )
    out = cli(
        shared_broker,
        "consume",
        "cli-pc",
        "--from-beginning",
        "--exit",
        "--print-key",
        "--print-offset",
    ).stdout.splitlines()
    assert len(out) == 200
    partition_of_key = {}
    for line in out:
        where, key, value = line.split("\t")
        partition_of_key.setdefault(key, set()).add(where.split(":")[0])
    # murmur2 keeps each key on one partition.
    assert all(len(parts) == 1 for parts in partition_of_key.values())
    values = sorted(line.split("\t")[2] for line in out)
    assert values == sorted(line.split(":", 1)[1] for line in lines)


def test_bad_flags(shared_broker):
    err = cli(shared_broker, "topics", "create", "x", "--partitions", "zero", expect=2).stderr
    assert "zero" in err
    result = subprocess.run(
        [sys.executable, "-m", "pluglog.cli.main", "-b", "nohostport", "topics", "list"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and "nohostport" in result.stderr
    err = cli(shared_broker, "consume", "missing-topic", "--exit", expect=1).stderr
    assert "UNKNOWN_TOPIC_OR_PARTITION" in err
