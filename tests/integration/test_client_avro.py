"""Avro through pluglog's Twisted client, read and written by confluent-kafka's serdes.

The Twisted producer writes with ``value_serializer=`` a registry-backed
AvroSerializer object or the ``avro`` serializer plugin by name (with
``schema_registry_url``); confluent-kafka's AvroDeserializer reads those
values back equal. The reverse: confluent-kafka's AvroSerializer writes, the
Twisted consumer with ``value_deserializer="avro"`` reads them equal. One
broker with its ``--http`` registry serves both sides.
"""

import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.integration.clients import _runner, create_topic
from tests.integration.registry_helpers import USER_V1, HttpBroker
from tests.integration.test_schema_registry import _consume_values

USERS = [
    {"name": "alice", "favorite_number": 7},
    {"name": "bob", "favorite_number": None},
    {"name": "zoë", "favorite_number": -123456},
]


@pytest.fixture(scope="module")
def web_broker(tmp_path_factory):
    proc = HttpBroker(tmp_path_factory.mktemp("client-avro") / "data").start()
    yield proc
    proc.stop()


def _confluent_read(broker, topic, count):
    raw = _consume_values(broker.bootstrap, topic, count)
    theirs = AvroDeserializer(SchemaRegistryClient({"url": broker.url}))
    ctx = SerializationContext(topic, MessageField.VALUE)
    return [theirs(v, ctx) for v in raw]


def _twisted_produce(broker, topic, schema):
    data = "".join(json.dumps(u) + "\n" for u in USERS)
    offsets = _runner("avro-produce", broker.bootstrap, topic, broker.url, schema, data=data)
    assert json.loads(offsets) == [0, 1, 2]


def test_twisted_avro_producer_is_read_by_confluent_deserializer(web_broker):
    create_topic(web_broker.bootstrap, "tw-avro", partitions=1)
    _twisted_produce(web_broker, "tw-avro", USER_V1)
    assert _confluent_read(web_broker, "tw-avro", len(USERS)) == USERS
    # The producer registered the schema under Confluent's subject name.
    sr = SchemaRegistryClient({"url": web_broker.url})
    assert sr.get_latest_version("tw-avro-value").version == 1


def test_avro_plugin_by_name_uses_the_latest_schema(web_broker):
    create_topic(web_broker.bootstrap, "tw-avro-named", partitions=1)
    sr = SchemaRegistryClient({"url": web_broker.url})
    schema_id = sr.register_schema("tw-avro-named-value", Schema(USER_V1, "AVRO"))
    _twisted_produce(web_broker, "tw-avro-named", "latest")
    raw = _consume_values(web_broker.bootstrap, "tw-avro-named", len(USERS))
    assert {int.from_bytes(v[1:5], "big") for v in raw} == {schema_id}
    assert _confluent_read(web_broker, "tw-avro-named", len(USERS)) == USERS


def test_confluent_avro_producer_is_read_by_twisted_consumer(web_broker):
    topic = "cf-avro"
    create_topic(web_broker.bootstrap, topic, partitions=1)
    serializer = AvroSerializer(SchemaRegistryClient({"url": web_broker.url}), USER_V1)
    producer = Producer({"bootstrap.servers": web_broker.bootstrap})
    ctx = SerializationContext(topic, MessageField.VALUE)
    for user in USERS:
        producer.produce(topic, value=serializer(user, ctx))
    assert producer.flush(30) == 0
    out = _runner("avro-consume", web_broker.bootstrap, topic, web_broker.url, str(len(USERS)))
    assert [json.loads(line) for line in out.splitlines()] == USERS
