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
    # One line, not a traceback (python -m runs main.py as __main__).
    assert err.splitlines() == ["pluglog: missing-topic: UNKNOWN_TOPIC_OR_PARTITION (3)"]


def _consume_and_commit(bootstrap, topic, group, count):
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got = 0
    import time

    deadline = time.monotonic() + 60
    while got < count and time.monotonic() < deadline:
        for msg in consumer.consume(100, 0.5):
            assert msg.error() is None
            got += 1
    consumer.commit(asynchronous=False)
    return consumer


def test_groups_list_describe_reset_delete(shared_broker):
    cli(shared_broker, "topics", "create", "cli-g", "--partitions", "2")
    lines = "\n".join(f"k{i}:v{i}" for i in range(100)) + "\n"
    cli(shared_broker, "produce", "cli-g", "--key-separator", ":", data=lines)
    consumer = _consume_and_commit(shared_broker.bootstrap, "cli-g", "billing", 100)
    try:
        assert "billing" in cli(shared_broker, "groups", "list").stdout
        out = cli(shared_broker, "groups", "describe", "billing").stdout
        assert "State: Stable" in out and "Members: 1" in out
        rows = [line.split("\t") for line in out.splitlines() if line.startswith("cli-g\t")]
        assert sum(int(r[2]) for r in rows) == 100 and all(r[4] == "0" for r in rows)
        err = cli(
            shared_broker,
            "groups",
            "reset-offsets",
            "billing",
            "--topic",
            "cli-g",
            "--to-earliest",
            "--execute",
            expect=1,
        ).stderr
        assert "active members" in err
    finally:
        consumer.close()
    plan = cli(
        shared_broker, "groups", "reset-offsets", "billing", "--topic", "cli-g", "--to-earliest"
    ).stdout
    assert "dry run" in plan
    cli(
        shared_broker,
        "groups",
        "reset-offsets",
        "billing",
        "--topic",
        "cli-g",
        "--to-earliest",
        "--execute",
    )
    out = cli(shared_broker, "groups", "describe", "billing").stdout
    rows = [line.split("\t") for line in out.splitlines() if line.startswith("cli-g\t")]
    assert [r[2] for r in rows] == ["0", "0"]
    assert sum(int(r[4]) for r in rows) == 100
    cli(shared_broker, "groups", "delete", "billing")
    assert "billing" not in cli(shared_broker, "groups", "list").stdout


def test_cluster_describe_and_partition_health(shared_broker):
    cli(shared_broker, "topics", "create", "cli-health", "--partitions", "3")
    out = cli(shared_broker, "cluster", "describe").stdout.splitlines()
    assert out[0].startswith("ClusterId: ") and out[0].endswith("\tController: 0")
    assert out[1] == f"Broker: 0\tHost: 127.0.0.1:{shared_broker.port}\tRack: -\tController: yes"
    fields = dict(item.split(": ") for item in out[2].split("\t"))
    assert int(fields["Partitions"]) >= 3
    assert (fields["UnderReplicated"], fields["Unavailable"]) == ("0", "0")
    # One broker: every partition is fully replicated and led.
    assert cli(shared_broker, "topics", "describe", "--under-replicated").stdout == ""
    assert cli(shared_broker, "topics", "describe", "cli-health", "--unavailable").stdout == ""
    err = cli(shared_broker, "topics", "describe", expect=2).stderr
    assert "name a topic" in err and len(err.splitlines()) == 1
    err = cli(shared_broker, "topics", "describe", "nope", "--under-replicated", expect=1).stderr
    assert err.splitlines() == ["pluglog: nope: UNKNOWN_TOPIC_OR_PARTITION (3)"]


def test_no_broker_answers():
    from tests.broker_process import BrokerProcess, free_port

    nobody = BrokerProcess("/nonexistent", port=free_port())  # never started
    for args in (("cluster", "describe"), ("topics", "describe", "--under-replicated")):
        err = cli(nobody, *args, expect=1).stderr
        assert err.splitlines() == [
            f"pluglog: cannot reach {nobody.bootstrap}: Connection refused"
        ]
