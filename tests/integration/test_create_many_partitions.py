"""One CreateTopics of thousands of partitions against a serving broker (issue 24).

Real broker processes and confluent-kafka. The broker opens a big topic's
logs in slices of its event loop and syncs them together before it answers
(pluglog.broker.log_opening), so a producer to another topic keeps getting
acknowledgements meanwhile; and a SIGKILL in the middle of the creation
leaves a data dir the broker restarts from, with the topic usable.
"""

import os
import threading

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

BIG = 1000


def _admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _produce_one(producer, topic, partition, value):
    """Produce and wait for the acknowledgement; returns its offset."""
    out = []
    producer.produce(
        topic, value, partition=partition, on_delivery=lambda err, msg: out.append((err, msg))
    )
    producer.flush(60)
    (err, msg), *_ = out
    assert err is None, err
    return msg.offset()


def test_a_producer_to_another_topic_is_acknowledged_during_a_big_create_topics(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = _admin(broker)
        admin.create_topics([NewTopic("probe", 1, 1)])["probe"].result(60)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 0})
        _produce_one(producer, "probe", 0, b"warm")  # connected, metadata known
        events = []
        answered = threading.Event()
        future = admin.create_topics([NewTopic("big", BIG, 1)], request_timeout=300)["big"]
        future.add_done_callback(lambda _f: (events.append("created"), answered.set()))
        sent = 0
        while not answered.is_set():
            _produce_one(producer, "probe", 0, b"during")
            sent += 1
            if not answered.is_set():
                events.append("ack")
        future.result()
        # Acknowledgements of produces sent after the CreateTopics arrived
        # before its answer: the creation did not hold the event loop. (With
        # every log opened in one turn, at most the one produce already in
        # flight could be answered.)
        assert events.index("created") >= 3, (events[:10], sent)
        topics = admin.list_topics(timeout=30).topics
        assert len(topics["big"].partitions) == BIG
        assert _produce_one(producer, "big", BIG - 1, b"last") == 0
    finally:
        broker.stop(timeout=120)


def _big_dirs(data_dir):
    return sum(1 for name in os.listdir(data_dir) if name.startswith("big-"))


def test_a_broker_killed_during_a_big_create_topics_restarts_with_the_topic_usable(tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    admin = _admin(broker)
    future = admin.create_topics([NewTopic("big", BIG, 1)], request_timeout=300)["big"]
    while _big_dirs(data) < 200 and not future.done():
        threading.Event().wait(0.005)
    assert not future.done(), "the creation finished before the kill"
    broker.kill()
    restarted = BrokerProcess(data, port=broker.port).start()
    try:
        log = restarted.log_since_start()
        assert "Traceback" not in log
        assert "is offline" not in log
        topics = _admin(restarted).list_topics(timeout=30).topics
        # One broker records the topic before it makes the logs: it is back
        # whole, every partition servable (empty logs made at the restart).
        assert len(topics["big"].partitions) == BIG
        producer = Producer({"bootstrap.servers": restarted.bootstrap, "acks": 1})
        for partition in (0, BIG // 2, BIG - 1):
            assert _produce_one(producer, "big", partition, b"p%d" % partition) == 0
        consumer = Consumer({"bootstrap.servers": restarted.bootstrap, "group.id": "g"})
        consumer.assign([TopicPartition("big", BIG - 1, 0)])
        msg = None
        for _ in range(60):
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                break
        consumer.close()
        assert msg is not None and msg.value() == b"p%d" % (BIG - 1)
    finally:
        restarted.stop(timeout=120)
