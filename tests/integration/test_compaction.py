"""Compaction against the real broker process with confluent-kafka (and kafka-python).

200,000 keyed records over 1,000 keys go to a compacted topic; after the
cleaner ran, a consumer from the beginning sees exactly the latest value of
each key, and after delete.retention.ms no deleted key.
"""

import os
import subprocess
import sys
import time

import confluent_kafka
import pytest

from tests.broker_process import ROOT, BrokerProcess
from tests.integration.clients import create_topic

KEYS = 1000
RECORDS = 200_000


def disk_bytes(path):
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            if name.endswith(".log"):
                total += os.path.getsize(os.path.join(root, name))
    return total


def read_all(bootstrap, topic, timeout=60):
    """Every record of partition 0 from the beginning: ``[(key, value)]``."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(msg.error())
            out.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    raise AssertionError(f"no end of partition within {timeout}s ({len(out)} records)")


def wait_for(predicate, timeout, what, broker):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    passes = [line for line in broker.log().splitlines() if "clean" in line]
    raise AssertionError(f"timed out waiting for {what}; cleaner log: {passes[-5:]}")


@pytest.fixture
def cleaner_broker(tmp_path):
    proc = BrokerProcess(tmp_path / "data", settings={"log.cleaner.backoff.ms": "300"}).start()
    yield proc
    proc.stop()


def test_confluent_compacted_topic_keeps_latest_value_per_key(cleaner_broker):
    bootstrap = cleaner_broker.bootstrap
    topic = "compacted"
    create_topic(
        bootstrap,
        topic,
        partitions=1,
        config={
            "cleanup.policy": "compact",
            "segment.bytes": str(1 << 20),
            "segment.ms": "3000",
            "min.cleanable.dirty.ratio": "0.1",
            "delete.retention.ms": "10000",
        },
    )
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"}
    )
    latest = {}

    def produce(key, value):
        latest[key] = value
        while True:
            try:
                producer.produce(topic, value, key, partition=0)
                return
            except BufferError:
                producer.poll(0.05)

    for i in range(RECORDS):
        produce(f"key-{i % KEYS:04d}".encode(), f"value-{i}".encode())
    deleted = [f"key-{k:04d}".encode() for k in range(0, KEYS, 10)]
    for key in deleted:
        produce(key, None)
    assert producer.flush(60) == 0
    # A keyless record is refused by a compacted topic.
    errors = []
    producer.produce(topic, b"no key", partition=0, on_delivery=lambda e, m: errors.append(e))
    producer.flush(30)
    assert errors and errors[0].code() == confluent_kafka.KafkaError.INVALID_RECORD
    data_dir = os.path.join(cleaner_broker.data_dir, f"{topic}-0")
    before = disk_bytes(data_dir)
    # Roll the active segment (segment.ms) so every value is cleanable.
    time.sleep(3.2)
    producer.produce(topic, b"end", b"sentinel", partition=0)
    assert producer.flush(30) == 0
    latest[b"sentinel"] = b"end"

    def compacted():
        got = read_all(bootstrap, topic)
        return got if len(got) == len(latest) else None

    got = wait_for(compacted, 90, "the cleaner", cleaner_broker)
    after = disk_bytes(data_dir)
    print(f"\ncompaction: {before} bytes of .log before, {after} after ({before / after:.0f}x)")
    assert dict(got) == latest  # one record per key, its latest value; tombstones still there
    assert len({key for key, _ in got}) == len(got)
    assert after < before / 20

    def tombstones_gone():
        got = read_all(bootstrap, topic)
        return got if len(got) == len(latest) - len(deleted) else None

    got = wait_for(tombstones_gone, 60, "tombstones to pass delete.retention.ms", cleaner_broker)
    alive = {k: v for k, v in latest.items() if v is not None}
    assert dict(got) == alive
    # kafka-python reads the compacted log (offset gaps, empty batches) alike.
    import kafka

    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    consumer.assign([kafka.TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    seen = []
    deadline = time.monotonic() + 30
    while len(seen) < len(alive) and time.monotonic() < deadline:
        for records in consumer.poll(1000).values():
            seen += [(r.key, r.value) for r in records]
    consumer.close()
    assert dict(seen) == alive and len(seen) == len(alive)
    # pluglog's console consumer ends at the end offset of a compacted log
    # (its batches keep offsets whose records are gone), printing each once.
    result = subprocess.run(
        [sys.executable, "-m", "pluglog.cli.main", "-b", bootstrap, "consume", topic]
        + ["--from-beginning", "--exit", "--print-key"],
        capture_output=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert dict(line.split(b"\t", 1) for line in lines) == alive and len(lines) == len(alive)
