"""A reassignment copies the log to the new replica at the throttled rate, then completes."""

import time

from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition

from tests.chaos import create_topic

RATE = 200_000  # bytes/s
SIZE = 1_200_000


def _fill(bootstrap, topic):
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(SIZE // 1000):
        producer.produce(topic, b"%06d" % i + b"x" * 994, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0


def _move(c, admin, topic):
    (source,) = c.partition(topic, 0)["replicas"]
    target = [source, next(n for n in c.brokers if n != source)]
    started = time.monotonic()
    tp = TopicPartition(topic, 0)
    assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
    c.wait_for(
        lambda: sorted(c.partition(topic, 0)["isr"]) == sorted(target),
        timeout=90,
        what=f"{topic} on {target}",
    )
    return time.monotonic() - started


def test_reassignment_follows_the_replication_throttle(cluster):
    c = cluster(
        3,
        settings={
            "follower.replication.throttled.rate": str(RATE),
            "leader.replication.throttled.rate": str(RATE),
            "replication.quota.window.num": "2",
            "replica.fetch.max.bytes": "65536",
        },
    )
    throttled = {
        "leader.replication.throttled.replicas": "*",
        "follower.replication.throttled.replicas": "*",
    }
    create_topic(c.bootstrap, "free", 1, rf=1, min_isr=1)
    create_topic(c.bootstrap, "slow", 1, rf=1, min_isr=1, config=throttled)
    _fill(c.bootstrap, "free")
    _fill(c.bootstrap, "slow")
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30000)
    try:
        free = _move(c, admin, "free")
        slow = _move(c, admin, "slow")
    finally:
        admin.close()
    print(f"unthrottled move {free:.1f}s, throttled move {slow:.1f}s")
    # A rate sampled over 2 one-second windows lets about a window's worth
    # through when the oldest window expires, so the copy averages between
    # RATE and 2 x RATE (Kafka's default of 11 windows is smoother).
    assert slow >= SIZE / (2 * RATE), (free, slow)
    assert slow > free, (free, slow)
