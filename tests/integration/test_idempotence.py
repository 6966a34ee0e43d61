"""Idempotent producers: confluent-kafka, kafka-python's default, and a raw re-send."""

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from pluglog.protocol.records import Record, build_batch
from tests.integration.clients import (
    consume_confluent,
    consume_kafka_python,
    create_topic,
    make_records,
    produce_confluent,
    produce_kafka_python,
)


def test_confluent_idempotent(shared_broker):
    topic = "idem-confluent"
    create_topic(shared_broker.bootstrap, topic, partitions=3)
    records = make_records(5000)
    produce_confluent(
        shared_broker.bootstrap, topic, records, "lz4", **{"enable.idempotence": True}
    )
    got = consume_kafka_python(shared_broker.bootstrap, topic, 3, len(records))
    assert sorted(map(repr, got)) == sorted(map(repr, records))


def test_kafka_python_default_producer_is_idempotent(shared_broker):
    import kafka

    topic = "idem-kafka-python"
    create_topic(shared_broker.bootstrap, topic, partitions=3)
    records = make_records(3000)
    produce_kafka_python(shared_broker.bootstrap, topic, records)
    # kafka-python 3 defaults to enable_idempotence=True: prove it used a producer id.
    producer = kafka.KafkaProducer(bootstrap_servers=shared_broker.bootstrap)
    producer.send(topic, b"probe", partition=0).get(timeout=30)
    assert producer._transaction_manager is not None
    assert producer._transaction_manager.producer_id_and_epoch.producer_id >= 0
    producer.close()
    got = consume_confluent(shared_broker.bootstrap, topic, 3, len(records) + 1)
    assert len(got) == len(records) + 1


def _produce(client, topic, batch, acks=-1):
    return client.request(
        codec.PRODUCE,
        8,
        {
            "transactional_id": None,
            "acks": acks,
            "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )["responses"][0]["partition_responses"][0]


def _end_offset(client, topic):
    resp = client.request(
        codec.LIST_OFFSETS,
        5,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    return resp["topics"][0]["partitions"][0]["offset"]


def test_resent_batch_is_not_stored_twice(shared_broker):
    topic = "idem-raw"
    create_topic(shared_broker.bootstrap, topic, partitions=1)
    host, port = "127.0.0.1", shared_broker.port
    with BlockingClient(host, port) as client:
        init = client.request(
            codec.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 60000}
        )
        assert init["error_code"] == 0
        pid = init["producer_id"]
        records = [Record(key=b"k", value=f"v{i}".encode(), offset_delta=i) for i in range(10)]
        first = build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=0)
        second = build_batch(records[:5], producer_id=pid, producer_epoch=0, base_sequence=10)
        r1 = _produce(client, topic, first)
        assert (r1["error_code"], r1["base_offset"]) == (0, 0)
        again = _produce(client, topic, first)  # the retry of a "lost" response
        assert (again["error_code"], again["base_offset"]) == (0, 0)
        assert _end_offset(client, topic) == 10
        r2 = _produce(client, topic, second)
        assert (r2["error_code"], r2["base_offset"]) == (0, 10)
        gap = build_batch(records[:1], producer_id=pid, producer_epoch=0, base_sequence=99)
        assert _produce(client, topic, gap)["error_code"] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        following = build_batch(records[:1], producer_id=pid, producer_epoch=0, base_sequence=15)
        assert _produce(client, topic, following)["error_code"] == 0
        assert _end_offset(client, topic) == 16
        second_pid = client.request(
            codec.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 60000}
        )["producer_id"]
        assert second_pid != pid


def test_init_producer_id_epoch_bump_versions_answer_a_new_producer(shared_broker):
    # KIP-360 (v3+): an idempotent producer sends its current id and epoch; like
    # Kafka for producers without a transactional id, the answer is a new id.
    with BlockingClient.from_bootstrap(shared_broker.bootstrap) as client:
        first = client.request(
            codec.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 60000}
        )
        for version in (2, 3, 4):
            body = {
                "transactional_id": None,
                "transaction_timeout_ms": 60000,
                "producer_id": first["producer_id"],
                "producer_epoch": first["producer_epoch"],
            }
            answer = client.request(codec.INIT_PRODUCER_ID, version, body)
            assert answer["error_code"] == 0
            assert answer["producer_id"] > first["producer_id"]
            assert answer["producer_epoch"] == 0
