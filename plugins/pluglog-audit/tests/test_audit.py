"""pluglog-audit: installed, found through entry points, and auditing a real broker."""

import importlib.metadata
import os
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from pluglog_audit import AuditingProducer, counts

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.broker_process import BrokerProcess  # noqa: E402


def test_windows_and_records():
    assert counts.parse_window("90s") == 90_000
    assert counts.parse_window("5m") == 300_000
    assert counts.parse_window("250") == 250
    for bad in ("0s", "soon", "-5m", ""):
        with pytest.raises(ValueError, match="window"):
            counts.parse_window(bad)
    assert counts.window_start(125_000, 60_000) == 120_000
    key, value = counts.encode("p1", "t", 120_000, 60_000, 7)
    assert key == b"p1|t|120000"
    assert counts.decode(value) == ("t", 120_000, 60_000, 7)


def test_installed_and_found_through_entry_points():
    dist = importlib.metadata.distribution("pluglog-audit")
    eps = [ep for ep in dist.entry_points if ep.group == "pluglog"]
    assert [(ep.name, ep.value) for ep in eps] == [("audit", "pluglog_audit.plugin")]
    from pluglog.plugins import make_plugin_manager

    manager = make_plugin_manager()
    assert manager.get_plugin("audit") is not None
    from pluglog.cli.main import build_parser

    args = build_parser().parse_args(["audit", "--group", "g", "--window", "5m"])
    assert args.command == "audit" and args.window == "5m"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("audit") / "data").start()
    yield proc
    proc.stop()


def audit(broker, *args):
    return subprocess.run(
        [sys.executable, "-m", "pluglog.cli.main", "-b", broker.bootstrap, "audit", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def consume_and_commit(broker, topic, group, count):
    """Consume ``count`` records of ``topic`` as ``group`` and commit them."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    try:
        while got < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            got += 1
            if got == count:
                tp = TopicPartition(topic, msg.partition(), msg.offset() + 1)
                consumer.commit(offsets=[tp], asynchronous=False)
    finally:
        consumer.close()
    assert got == count


def totals(stdout):
    line = [ln for ln in stdout.splitlines() if ln.startswith("total")][0]
    _total, _dash, produced, consumed, gap, *_ = line.split("\t")
    return int(produced), int(consumed), int(gap)


def test_equal_counts_then_the_exact_gap(broker):
    producer = AuditingProducer(
        {"bootstrap.servers": broker.bootstrap}, window_ms=60_000, producer_name="p-test"
    )
    for i in range(50):
        producer.produce("audited", value=f"r{i}".encode(), key=b"k")
    assert producer.flush(30) == 0
    assert producer.failed == 0

    # Nothing consumed yet: the whole production is the gap.
    result = audit(broker, "--group", "billing", "--window", "1h")
    assert result.returncode == 1, result.stderr
    assert totals(result.stdout) == (50, 0, 50)

    consume_and_commit(broker, "audited", "billing", 50)
    result = audit(broker, "--group", "billing", "--window", "1h")
    assert result.returncode == 0, result.stdout + result.stderr
    assert totals(result.stdout) == (50, 50, 0)
    assert "OK" in result.stdout

    # Another group withheld 20 of them (consumed and committed only 30).
    consume_and_commit(broker, "audited", "partial", 30)
    result = audit(broker, "--group", "partial", "--window", "60s", "--topic", "audited")
    assert result.returncode == 1
    assert totals(result.stdout) == (50, 30, 20)
    rows = [ln.split("\t") for ln in result.stdout.splitlines()[1:-1]]
    assert sum(int(r[4]) for r in rows) == 20 and all(r[0] == "audited" for r in rows)

    bad = audit(broker, "--group", "billing", "--window", "90s")
    assert bad.returncode == 1 and "not a multiple" in bad.stderr
    bad = audit(broker, "--group", "billing", "--window", "soon")
    assert bad.returncode == 1 and "--window" in bad.stderr
