"""Per-record errors (KIP-467) as librdkafka sees them.

A batch holding some records a topic refuses (records without a key on a
compacted topic) is refused whole, as Kafka refuses it, and the Produce v8
answer names each bad record by its index in the batch. librdkafka then fails
exactly those messages with INVALID_RECORD and reports the others of the batch
with its local _INVALID_DIFFERENT_RECORD ("part of a batch which had invalid
records": not written, safe to send again). Batches of other partitions in the
same request are appended.
"""

import confluent_kafka
import pytest
from confluent_kafka import KafkaError

from tests.integration.clients import create_topic

pytestmark = pytest.mark.integration

BAD = {3, 17, 18, 40, 41, 42, 66, 80, 97, 99}  # positions of the keyless messages


def _producer(bootstrap):
    # One batch per partition and one request for both: linger long enough
    # for all messages, flushed at once.
    return confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 2000,
            "batch.num.messages": 1000,
            "enable.idempotence": False,
        }
    )


def _consume(bootstrap, topic, partition, count):
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, partition, 0)])
    out = []
    try:
        for _ in range(100):
            out += [m for m in consumer.consume(200, 0.2) if not m.error()]
            if len(out) >= count:
                break
    finally:
        consumer.close()
    return out


def test_librdkafka_fails_exactly_the_bad_records(shared_broker):
    bootstrap, topic = shared_broker.bootstrap, "record-errors"
    create_topic(bootstrap, topic, partitions=2, config={"cleanup.policy": "compact"})
    reports = {}

    def delivered(error, message):
        reports[(message.partition(), message.value())] = error

    producer = _producer(bootstrap)
    for i in range(100):
        key = None if i in BAD else b"k%d" % i
        producer.produce(topic, key=key, value=b"p0-%d" % i, partition=0, on_delivery=delivered)
    for i in range(50):
        producer.produce(
            topic, key=b"k%d" % i, value=b"p1-%d" % i, partition=1, on_delivery=delivered
        )
    assert producer.flush(30) == 0

    codes = {
        i: reports[(0, b"p0-%d" % i)].code() if reports[(0, b"p0-%d" % i)] else None
        for i in range(100)
    }
    assert {i for i, code in codes.items() if code == KafkaError.INVALID_RECORD} == BAD
    assert {i for i, code in codes.items() if code != KafkaError.INVALID_RECORD} == {
        i for i, code in codes.items() if code == KafkaError._INVALID_DIFFERENT_RECORD
    }
    assert len([c for c in codes.values() if c == KafkaError._INVALID_DIFFERENT_RECORD]) == 90
    # The other partition's batch in the same request was appended.
    assert all(reports[(1, b"p1-%d" % i)] is None for i in range(50))

    # The 90 good messages were not written; sent again, they are.
    again = _producer(bootstrap)
    for i in sorted(set(range(100)) - BAD):
        again.produce(
            topic, key=b"k%d" % i, value=b"p0-%d" % i, partition=0, on_delivery=delivered
        )
    assert again.flush(30) == 0
    assert all(reports[(0, b"p0-%d" % i)] is None for i in set(range(100)) - BAD)
    stored = _consume(bootstrap, topic, 0, 90)
    assert [m.value() for m in stored] == [b"p0-%d" % i for i in sorted(set(range(100)) - BAD)]
    assert [m.offset() for m in stored] == list(range(90))  # nothing of the refused batch
    assert len(_consume(bootstrap, topic, 1, 50)) == 50
