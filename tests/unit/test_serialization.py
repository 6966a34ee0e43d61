"""Framing, subject strategies, Avro compatibility and the registry's state machine."""

import json

import pytest
from zope.interface.verify import verifyObject

from pluglog.interfaces import ISchemaRegistry, ISerializer
from pluglog.serialization import strategies
from pluglog.serialization.avro import AvroSerializer, canonical
from pluglog.serialization.client import RegistryClient
from pluglog.serialization.compatibility import incompatibilities, reader_errors
from pluglog.serialization.framing import SerializationError, frame, schema_id_of, unframe
from pluglog.serialization.registry import RegistryError, SchemaRegistry

REC = {"type": "record", "name": "R", "namespace": "n", "fields": [{"name": "a", "type": "int"}]}


def rec(*fields):
    return {"type": "record", "name": "R", "namespace": "n", "fields": list(fields)}


def memory_registry():
    log = []
    registry = SchemaRegistry(log.extend)
    return registry, log


def test_framing_roundtrip_and_errors():
    data = frame(258, b"xyz")
    assert data == b"\x00\x00\x00\x01\x02xyz"
    schema_id, payload = unframe(data)
    assert (schema_id, bytes(payload)) == (258, b"xyz")
    for bad in (None, b"", b"\x00\x00\x01", b"\x01\x00\x00\x00\x01x"):
        with pytest.raises(SerializationError):
            schema_id_of(bad)


def test_subject_name_strategies():
    assert strategies.topic_name_strategy("t", False, REC) == "t-value"
    assert strategies.topic_name_strategy("t", True, REC) == "t-key"
    assert strategies.record_name_strategy("t", False, REC) == "n.R"
    assert strategies.topic_record_name_strategy("t", False, REC) == "t-n.R"
    with pytest.raises(SerializationError):
        strategies.strategy("NoSuchStrategy")
    with pytest.raises(SerializationError):
        strategies.record_name_strategy("t", False, "int")


@pytest.mark.parametrize(
    ("reader", "writer", "ok"),
    [
        ("long", "int", True),  # promotion
        ("int", "long", False),
        ("string", "bytes", True),
        (rec({"name": "a", "type": "long"}), REC, True),
        (rec({"name": "a", "type": "int"}, {"name": "b", "type": "int"}), REC, False),
        (rec({"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}), REC, True),
        (rec(), REC, True),  # writer fields the reader drops are skipped
        (["null", "int"], "int", True),
        ("int", ["null", "int"], False),
        (
            {"type": "enum", "name": "E", "symbols": ["A"]},
            {"type": "enum", "name": "E", "symbols": ["A", "B"]},
            False,
        ),
        (
            {"type": "enum", "name": "E", "symbols": ["A"], "default": "A"},
            {"type": "enum", "name": "E", "symbols": ["A", "B"]},
            True,
        ),
        ({"type": "array", "items": "long"}, {"type": "array", "items": "int"}, True),
        ({"type": "map", "values": "int"}, {"type": "map", "values": "string"}, False),
        (
            {"type": "fixed", "name": "F", "size": 4},
            {"type": "fixed", "name": "F", "size": 8},
            False,
        ),
        (rec({"name": "a", "type": "int"}), {**REC, "name": "Other"}, False),
    ],
)
def test_reader_writer_resolution(reader, writer, ok):
    assert (reader_errors(reader, writer) == []) is ok


def test_recursive_schema_terminates():
    node = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"], "default": None}],
    }
    assert reader_errors(node, node) == []


def test_levels():
    v1 = REC
    v2 = rec({"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 1})
    v3 = rec({"name": "b", "type": "int", "default": 1})  # drops a (no default in v1)
    assert incompatibilities("BACKWARD", v2, [v1]) == []
    assert incompatibilities("FORWARD", v2, [v1]) == []
    assert incompatibilities("FULL", v2, [v1]) == []
    assert incompatibilities("BACKWARD", v3, [v1, v2]) == []
    assert incompatibilities("FORWARD", v3, [v1, v2])  # old readers need a
    assert incompatibilities("NONE", "string", [v1]) == []
    added_no_default = rec({"name": "a", "type": "int"}, {"name": "c", "type": "int"})
    assert incompatibilities("BACKWARD", added_no_default, [v1])
    # Transitive levels check every version, not just the latest.
    only_b = rec({"name": "b", "type": "int"})
    assert incompatibilities("BACKWARD", only_b, [v1, v2]) == []
    assert incompatibilities("BACKWARD_TRANSITIVE", only_b, [v1, v2])


def test_registry_state_machine_and_reload():
    registry, log = memory_registry()
    assert verifyObject(ISchemaRegistry, registry)
    text = json.dumps(REC)
    first = registry.register("t-value", text)
    assert registry.register("t-value", json.dumps(REC, indent=2)) == first  # same schema
    assert registry.register("u-value", text) == first  # ids are shared across subjects
    v2 = rec({"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 1})
    second = registry.register("t-value", json.dumps(v2))
    assert second == first + 1
    assert registry.get_latest("t-value")[:2] == (second, 2)
    with pytest.raises(RegistryError) as info:
        registry.register("t-value", json.dumps(rec({"name": "z", "type": "int"})))
    assert (info.value.status, info.value.code) == (409, 409)
    registry.set_level("t-value", "none")
    assert registry.level("t-value") == "NONE" and registry.level() == "BACKWARD"
    assert registry.delete_version("t-value", "1") == 1
    assert [v.version for v in registry.versions("t-value")] == [2]

    # Keys are Confluent's; replaying the log rebuilds the same state.
    keys = [json.loads(k) for k, _v in log]
    assert {"keytype": "SCHEMA", "subject": "t-value", "version": 1, "magic": 1} in keys
    replay = SchemaRegistry()
    for key, value in log:
        replay.apply(key, value)
    assert replay.subject_names() == registry.subject_names() == ["t-value", "u-value"]
    assert replay.get_latest("t-value") == registry.get_latest("t-value")
    assert replay.level("t-value") == "NONE"
    assert replay.get_schema(first) == registry.get_schema(first)
    replay.apply(b"not json", b"x")
    assert replay.skipped == 1


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda r: r.versions("nope"), 40401),
        (lambda r: r.version("t-value", "5"), 40402),
        (lambda r: r.get_schema(77), 40403),
        (lambda r: r.register("t-value", "{not json"), 42201),
        (lambda r: r.register("t-value", '{"type": "wat"}'), 42201),
        (lambda r: r.register("t-value", "x" * 1_000_001), 42201),
        (lambda r: r.version("t-value", "0"), 42202),
        (lambda r: r.set_level(None, "SOMETIMES"), 42203),
        (lambda r: r.lookup("t-value", '"string"'), 40403),
        (lambda r: r.delete_subject("t-value", permanent=True), 40405),
    ],
)
def test_registry_errors(call, code):
    registry, _log = memory_registry()
    registry.register("t-value", json.dumps(REC))
    with pytest.raises(RegistryError) as info:
        call(registry)
    assert info.value.code == code


def test_a_failed_write_changes_nothing():
    def refuse(records):
        raise RuntimeError("disk full")

    registry = SchemaRegistry(refuse)
    with pytest.raises(RuntimeError):
        registry.register("t-value", json.dumps(REC))
    assert registry.subject_names() == [] and registry.ids == {}


def test_avro_serializer_over_memory_registry():
    registry, _log = memory_registry()
    writer = AvroSerializer(registry, schema=json.dumps(REC))
    assert verifyObject(ISerializer, writer)
    data = writer.serialize("t", {"a": 5})
    assert schema_id_of(data) == 1
    assert writer.serialize("t", None) is None
    reader = AvroSerializer(registry)
    assert reader.deserialize("t", data) == {"a": 5}
    latest = AvroSerializer(registry)  # no schema: the subject's latest version
    assert latest.serialize("t", {"a": 6}) == writer.serialize("t", {"a": 6})
    with pytest.raises(SerializationError):
        writer.serialize("t", {"a": "not an int"})
    with pytest.raises(SerializationError):
        reader.deserialize("t", b"\x00\x00\x00\x00\x01")
    assert canonical(REC) == canonical(json.dumps(REC, indent=4))


def test_http_client_provides_the_interface():
    assert verifyObject(ISchemaRegistry, RegistryClient("http://localhost:8081"))
    with pytest.raises(ValueError):
        RegistryClient("localhost:8081")


def test_schema_check_is_none_unless_a_topic_asks():
    from pluglog.config import TopicConfig
    from pluglog.serialization.validation import SchemaCheck, schema_check_for

    assert schema_check_for(None, "t", TopicConfig()) is None
    on = TopicConfig().with_overrides({"confluent.value.schema.validation": "true"})
    check = schema_check_for(None, "t", on)
    assert isinstance(check, SchemaCheck) and check.values and not check.keys


def test_schema_check_per_record():
    from types import SimpleNamespace

    from pluglog.errors import InvalidRecordError
    from pluglog.protocol.records import Record, build_batch
    from pluglog.serialization.validation import SchemaCheck

    registry, _log = memory_registry()
    schema_id = registry.register("t-value", json.dumps(REC))
    broker = SimpleNamespace(schema_registry=registry)
    check = SchemaCheck(broker, "t", keys=True, values=True)

    def batch(*pairs):
        return build_batch([Record(k, v, (), 0) for k, v in pairs], base_timestamp=0)

    good = frame(schema_id, b"\x02")
    check(batch((None, good), (good, None)))
    for pairs in [((None, b"raw"),), ((None, good), (None, frame(99, b""))), ((b"rawkey", good),)]:
        with pytest.raises(InvalidRecordError):
            check(batch(*pairs))
    # Compressed batches are checked too.
    with pytest.raises(InvalidRecordError, match="record 1"):
        check(
            build_batch([Record(None, good, (), 0), Record(None, b"x", (), 0)], compression="gzip")
        )
    # KIP-467: every bad record is named by its index in the batch.
    with pytest.raises(InvalidRecordError) as refused:
        check(batch((None, good), (None, b"raw"), (b"rawkey", good), (None, frame(99, b""))))
    assert refused.value.record_errors == [
        (1, "value is not framed with a schema id"),
        (2, "key is not framed with a schema id"),
        (3, "value has schema id 99, which is not registered"),
    ]
    broker.schema_registry = None
    with pytest.raises(InvalidRecordError, match="--http"):
        check(batch((None, good)))


def test_validation_walker_agrees_with_the_full_decoder():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from pluglog.protocol.records import Record, build_batch, iter_records
    from pluglog.serialization.validation import iter_keys_values

    field = st.none() | st.binary(max_size=300)
    record = st.tuples(
        field, field, st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=3)
    )

    @settings(max_examples=60, deadline=None, database=None)
    @given(st.lists(record, min_size=1, max_size=20), st.sampled_from(["none", "gzip", "lz4"]))
    def check(rows, codec):
        batch = build_batch(
            [Record(k, v, h, 1000 + i * 70000) for i, (k, v, h) in enumerate(rows)],
            compression=codec,
            base_timestamp=1000,
        )
        walked = [
            (None if k is None else bytes(k), None if v is None else bytes(v))
            for k, v in iter_keys_values(batch)
        ]
        assert walked == [(r.key, r.value) for r in iter_records(batch)]

    check()
