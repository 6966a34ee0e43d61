"""Topic ids (KIP-516) with real confluent-kafka clients and broker processes.

librdkafka learns topic ids from Metadata v10+ and tells a deleted and
re-created topic from the one it knew by the id changing: only then does it
accept that a topic has fewer partitions (a smaller count under the same id
is taken for stale metadata and ignored), and from Fetch v13 it fetches by
id, so the old topic's partitions answer UNKNOWN_TOPIC_ID instead of the
new topic's records.
"""

import json
import os
import time

import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupTopicPartitions,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from pluglog import topicids
from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

TOPIC = "recreated"


def _hex(uuid):
    """confluent-kafka's Uuid as pluglog's hex id."""
    high = uuid.get_most_significant_bits() & (2**64 - 1)
    low = uuid.get_least_significant_bits() & (2**64 - 1)
    return f"{high:016x}{low:016x}"


def described_id(admin, topic):
    return _hex(admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=20).topic_id)


def file_id(data_dir, topic, partition):
    return topicids.read_partition_metadata(os.path.join(data_dir, f"{topic}-{partition}"))


def _wait(what, check, timeout=30, step=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if step is not None:
            step()
        else:
            time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def broker(tmp_path):
    # No auto-creation: a client's Metadata request must not bring the
    # topic back between the deletion and the re-creation.
    proc = BrokerProcess(tmp_path / "data", settings={"auto.create.topics.enable": "false"})
    proc.start()
    yield proc
    proc.stop()


def test_running_clients_notice_a_recreated_topic(broker):
    bootstrap = f"127.0.0.1:{broker.port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 10, 1)])[TOPIC].result(timeout=20)
    first = described_id(admin, TOPIC)
    assert first == file_id(broker.data_dir, TOPIC, 9)

    reports = []

    def delivered(err, msg):
        reports.append((err, msg.partition(), msg.value()))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "recreate",
            "auto.offset.reset": "earliest",
            "auto.commit.interval.ms": 200,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumed = []

    def poll():
        producer.poll(0)
        msg = consumer.poll(0.1)
        if msg is not None and not msg.error():
            consumed.append((msg.partition(), msg.offset(), msg.value()))

    try:
        # 200 records in each of the 10 partitions, all read by the group:
        # more than the new topic will hold in any partition, so the old
        # positions are out of range there whenever the consumer notices
        # (librdkafka 2.16 keeps a partition's position across a topic id
        # change: its FIXME in rd_kafka_topic_metadata_update).
        for i in range(2000):
            producer.produce(TOPIC, value=b"old-%d" % i, partition=i % 10, on_delivery=delivered)
        assert producer.flush(20) == 0
        assert {p for err, p, _ in reports if err is None} == set(range(10))
        consumer.subscribe([TOPIC])
        _wait("the old records", lambda: len(consumed) >= 2000, step=poll)
        consumer.commit(asynchronous=False)
        wanted = ConsumerGroupTopicPartitions(
            "recreate", [TopicPartition(TOPIC, p) for p in range(10)]
        )
        listed = admin.list_consumer_group_offsets([wanted])["recreate"].result(timeout=20)
        assert {tp.offset for tp in listed.topic_partitions} == {200}

        # Deleted and created again with 3 partitions, while both run.
        admin.delete_topics([TOPIC])[TOPIC].result(timeout=20)
        _wait("the deletion", lambda: TOPIC not in admin.list_topics(timeout=10).topics)
        # The group's committed offsets went with the topic: none of them
        # can apply to the topic created next under the same name.
        listed = admin.list_consumer_group_offsets([wanted])["recreate"].result(timeout=20)
        assert {tp.offset for tp in listed.topic_partitions} == {OFFSET_INVALID}
        admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(timeout=20)
        second = described_id(admin, TOPIC)
        assert second != first and second == file_id(broker.data_dir, TOPIC, 0)

        # Keyed records spread over every partition the producer believes in.
        reports.clear()
        for i in range(300):
            producer.produce(TOPIC, key=b"k%d" % i, value=b"new-%d" % i, on_delivery=delivered)
        _wait("every delivery report", lambda: len(reports) >= 300, step=poll)
        # Nothing went to partitions 3-9: records the producer had placed
        # there before it saw the new id fail at once ("Unknown partition")
        # instead of waiting for partitions that no longer exist.
        assert {p for err, p, _ in reports if err is None} <= {0, 1, 2}
        failed = {err.name() for err, _, _ in reports if err is not None}
        # librdkafka fails them with _UNKNOWN_PARTITION when the removed
        # partition leaves its broker thread, or with _DESTROY when its
        # destructor finds records still queued (rd_kafka_toppar_destroy_final:
        # a record requeued after the partition left, e.g. from a Produce
        # answered UNKNOWN_TOPIC_OR_PARTITION for it); both fail at once. Seen
        # once at load 9-15. Any other failure (a timeout, a broker error) is not.
        assert failed <= {"_UNKNOWN_PARTITION", "_DESTROY"}, failed
        # Once it knows the new topic, everything is delivered to 0-2.
        reports.clear()
        for i in range(300, 330):
            producer.produce(TOPIC, key=b"k%d" % i, value=b"new-%d" % i, on_delivery=delivered)
        assert producer.flush(20) == 0
        assert [(err, p < 3) for err, p, _ in reports] == [(None, True)] * 30
        written = {v for err, _, v in reports if err is None}

        # The consumer drops partitions 3-9 and reads the new topic from its
        # start: the old positions (offset 200) are out of range there.
        new = lambda: [c for c in consumed if c[2].startswith(b"new-")]  # noqa: E731
        _wait("the new records", lambda: written <= {v for _, _, v in new()}, step=poll)
        _wait(
            "the consumer's assignment to shrink",
            lambda: {tp.partition for tp in consumer.assignment()} == {0, 1, 2},
            step=poll,
        )
        assert {p for p, _, _ in new()} <= {0, 1, 2}
        for partition in {p for p, _, _ in new()}:
            assert min(o for p, o, _ in new() if p == partition) == 0
    finally:
        consumer.close()
        producer.flush(5)


def test_describe_topics_restart_and_a_data_dir_from_before_ids(tmp_path):
    data = tmp_path / "data"
    proc = BrokerProcess(data).start()
    try:
        bootstrap = f"127.0.0.1:{proc.port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("kept", 2, 1)])["kept"].result(timeout=20)
        kept = described_id(admin, "kept")
        assert kept == file_id(proc.data_dir, "kept", 0) == file_id(proc.data_dir, "kept", 1)
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(20):
            producer.produce("kept", value=b"%d" % i, partition=i % 2)
        assert producer.flush(20) == 0
        proc.stop()
        proc.start()
        assert described_id(AdminClient({"bootstrap.servers": bootstrap}), "kept") == kept
        proc.stop()
        # As an older pluglog left it: no ids anywhere.
        path = data / "pluglog-metadata.json"
        state = json.loads(path.read_text())
        for topic in state["topics"].values():
            topic.pop("topic_id", None)
        path.write_text(json.dumps(state))
        for index in (0, 1):
            os.unlink(data / f"kept-{index}" / "partition.metadata")
        proc.start()
        bootstrap = f"127.0.0.1:{proc.port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        given = described_id(admin, "kept")
        assert given not in ("", kept) and int(given, 16)
        assert file_id(proc.data_dir, "kept", 1) == given
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "old", "auto.offset.reset": "earliest"}
        )
        try:
            consumer.subscribe(["kept"])
            seen = []
            _wait(
                "the records",
                lambda: len(seen) >= 20,
                step=lambda: seen.extend(
                    m for m in [consumer.poll(0.2)] if m is not None and not m.error()
                ),
            )
        finally:
            consumer.close()
        proc.stop()
        proc.start()
        assert (
            described_id(AdminClient({"bootstrap.servers": f"127.0.0.1:{proc.port}"}), "kept")
            == given
        )
    finally:
        proc.stop()


def test_kafka_python_creates_and_deletes_by_topic_id(broker):
    # kafka-python 3 sends CreateTopics v7 and DeleteTopics v6, which takes a
    # topic id in place of a name (KIP-516).
    import uuid

    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    bootstrap = f"127.0.0.1:{broker.port}"
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        client.create_topics([KpNewTopic("by-id", 2, 1)])
        hex_id = file_id(broker.data_dir, "by-id", 0)
        result = client.delete_topics([uuid.UUID(hex_id)])
        (entry,) = result["topics"]
        assert (entry["name"], entry["error_code"]) == ("by-id", 0)
        assert "by-id" not in client.list_topics()
        missing = client.delete_topics([uuid.UUID(hex_id)], raise_errors=False)
        assert missing["topics"][0]["error_code"] == 100  # UNKNOWN_TOPIC_ID
    finally:
        client.close()
