"""pluglog's Twisted client against librdkafka's in-process mock cluster.

``confluent_kafka.Producer({"test.mock.num.brokers": 3})`` starts a 3-broker
mock Kafka cluster inside librdkafka (a different implementation of the
protocol from pluglog's broker); its brokers' addresses come from that
producer's metadata. The same interop checks as test_clients run against it:
what the Twisted producer writes (every codec, keys, headers, idempotent)
confluent-kafka and kafka-python read back identical, and the Twisted
consumer reads what they write.
"""

import time

import confluent_kafka
import kafka
import pytest

from tests.integration.clients import (
    _norm_headers,
    by_partition,
    consume_confluent,
    consume_pluglog,
    make_records,
    produce_confluent,
    produce_kafka_python,
    produce_pluglog,
)
from tests.integration.test_client_group import split_across_leave_and_kill

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
COUNT = 1000


@pytest.fixture(scope="module")
def mock_cluster():
    owner = confluent_kafka.Producer({"test.mock.num.brokers": 3, "log_level": 3})
    brokers = owner.list_topics(timeout=10).brokers
    assert len(brokers) == 3
    yield ",".join(f"{b.host}:{b.port}" for b in brokers.values())
    owner.flush(5)


@pytest.mark.parametrize("codec", CODECS)
def test_pluglog_producer_read_by_others(mock_cluster, codec):
    topic = f"from-pluglog-{codec}"
    records = make_records(COUNT, seed=7)
    placed = produce_pluglog(mock_cluster, topic, records, codec)
    # Offsets per partition are 0..n-1: nothing duplicated by retries.
    for partition in range(3):
        offsets = [o for p, o in placed if p == partition]
        assert offsets == list(range(len(offsets)))
    expected = by_partition(records)
    assert by_partition(consume_confluent(mock_cluster, topic, 3, COUNT, timeout=30)) == expected
    assert by_partition(consume_kafka_python_fixed(mock_cluster, topic, COUNT)) == expected


def consume_kafka_python_fixed(bootstrap, topic, expected):
    """kafka-python 3 opens with ApiVersions v4, which the mock answers in a
    shape kafka-python cannot decode; a fixed api_version skips that probe."""
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, api_version=(2, 3)
    )
    tps = [kafka.TopicPartition(topic, p) for p in range(3)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    out = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                out += [(m.partition, m.key, m.value, _norm_headers(m.headers)) for m in records]
    finally:
        consumer.close()
    return out


def produce_kafka_python_fixed(bootstrap, topic, records, compression):
    produce_kafka_python(bootstrap, topic, records, compression, api_version=(2, 3))


@pytest.mark.parametrize("produce", [produce_confluent, produce_kafka_python_fixed])
def test_pluglog_consumer_reads_others(mock_cluster, produce):
    topic = f"to-pluglog-{produce.__name__}"
    records = make_records(COUNT, seed=3)
    produce(mock_cluster, topic, records, "lz4")
    got = consume_pluglog(mock_cluster, topic, 3, COUNT, timeout=30)
    assert by_partition(got) == by_partition(records)


def test_mixed_group_splits_a_topic_across_leave_and_kill(mock_cluster, tmp_path):
    """Two Twisted members and one confluent-kafka member, each its own
    process, in a group coordinated by librdkafka's mock cluster: the mock's
    brokers listen on real TCP ports, so members reach it from subprocesses.
    The mock itself lives in this process and cannot be SIGKILLed; what is
    killed is a Twisted member's process, as against the pluglog broker."""
    split_across_leave_and_kill(mock_cluster, tmp_path, timeout=90, create=auto_create)


def auto_create(bootstrap, topic, partitions):
    """The mock answers no CreateTopics; a producer's metadata request creates
    the topic with the mock's default of 4 partitions."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    meta = producer.list_topics(topic, timeout=10).topics[topic]
    assert meta.error is None and len(meta.partitions) == 4
