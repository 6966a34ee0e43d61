"""Internal topics refuse client Produce, DeleteTopics and DeleteRecords.

``__consumer_offsets`` belongs to the group coordinator: a client batch in it
could forge or corrupt committed offsets, and deleting it (or its records)
would lose them. Kafka answers INVALID_TOPIC_EXCEPTION ("Cannot append to
internal topic", "Cannot delete records of internal topic"); the
coordinator's own appends keep working, across a restart.
"""

import confluent_kafka

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from pluglog.errors import INVALID_TOPIC_EXCEPTION, NONE
from pluglog.protocol.records import Record, build_batch
from tests.broker_process import BrokerProcess
from tests.integration.clients import create_topic

OFFSETS = "__consumer_offsets"


def produce(client, topic, partitions, version=8):
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": p, "records": batch} for p, batch in partitions],
            }
        ],
    }
    response = client.request(codec.PRODUCE, version, body)
    return [
        (p["error_code"], p.get("error_message"))
        for p in response["responses"][0]["partition_responses"]
    ]


def end_offset(client, topic, partition=0):
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}
        ],
    }
    return client.request(codec.LIST_OFFSETS, 5, body)["topics"][0]["partitions"][0]["offset"]


def commit(bootstrap, group, topic, offset):
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[confluent_kafka.TopicPartition(topic, 0, offset)], asynchronous=False
        )
        return consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        consumer.close()


def test_internal_topic_refuses_clients_and_serves_the_coordinator(tmp_path):
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(proc.bootstrap, "plain", partitions=1)
        # Not internal in Kafka either: only Topic.INTERNAL_TOPICS are.
        create_topic(proc.bootstrap, "__mine", partitions=1)
        assert commit(proc.bootstrap, "g1", "plain", 5) == 5  # creates __consumer_offsets
        batch = build_batch([Record(b"forged", b"offset")])
        with BlockingClient("127.0.0.1", proc.port) as client:
            before = [end_offset(client, OFFSETS, p) for p in range(3)]
            # Fast lane (one partition) and general handler (two partitions).
            for version in (8, 3):
                code, message = produce(client, OFFSETS, [(0, batch)], version)[0]
                assert code == INVALID_TOPIC_EXCEPTION
                assert version < 8 or message == f"Cannot append to internal topic {OFFSETS}"
            assert [c for c, _ in produce(client, OFFSETS, [(1, batch), (2, batch)])] == [
                INVALID_TOPIC_EXCEPTION
            ] * 2
            assert [end_offset(client, OFFSETS, p) for p in range(3)] == before
            # A name that merely starts with __ is an ordinary topic.
            assert produce(client, "__mine", [(0, batch)])[0][0] == NONE

            deleted = client.request(
                codec.DELETE_TOPICS, 3, {"topic_names": [OFFSETS], "timeout_ms": 5000}
            )["responses"][0]
            assert deleted["error_code"] == INVALID_TOPIC_EXCEPTION
            trimmed = client.request(
                codec.DELETE_RECORDS,
                1,
                {
                    "topics": [
                        {"name": OFFSETS, "partitions": [{"partition_index": 0, "offset": -1}]}
                    ],
                    "timeout_ms": 5000,
                },
            )["topics"][0]["partitions"][0]
            assert trimmed["error_code"] == INVALID_TOPIC_EXCEPTION
            metadata = client.request(codec.METADATA, 1, {"topics": [{"name": OFFSETS}]})[
                "topics"
            ][0]
            assert metadata["error_code"] == NONE and metadata["is_internal"]

        # A real client sees the refusal as a delivery error, not a hang.
        errors = []
        producer = confluent_kafka.Producer({"bootstrap.servers": proc.bootstrap})
        producer.produce(OFFSETS, b"x", partition=0, on_delivery=lambda e, m: errors.append(e))
        producer.flush(30)
        assert len(errors) == 1 and errors[0].code() == confluent_kafka.KafkaError.TOPIC_EXCEPTION

        # The coordinator's own appends still work, and survive a restart.
        assert commit(proc.bootstrap, "g1", "plain", 7) == 7
        proc.stop()
        proc.start()
        assert commit(proc.bootstrap, "g2", "plain", 3) == 3
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": proc.bootstrap, "group.id": "g1"}
        )
        try:
            got = consumer.committed([confluent_kafka.TopicPartition("plain", 0)], timeout=10)
            assert got[0].offset == 7
        finally:
            consumer.close()
        assert "Traceback" not in proc.log()
    finally:
        proc.stop()
