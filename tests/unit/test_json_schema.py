"""The registry's optional JSON Schema provider (pluglog.serialization.json_schema)."""

import json

import pytest

from pluglog.serialization.framing import SerializationError
from pluglog.serialization.json_schema import JsonSchemaSerializer, check, incompatibilities
from pluglog.serialization.registry import RegistryError, SchemaRegistry

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}


def with_(base, **changes):
    out = json.loads(json.dumps(base))
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def test_check_uses_jsonschema_metaschema():
    check(PERSON)
    check(True)
    for bad in ({"type": "nope"}, {"required": "name"}, {"minLength": -1}, [1, 2]):
        with pytest.raises(SerializationError):
            check(bad)


# (old, new, backward compatible?) - "new reads old" = new accepts every
# document old accepts.
CASES = [
    ("same schema", PERSON, PERSON, True),
    ("optional property added to a closed model", with_(PERSON, additionalProperties=False),
     with_(PERSON, additionalProperties=False,
           properties={**PERSON["properties"], "x": {"type": "string"}}), True),
    ("optional property added to an open model", PERSON,
     with_(PERSON, properties={**PERSON["properties"], "x": {"type": "string"}}), False),
    ("required property added", PERSON, with_(PERSON, required=["name", "age"]), False),
    ("required property dropped", PERSON, with_(PERSON, required=[]), True),
    ("integer widened to number", PERSON,
     with_(PERSON, properties={**PERSON["properties"], "age": {"type": "number"}}), True),
    ("number narrowed to integer",
     with_(PERSON, properties={**PERSON["properties"], "age": {"type": "number"}}), PERSON, False),
    ("type changed", PERSON,
     with_(PERSON, properties={**PERSON["properties"], "name": {"type": "integer"}}), False),
    ("property removed from an open model", PERSON,
     with_(PERSON, properties={"name": {"type": "string"}}), True),
    ("property removed from a closed model", with_(PERSON, additionalProperties=False),
     with_(PERSON, additionalProperties=False, properties={"name": {"type": "string"}}), False),
    ("model closed", PERSON, with_(PERSON, additionalProperties=False), False),
    ("enum value added", {"enum": ["a", "b"]}, {"enum": ["a", "b", "c"]}, True),
    ("enum value removed", {"enum": ["a", "b"]}, {"enum": ["a"]}, False),
    ("maxLength lowered", {"type": "string", "maxLength": 10},
     {"type": "string", "maxLength": 5}, False),
    ("maxLength raised", {"type": "string", "maxLength": 5},
     {"type": "string", "maxLength": 10}, True),
    ("minimum added", {"type": "integer"}, {"type": "integer", "minimum": 0}, False),
    ("array items widened", {"type": "array", "items": {"type": "integer"}},
     {"type": "array", "items": {"type": ["integer", "string"]}}, True),
    ("array items narrowed", {"type": "array", "items": {"type": ["integer", "string"]}},
     {"type": "array", "items": {"type": "integer"}}, False),
    ("anything to constrained", {}, {"type": "string"}, False),
    ("constrained to anything", {"type": "string"}, {}, True),
    ("unmodelled keyword changed", {"oneOf": [{"type": "string"}]},
     {"oneOf": [{"type": "integer"}]}, False),
]  # fmt: skip


@pytest.mark.parametrize(("what", "old", "new", "ok"), CASES, ids=[c[0] for c in CASES])
def test_backward_rules(what, old, new, ok):
    problems = incompatibilities("BACKWARD", new, [old])
    assert (problems == []) is ok, problems
    # FORWARD is the same rule with the roles swapped.
    assert (incompatibilities("FORWARD", old, [new]) == []) is ok


def test_levels():
    v1, v2 = PERSON, with_(PERSON, required=[])
    v3 = with_(v2, properties={"name": {"type": "string"}}, additionalProperties=False)
    assert incompatibilities("NONE", v3, [v1, v2]) == []
    # v3 drops "age" from a closed model: v3 cannot read v2's documents.
    assert incompatibilities("BACKWARD", v3, [v1, v2])
    assert incompatibilities("FULL", v2, [v1])  # v1 requires name... v2 does not
    assert incompatibilities("BACKWARD_TRANSITIVE", v2, [v1]) == []


def test_registry_stores_json_schemas_with_their_type():
    registry = SchemaRegistry(lambda records: None)
    text = json.dumps(PERSON)
    first = registry.register("p-value", text, schema_type="JSON")
    entry = registry.version("p-value", "latest")
    assert entry.to_json()["schemaType"] == "JSON"
    assert registry.schema_by_id(first) == (json.dumps(PERSON, separators=(",", ":")), "JSON")
    assert registry.lookup("p-value", text, schema_type="JSON") == first
    # Same text as Avro would be another schema altogether (and is no Avro).
    with pytest.raises(RegistryError) as info:
        registry.register("p-value", json.dumps({"type": "nope"}), schema_type="JSON")
    assert info.value.code == 42201
    with pytest.raises(RegistryError) as info:
        registry.register("p-value", json.dumps(with_(PERSON, required=["name", "age"])), "JSON")
    assert info.value.code == 409
    # A subject of JSON schemas refuses an Avro one unless the level is NONE.
    with pytest.raises(RegistryError) as info:
        registry.register("p-value", '"string"')
    assert info.value.code == 409 and "schemaType" in info.value.message


def test_serializer_frames_validates_and_reads_back():
    registry = SchemaRegistry(lambda records: None)
    ser = JsonSchemaSerializer(registry, json.dumps(PERSON))
    data = ser.serialize("people", {"name": "ann", "age": 3})
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == 1
    assert json.loads(data[5:]) == {"name": "ann", "age": 3}
    reader = JsonSchemaSerializer(registry)
    assert reader.deserialize("people", data) == {"name": "ann", "age": 3}
    with pytest.raises(SerializationError, match="does not match"):
        ser.serialize("people", {"age": 3})
    bad = data[:5] + b'{"age": "old"}'
    with pytest.raises(SerializationError, match="does not match"):
        reader.deserialize("people", bad)
    with pytest.raises(SerializationError, match="not JSON"):
        reader.deserialize("people", data[:5] + b"{")
    assert ser.serialize("people", None) is None
