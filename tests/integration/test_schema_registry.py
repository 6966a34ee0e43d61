"""The broker's schema registry against confluent-kafka's real client and serdes.

A team on Confluent's Avro tooling changes only URLs: SchemaRegistryClient +
AvroSerializer register and produce through pluglog, and pluglog's own
deserializer and confluent-kafka's AvroDeserializer read the records back.
"""

import json

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from pluglog.serialization.avro import AvroSerializer as PluglogAvro
from pluglog.serialization.client import RegistryClient
from pluglog.serialization.registry import RegistryError
from tests.integration.registry_helpers import USER_BAD, USER_V1, USER_V2, HttpBroker, http

USERS = [
    {"name": "alice", "favorite_number": 7},
    {"name": "bob", "favorite_number": None},
    {"name": "carol", "favorite_number": -123456},
]


@pytest.fixture(scope="module")
def web_broker(tmp_path_factory):
    proc = HttpBroker(tmp_path_factory.mktemp("registry") / "data").start()
    yield proc
    proc.stop()


def _consume_values(bootstrap, topic, count):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values = []
    try:
        for _ in range(200):
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                if len(values) >= count:
                    break
                continue
            values.append(msg.value())
            if len(values) >= count:
                break
    finally:
        consumer.close()
    return values


def test_confluent_avro_roundtrip_through_pluglog_registry(web_broker):
    sr = SchemaRegistryClient({"url": web_broker.url})
    serializer = AvroSerializer(sr, USER_V1)
    topic = "users"
    producer = Producer({"bootstrap.servers": web_broker.bootstrap})
    for user in USERS:
        ctx = SerializationContext(topic, MessageField.VALUE)
        producer.produce(topic, value=serializer(user, ctx))
    assert producer.flush(30) == 0

    latest = sr.get_latest_version(f"{topic}-value")
    assert latest.version == 1
    assert json.loads(latest.schema.schema_str)["name"] == "User"

    raw = _consume_values(web_broker.bootstrap, topic, len(USERS))
    assert len(raw) == len(USERS)
    assert all(v[0] == 0 and int.from_bytes(v[1:5], "big") == latest.schema_id for v in raw)

    ours = PluglogAvro(RegistryClient(web_broker.url))
    assert [ours.deserialize(topic, v) for v in raw] == USERS
    theirs = AvroDeserializer(SchemaRegistryClient({"url": web_broker.url}))
    ctx = SerializationContext(topic, MessageField.VALUE)
    assert [theirs(v, ctx) for v in raw] == USERS


def test_pluglog_serializer_output_reads_with_confluent_deserializer(web_broker):
    client = RegistryClient(web_broker.url)
    ours = PluglogAvro(client, schema=USER_V1)
    data = ours.serialize("ours", USERS[0])
    theirs = AvroDeserializer(SchemaRegistryClient({"url": web_broker.url}))
    assert theirs(data, SerializationContext("ours", MessageField.VALUE)) == USERS[0]
    # The same schema under another subject keeps its id.
    assert client.lookup("ours-value", USER_V1) == client.register("users-value", USER_V1)


def test_evolution_and_incompatible_change_gets_409(web_broker):
    sr = SchemaRegistryClient({"url": web_broker.url})
    subject = "evolve-value"
    first = sr.register_schema(subject, Schema(USER_V1, "AVRO"))
    second = sr.register_schema(subject, Schema(USER_V2, "AVRO"))
    assert second != first
    assert sr.get_versions(subject) == [1, 2]
    assert sr.test_compatibility(subject, Schema(USER_BAD, "AVRO")) is False
    with pytest.raises(SchemaRegistryError) as info:
        sr.register_schema(subject, Schema(USER_BAD, "AVRO"))
    assert info.value.http_status_code == 409
    assert info.value.error_code == 409
    assert "incompatible" in info.value.error_message
    # NONE lets anything in; the level is per subject.
    assert sr.set_compatibility(subject, "NONE")["compatibility"] == "NONE"
    assert sr.get_compatibility(subject) == "NONE"
    assert sr.get_compatibility() == "BACKWARD"
    third = sr.register_schema(subject, Schema(USER_BAD, "AVRO"))
    assert sr.get_version(subject, 3).schema_id == third


def test_v2_reader_reads_v1_data(web_broker):
    client = RegistryClient(web_broker.url)
    writer = PluglogAvro(client, schema=USER_V1)
    data = writer.serialize("resolve", USERS[0])
    reader = PluglogAvro(client, reader_schema=USER_V2)
    assert reader.deserialize("resolve", data) == {**USERS[0], "favorite_color": "blue"}


def test_soft_and_hard_delete(web_broker):
    sr = SchemaRegistryClient({"url": web_broker.url})
    subject = "doomed-value"
    sr.register_schema(subject, Schema(USER_V1, "AVRO"))
    url = f"{web_broker.url}/subjects/{subject}"
    assert http(url + "?permanent=true", "DELETE")[2]["error_code"] == 40405
    assert http(url, "DELETE")[:3:2] == (200, [1])
    assert subject not in sr.get_subjects()
    assert http(url, "DELETE")[2]["error_code"] == 40404
    assert http(url + "/versions?deleted=true")[2] == [1]
    assert http(url + "?permanent=true", "DELETE")[:3:2] == (200, [1])
    assert http(url + "/versions?deleted=true")[2]["error_code"] == 40401


@pytest.mark.parametrize(
    ("path", "method", "body", "status", "code"),
    [
        ("/subjects/nosuch/versions", "GET", None, 404, 40401),
        ("/subjects/nosuch/versions/1", "GET", None, 404, 40401),
        ("/subjects/users-value/versions/99", "GET", None, 404, 40402),
        ("/subjects/users-value/versions/zero", "GET", None, 422, 42202),
        ("/schemas/ids/999999", "GET", None, 404, 40403),
        ("/subjects/x-value/versions", "POST", b'{"schema": "{\\"type\\": \\"recor"}', 422, 42201),
        (
            "/subjects/x-value/versions",
            "POST",
            b'{"schema": "{\\"type\\": \\"nope\\"}"}',
            422,
            42201,
        ),
        ("/subjects/x-value/versions", "POST", b"this is not json", 400, 400),
        ("/subjects/x-value/versions", "POST", b'{"schemaa": "\\"int\\""}', 422, 42201),
        ("/config", "PUT", b'{"compatibility": "SOMETIMES"}', 422, 42203),
        ("/no/such/path", "GET", None, 404, 404),
    ],
)
def test_bad_input_gets_confluent_error_bodies(web_broker, path, method, body, status, code):
    got_status, content_type, answer = http(web_broker.url + path, method, raw=body)
    assert (got_status, answer["error_code"]) == (status, code), answer
    assert content_type.startswith("application/")
    assert isinstance(answer["message"], str) and answer["message"]


def test_ten_megabyte_schema_is_refused_cleanly(web_broker):
    huge = json.dumps(
        {"type": "enum", "name": "Big", "symbols": [f"S{i}" for i in range(1_200_000)]}
    )
    assert len(huge) > 10_000_000
    status, _ctype, answer = http(
        f"{web_broker.url}/subjects/huge-value/versions", "POST", {"schema": huge}
    )
    assert (status, answer["error_code"]) == (422, 42201)
    assert "bytes" in answer["message"]
    # The broker still serves afterwards.
    assert http(f"{web_broker.url}/subjects")[0] == 200


def test_schemas_survive_sigkill(tmp_path):
    broker = HttpBroker(tmp_path / "data").start()
    try:
        client = RegistryClient(broker.url)
        first = client.register("keep-value", USER_V1)
        second = client.register("keep-value", USER_V2)
        client.request("PUT", "config/keep-value", {"compatibility": "FULL"})
        broker.kill()
        broker = HttpBroker(tmp_path / "data", port=broker.port, http_port=broker.http_port)
        broker.start()
        client = RegistryClient(broker.url)
        assert client.get_latest("keep-value") == (second, 2, client.get_schema(second))
        assert json.loads(client.get_schema(first)) == json.loads(USER_V1)
        assert client.request("GET", "config/keep-value") == {"compatibilityLevel": "FULL"}
        # New ids continue after the loaded ones.
        third = client.register("other-value", json.dumps({"type": "string"}))
        assert third > second
        with pytest.raises(RegistryError) as info:
            client.register("keep-value", USER_BAD)
        assert info.value.status == 409
    finally:
        broker.stop()


def test_broker_side_validation_refuses_unregistered_values(web_broker):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": web_broker.bootstrap})
    topic = "validated"
    futures = admin.create_topics(
        [NewTopic(topic, 1, 1, config={"confluent.value.schema.validation": "true"})]
    )
    futures[topic].result(30)
    schema_id = RegistryClient(web_broker.url).register(f"{topic}-value", USER_V1)
    good = PluglogAvro(RegistryClient(web_broker.url), schema=USER_V1).serialize(topic, USERS[0])
    assert int.from_bytes(good[1:5], "big") == schema_id

    def produce(value, acks):
        outcome = []
        producer = Producer({"bootstrap.servers": web_broker.bootstrap, "acks": acks})
        producer.produce(topic, value=value, key=b"k", on_delivery=lambda e, m: outcome.append(e))
        producer.flush(30)
        return outcome[0]

    for acks in ("1", "all"):
        assert produce(good, acks) is None
        assert produce(None, acks) is None  # tombstones pass
        for bad in (b"plain text", b"\x00\x00\x0f\x42\x40avro", b"\x00"):
            error = produce(bad, acks)
            assert error is not None and error.code() == KafkaError.INVALID_RECORD, error
    # Only the accepted records are in the log.
    values = _consume_values(web_broker.bootstrap, topic, 4)
    assert values == [good, None, good, None]


def test_cli_produce_and_consume_avro_as_json(web_broker, tmp_path):
    from tests.integration.test_cli import cli

    topic = "cli-avro"
    schema_file = tmp_path / "user.avsc"
    schema_file.write_text(USER_V1)
    lines = "".join(json.dumps(u) + "\n" for u in USERS)
    registry = ["--schema-registry", web_broker.url]
    produced = cli(
        web_broker,
        "produce",
        topic,
        "--value-format",
        "avro",
        "--value-schema",
        f"@{schema_file}",
        *registry,
        data=lines,
    )
    assert "Produced 3 records" in produced.stderr
    # confluent-kafka's deserializer reads what the CLI wrote.
    raw = _consume_values(web_broker.bootstrap, topic, 3)
    theirs = AvroDeserializer(SchemaRegistryClient({"url": web_broker.url}))
    ctx = SerializationContext(topic, MessageField.VALUE)
    assert [theirs(v, ctx) for v in raw] == USERS

    out = cli(
        web_broker,
        "consume",
        topic,
        "--from-beginning",
        "--exit",
        "--value-format",
        "avro",
        *registry,
    )
    assert [json.loads(line) for line in out.stdout.splitlines()] == USERS

    # Without --value-schema the subject's latest version writes.
    cli(
        web_broker,
        "produce",
        topic,
        "--value-format",
        "avro",
        *registry,
        data=(json.dumps(USERS[0]) + "\n") * 2,
    )
    # Bad input: one line naming the problem, exit 1, nothing sent.
    bad = cli(
        web_broker, "produce", topic, "--value-format", "avro", *registry, data="{oops\n", expect=1
    )
    assert bad.stderr.startswith("pluglog: line 1: not JSON")
    bad = cli(
        web_broker,
        "produce",
        topic,
        "--value-format",
        "avro",
        *registry,
        data='{"name": 5}\n',
        expect=1,
    )
    assert "line 1" in bad.stderr and "Traceback" not in bad.stderr
    bad = cli(
        web_broker,
        "produce",
        "no-subject",
        "--value-format",
        "avro",
        *registry,
        data="{}\n",
        expect=1,
    )
    assert "40401" in bad.stderr
    out = cli(
        web_broker,
        "consume",
        topic,
        "--from-beginning",
        "--exit",
        "--value-format",
        "avro",
        *registry,
    )
    assert len(out.stdout.splitlines()) == 5


def test_confluent_json_schema_serdes_through_pluglog_registry(web_broker):
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

    from pluglog.serialization.json_schema import JsonSchemaSerializer

    person = json.dumps(
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "Person",
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name"],
        }
    )
    topic = "people"
    ctx = SerializationContext(topic, MessageField.VALUE)
    sr = SchemaRegistryClient({"url": web_broker.url})
    assert http(f"{web_broker.url}/schemas/types")[2] == ["AVRO", "JSON"]
    theirs = JSONSerializer(person, sr)
    people = [{"name": "ann", "age": 31}, {"name": "bo"}]
    producer = Producer({"bootstrap.servers": web_broker.bootstrap})
    for person_value in people:
        producer.produce(topic, value=theirs(person_value, ctx))
    assert producer.flush(30) == 0
    latest = sr.get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "JSON"
    raw = _consume_values(web_broker.bootstrap, topic, len(people))
    assert all(int.from_bytes(v[1:5], "big") == latest.schema_id for v in raw)
    ours = JsonSchemaSerializer(RegistryClient(web_broker.url))
    assert [ours.deserialize(topic, v) for v in raw] == people
    # Their deserializer reads what ours writes (same schema, same id).
    written = JsonSchemaSerializer(RegistryClient(web_broker.url), person).serialize(
        topic, {"name": "cy", "age": 1}
    )
    assert written[1:5] == raw[0][1:5]
    assert JSONDeserializer(None, schema_registry_client=sr)(written, ctx) == {
        "name": "cy",
        "age": 1,
    }
    # A new required property is not BACKWARD compatible: Confluent's 409.
    stricter = json.loads(person)
    stricter["required"] = ["name", "age"]
    with pytest.raises(SchemaRegistryError) as info:
        sr.register_schema(f"{topic}-value", Schema(json.dumps(stricter), "JSON"))
    assert (info.value.http_status_code, info.value.error_code) == (409, 409)
    status, _ctype, body = http(
        f"{web_broker.url}/subjects/{topic}-value/versions",
        "POST",
        {"schema": '{"type": "nope"}', "schemaType": "JSON"},
    )
    assert (status, body["error_code"]) == (422, 42201)
