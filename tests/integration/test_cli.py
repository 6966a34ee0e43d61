"""The ``pluglog`` operator CLI against the real broker."""

import subprocess
import sys
import threading

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


def test_consume_group_continues_where_the_last_run_stopped(shared_broker):
    cli(shared_broker, "topics", "create", "cli-cg", "--partitions", "3")
    cli(shared_broker, "produce", "cli-cg", data="".join(f"m{i}\n" for i in range(30)))
    first = cli(
        shared_broker,
        "consume",
        "cli-cg",
        "--group",
        "cg",
        "--from-beginning",
        "--max-messages",
        "10",
    ).stdout.split()
    rest = cli(shared_broker, "consume", "cli-cg", "--group", "cg", "--exit").stdout.split()
    assert len(first) == 10 and len(rest) == 20
    assert sorted(first + rest) == sorted(f"m{i}" for i in range(30))
    out = cli(shared_broker, "groups", "describe", "cg").stdout
    rows = [line.split("\t") for line in out.splitlines() if line.startswith("cli-cg\t")]
    assert sum(int(r[4]) for r in rows) == 0  # lag 0: every record committed
    assert cli(shared_broker, "consume", "cli-cg", "--group", "cg", "--exit").stdout == ""
    err = cli(
        shared_broker, "consume", "cli-cg", "--group", "cg", "--offset", "0", expect=2
    ).stderr
    assert "--group" in err


def test_consume_into_a_closed_pipe_exits_quietly(shared_broker):
    cli(shared_broker, "produce", "cli-pipe", data="".join(f"line {i}\n" for i in range(50000)))
    shell = (
        f"{sys.executable} -m pluglog.cli.main -b {shared_broker.bootstrap} "
        "consume cli-pipe --from-beginning | head -n 2; echo status=${PIPESTATUS[0]} >&2"
    )
    result = subprocess.run(
        ["bash", "-c", shell], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.stdout == "line 0\nline 1\n"
    assert result.stderr.strip() == "status=141", result.stderr


def test_version():
    from pluglog import __version__

    for command in (
        [sys.executable, "-m", "pluglog.cli.main", "--version"],
        [
            sys.executable,
            "-c",
            "from twisted.scripts.twistd import run; run()",
            "pluglog",
            "--version",
        ],
    ):
        result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert (result.returncode, result.stdout) == (0, f"pluglog {__version__}\n"), result


def _on_a_terminal(broker, *args, data=None):
    """Run the CLI with stderr on a pseudo-terminal (the progress line only
    draws on a TTY); return what it wrote there."""
    import os
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pluglog.cli.main", "-b", broker.bootstrap, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        cwd=ROOT,
    )
    os.close(slave)
    # Read while the CLI runs: Linux may drop what is left in a pty's buffer
    # once its last writer exits (the read then fails with EIO at once).
    chunks = []

    def drain():
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other side is closed
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    proc.communicate(data, timeout=60)
    reader.join(10)
    os.close(master)
    out = b"".join(chunks)
    assert proc.returncode == 0, out
    return out.decode()


def test_progress_line_shows_megabytes_per_second(shared_broker):
    import re

    lines = b"".join(b"%06d" % i + b"x" * 194 + b"\n" for i in range(100_000))  # 20 MB
    for text in (
        _on_a_terminal(shared_broker, "produce", "cli-rate", "--batch-size", "100", data=lines),
        _on_a_terminal(shared_broker, "consume", "cli-rate", "--from-beginning", "--exit"),
    ):
        rates = [float(r) for r in re.findall(r"([\d.]+) MB/s", text)]
        assert rates and rates[-1] > 0.0, text


def test_produce_sends_a_slow_writers_line_without_waiting_for_a_batch(shared_broker):
    import time

    # The first -b address refuses connections: the next one is used.
    from tests.broker_process import free_port

    bootstrap = f"127.0.0.1:{free_port()},{shared_broker.bootstrap}"
    producer = subprocess.Popen(
        [sys.executable, "-m", "pluglog.cli.main", "-b", bootstrap, "produce", "cli-slow"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        producer.stdin.write(b"first\n")
        producer.stdin.flush()
        deadline = time.monotonic() + 20
        seen = []
        while seen != ["first"]:
            assert time.monotonic() < deadline and producer.poll() is None
            time.sleep(0.2)
            result = subprocess.run(
                [sys.executable, "-m", "pluglog.cli.main", "-b", bootstrap, "consume",
                 "cli-slow", "--from-beginning", "--exit"],
                capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
            )  # fmt: skip
            seen = result.stdout.split()
        _, err = producer.communicate(b"second\n", timeout=60)
        assert producer.returncode == 0 and b"Produced 2 records" in err, err
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()


def test_ctrl_c_stops_a_group_consumer_cleanly_and_commits(shared_broker):
    import signal
    import time

    cli(shared_broker, "produce", "cli-int", data="".join(f"r{i}\n" for i in range(40)))
    consumer = subprocess.Popen(
        [sys.executable, "-m", "pluglog.cli.main", "-b", shared_broker.bootstrap, "consume",
         "cli-int", "--group", "int", "--from-beginning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        first = [consumer.stdout.readline().strip() for _ in range(40)]
        time.sleep(0.3)
        consumer.send_signal(signal.SIGINT)
        out, err = consumer.communicate(timeout=30)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    assert consumer.returncode == 0 and "Traceback" not in err, err
    assert first + out.split() == [f"r{i}" for i in range(40)]
    # Its offsets were committed: nothing is left for the group.
    assert cli(shared_broker, "consume", "cli-int", "--group", "int", "--exit").stdout == ""


def test_json_output_for_scripts(shared_broker):
    """``--json`` on topics list|describe, groups list|describe and cluster
    describe: one JSON document whose figures match what was done."""
    import json

    cli(
        shared_broker,
        "topics",
        "create",
        "cli-json",
        "--partitions",
        "2",
        "--config",
        "retention.ms=123456",
    )
    lines = "\n".join(f"k{i}:v{i}" for i in range(40)) + "\n"
    cli(shared_broker, "produce", "cli-json", "--key-separator", ":", data=lines)
    consumer = _consume_and_commit(shared_broker.bootstrap, "cli-json", "scripted", 40)
    consumer.close()

    assert "cli-json" in json.loads(cli(shared_broker, "topics", "list", "--json").stdout)
    topic = json.loads(cli(shared_broker, "topics", "describe", "cli-json", "--json").stdout)
    assert topic["topic"] == "cli-json"
    assert [p["partition"] for p in topic["partitions"]] == [0, 1]
    assert sum(p["end_offset"] - p["start_offset"] for p in topic["partitions"]) == 40
    assert all(p["leader"] == 0 and p["isr"] == [0] for p in topic["partitions"])
    assert topic["configs"]["retention.ms"] == {"value": "123456", "override": True}

    groups = json.loads(cli(shared_broker, "groups", "list", "--json").stdout)
    assert {"group": "scripted", "protocol_type": "consumer"} in groups
    group = json.loads(cli(shared_broker, "groups", "describe", "scripted", "--json").stdout)
    assert group["group"] == "scripted" and group["members"] == []
    rows = [r for r in group["partitions"] if r["topic"] == "cli-json"]
    assert sum(r["committed_offset"] for r in rows) == 40 and all(r["lag"] == 0 for r in rows)

    cluster = json.loads(cli(shared_broker, "cluster", "describe", "--json").stdout)
    assert cluster["controller"] == 0 and [b["id"] for b in cluster["brokers"]] == [0]
    assert cluster["under_replicated"] == 0 and cluster["partitions"] >= 2


def test_top_shows_each_topics_rates_from_the_metrics(tmp_path):
    """``pluglog top`` reads a broker's /metrics: a topic being produced to
    shows a message rate, an idle one 0; a bad URL is one line."""
    import threading

    import confluent_kafka

    from tests.broker_process import BrokerProcess, free_port

    http = free_port()
    broker = BrokerProcess(
        tmp_path / "data", extra_args=["--http", f"tcp:{http}:interface=127.0.0.1"]
    ).start()
    stop = threading.Event()
    try:
        cli(broker, "topics", "create", "top-busy", "--partitions", "1")
        cli(broker, "topics", "create", "top-idle", "--partitions", "1")

        def produce():
            producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
            while not stop.is_set():
                for _ in range(100):
                    producer.produce("top-busy", b"x" * 100)
                producer.flush(10)

        thread = threading.Thread(target=produce)
        thread.start()
        out = cli(
            broker,
            "top",
            "--url",
            f"http://127.0.0.1:{http}",
            "--interval",
            "1",
            "--iterations",
            "2",
        ).stdout
        blocks = [b for b in out.split("\n\n") if b.strip()]
        assert len(blocks) == 2
        rows = {line.split()[0]: line.split() for line in blocks[-1].splitlines()[1:]}
        assert float(rows["top-busy"][1].replace(",", "")) > 0
        assert rows["top-idle"][1] == "0"
        assert list(rows) == ["top-busy", "top-idle"]  # busiest first
        err = cli(broker, "top", "--url", f"http://127.0.0.1:{free_port()}", expect=1).stderr
        assert err.startswith("pluglog: cannot read http://127.0.0.1:") and "Traceback" not in err
        assert "positive number" in cli(broker, "top", "--interval", "0", expect=2).stderr
    finally:
        stop.set()
        if "thread" in locals():
            thread.join()
        broker.stop()
