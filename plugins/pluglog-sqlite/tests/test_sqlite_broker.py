"""The ``sqlite`` storage in a real broker, selected by name, with confluent-kafka:
a round trip, a consumer group, a compacted topic that compacts, a SIGKILL."""

import os
import sqlite3
import time

import confluent_kafka
import pytest

from tests.broker_process import BrokerProcess
from tests.integration.clients import consume_confluent, create_topic
from tests.integration.test_compaction import read_all

SETTINGS = {"log.cleaner.backoff.ms": "200"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("sqlite") / "data",
        settings=SETTINGS,
        extra_args=["--storage", "sqlite"],
    ).start()
    yield proc
    proc.stop()


def _db(broker, topic, partition):
    return os.path.join(broker.data_dir, "sqlite", f"{topic}-{partition}.db")


def _produce(bootstrap, topic, records, **config):
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for partition, key, value in records:
        producer.produce(topic, value, key, partition=partition)
    assert producer.flush(30) == 0


def test_round_trip_lands_in_sqlite(broker):
    create_topic(broker.bootstrap, "rt", partitions=3)
    records = [(i % 3, f"k{i}".encode(), f"v{i}".encode()) for i in range(900)]
    _produce(broker.bootstrap, "rt", records, **{"compression.type": "lz4"})
    got = consume_confluent(broker.bootstrap, "rt", 3, len(records))
    assert sorted((p, k, v) for p, k, v, _headers in got) == sorted(records)
    with sqlite3.connect(_db(broker, "rt", 0)) as db:
        assert db.execute("SELECT max(last_offset) + 1 FROM batches").fetchone()[0] == 300
    assert "Traceback" not in broker.log()


def test_consumer_group_commits_and_resumes(broker):
    create_topic(broker.bootstrap, "grp", partitions=2)
    _produce(broker.bootstrap, "grp", [(i % 2, None, b"a%d" % i) for i in range(100)])

    def consumer():
        c = confluent_kafka.Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "sqlite-group",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        c.subscribe(["grp"])
        return c

    first = consumer()
    seen = []
    deadline = time.monotonic() + 60
    while len(seen) < 100 and time.monotonic() < deadline:
        seen += [m.value() for m in first.consume(100, 0.5) if m.error() is None]
    first.commit(asynchronous=False)
    first.close()
    assert len(seen) == 100
    _produce(broker.bootstrap, "grp", [(i % 2, None, b"b%d" % i) for i in range(10)])
    second = consumer()
    later = []
    deadline = time.monotonic() + 60
    while len(later) < 10 and time.monotonic() < deadline:
        later += [m.value() for m in second.consume(100, 0.5) if m.error() is None]
    second.close()
    assert sorted(later) == sorted(b"b%d" % i for i in range(10))
    assert os.path.exists(_db(broker, "__consumer_offsets", 0))


def test_compacted_topic_compacts(broker):
    topic = "cmp"
    create_topic(
        broker.bootstrap,
        topic,
        partitions=1,
        config={"cleanup.policy": "compact", "segment.bytes": "1024"},
    )
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(240):
        producer.produce(topic, f"value-{i}".encode(), f"key-{i % 10}".encode(), partition=0)
        producer.flush(10)  # one batch per record: many segments
    deadline = time.monotonic() + 30
    while True:
        got = read_all(broker.bootstrap, topic)
        if len(got) < 60 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    # The active segment is never compacted: a few duplicates may stay there.
    assert len(got) < 60, f"{len(got)} of 240 records still there"
    assert dict(got) == {f"key-{k}".encode(): f"value-{230 + k}".encode() for k in range(10)}
    with sqlite3.connect(_db(broker, topic, 0)) as db:
        assert db.execute("SELECT max(last_offset) FROM batches").fetchone()[0] == 239
    assert "compacted cmp-0" in broker.log()


def test_sigkill_keeps_every_acknowledged_record(tmp_path):
    args = ["--storage", "sqlite"]
    broker = BrokerProcess(tmp_path / "data", extra_args=args).start()
    create_topic(broker.bootstrap, "crash", partitions=2)
    acked = {}

    def report(err, msg):
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 1,
            "message.timeout.ms": 3000,
            "reconnect.backoff.max.ms": 200,
        }
    )
    i, killed = 0, False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            producer.produce("crash", value=b"rec-%d" % i, partition=i % 2, on_delivery=report)
            i += 1
        except BufferError:
            pass
        producer.poll(0)
        if len(acked) >= 5000:
            broker.kill()  # SIGKILL with requests in flight
            killed = True
            break
    producer.flush(10)
    assert killed, "the loop never reached the kill point"
    restarted = BrokerProcess(tmp_path / "data", port=broker.port, extra_args=args).start()
    try:
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": restarted.bootstrap,
                "group.id": "check",
                "enable.auto.commit": False,
            }
        )
        consumer.assign(
            [
                confluent_kafka.TopicPartition("crash", p, confluent_kafka.OFFSET_BEGINNING)
                for p in (0, 1)
            ]
        )
        stored = {}
        values = []
        end = time.monotonic() + 60
        while time.monotonic() < end and len(stored) < len(acked):
            for msg in consumer.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                stored[(msg.partition(), msg.offset())] = msg.value()
                values.append(msg.value())
        consumer.close()
        missing = [k for k in acked if stored.get(k) != acked[k]]
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
        assert all(values.count(v) == 1 for v in acked.values())
    finally:
        restarted.stop()
