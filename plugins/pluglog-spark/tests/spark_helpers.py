"""Real-client helpers for the Spark tests: produce, consume, admin calls."""

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient

BASE_TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def create_topic(bootstrap, topic, partitions, config=None):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, 1, config=dict(config or {}))
    futures = admin.create_topics([new], operation_timeout=30)
    futures[topic].result(30)


def make_records(count, start=0):
    """Deterministic (partition-less) records: key, value, headers, timestamp."""
    out = []
    for i in range(start, start + count):
        if i % 3 == 0:
            headers = [("trace", b"t%d" % i), ("n", str(i % 7).encode())]
        elif i % 3 == 1:
            headers = [("empty", b"")]
        else:
            headers = None
        key = None if i % 11 == 0 else b"key-%d" % i
        value = b"value-%08d-" % i + bytes([i % 251]) * (i % 40)
        out.append((key, value, headers, BASE_TS + i * 7))
    return out


def produce(bootstrap, topic, records, partitions, config=None):
    """Send ``records`` round-robin over ``partitions``; return the expected rows
    ``(partition, offset, key, value, headers, timestamp)`` given ``next_offsets``."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 10,
            "enable.idempotence": True,
            "queue.buffering.max.messages": 1000000,
            **(config or {}),
        }
    )
    failures = []

    def delivered(err, msg):
        if err is not None:
            failures.append(err)

    for i, (key, value, headers, ts) in enumerate(records):
        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    key,
                    partition=i % partitions,
                    headers=headers,
                    timestamp=ts,
                    on_delivery=delivered,
                )
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert not failures, failures[:3]


def consume_all(bootstrap, topic, partitions, isolation="read_committed"):
    """Every record of ``topic`` as (partition, offset, key, value, headers)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "spark-test-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    out, at_end = [], set()
    idle = 0
    while len(at_end) < partitions and idle < 40:
        msgs = consumer.consume(10000, 0.5)
        idle = 0 if msgs else idle + 1
        for m in msgs:
            if m.error():
                if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                    continue
                raise RuntimeError(m.error())
            at_end.discard(m.partition())
            out.append((m.partition(), m.offset(), m.key(), m.value(), m.headers()))
    consumer.close()
    return out


def delete_records(bootstrap, topic, partition, before):
    with BlockingClient.from_bootstrap(bootstrap) as client:
        resp = client.request(
            codec.DELETE_RECORDS,
            1,
            {
                "topics": [
                    {
                        "name": topic,
                        "partitions": [{"partition_index": partition, "offset": before}],
                    }
                ],
                "timeout_ms": 30000,
            },
        )
    entry = resp["topics"][0]["partitions"][0]
    assert entry["error_code"] == 0, entry
    return entry["low_watermark"]
