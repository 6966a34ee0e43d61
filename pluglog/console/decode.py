"""Values the message browser decodes through the schema registry it runs beside.

A value in Confluent's framing (``0x00``, a 4-byte schema id, the payload:
:mod:`pluglog.serialization.framing`) whose id this broker's registry
knows is shown decoded, as JSON, next to its raw form:

* ``AVRO``: read with the built-in Avro serializer
  (:class:`~pluglog.serialization.avro.AvroSerializer`, fastavro) against
  the registered writer schema;
* ``JSON``: the payload is JSON text already; it is parsed and indented.

Decoding runs on the reactor thread, inside one page, so a schema is only
used when its reads are bounded by the value's bytes: fastavro reads
repeated items in a loop and nested ones by recursion, so a writer schema
that is recursive (a named type inside itself) or has arrays or maps of
zero-byte items (``null``, an empty record) is not decoded; such values
are shown raw, with the reason. Anything that fails to decode is shown raw
with the error.
"""

import json

from pluglog.serialization.avro import AvroSerializer
from pluglog.serialization.framing import HEADER_SIZE, MAGIC_BYTE, SerializationError, unframe

#: Characters of decoded JSON shown.
MAX_DECODED = 64 * 1024
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


class UnsafeSchemaError(ValueError):
    """A writer schema whose reads are not bounded by the value's size."""


def _check_avro(schema, names, stack):
    """Raise UnsafeSchemaError if ``schema`` (decoded JSON) is recursive or
    repeats zero-byte items; return whether it encodes to zero bytes."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return schema == "null"
        if schema in stack:
            raise UnsafeSchemaError(f"recursive type {schema!r}")
        if schema not in names:
            raise UnsafeSchemaError(f"unknown type {schema!r}")
        return names[schema]
    if isinstance(schema, list):  # a union: at least its branch index
        for branch in schema:
            _check_avro(branch, names, stack)
        return False
    if not isinstance(schema, dict):
        raise UnsafeSchemaError("not an Avro schema")
    kind = schema.get("type")
    if kind in ("record", "error"):
        name = _full_name(schema)
        stack = stack | {name, schema.get("name")}
        names[name] = names[schema.get("name")] = False  # while its fields are checked
        zero = all(_check_avro(f.get("type"), names, stack) for f in schema.get("fields", []))
        names[name] = names[schema.get("name")] = zero
        return zero
    if kind in ("enum", "fixed"):
        zero = kind == "fixed" and schema.get("size") == 0
        names[_full_name(schema)] = names[schema.get("name")] = zero
        return zero
    if kind in ("array", "map"):
        items = schema.get("items" if kind == "array" else "values")
        if _check_avro(items, names, stack):
            raise UnsafeSchemaError(f"an {kind} of zero-byte items")
        return False
    return _check_avro(kind, names, stack)


def _full_name(schema):
    name = schema.get("name", "")
    namespace = schema.get("namespace")
    return f"{namespace}.{name}" if namespace and "." not in name else name


def check_avro(text):
    """Raise UnsafeSchemaError unless the Avro schema ``text`` is safe to read."""
    _check_avro(json.loads(text), {}, frozenset())


class Decoder:
    """Decodes framed values of one page; caches the writer schemas it checks."""

    def __init__(self, registry):
        self.registry = registry
        self.avro = None if registry is None else AvroSerializer(registry)
        self.unsafe = {}  # Avro schema id -> why it is not read, or None when it is

    def __call__(self, topic, data):
        """``{"schema_id", "type", "text"}`` or ``{"schema_id", "error"}`` for a
        framed value with a known id; None for anything else."""
        if self.registry is None or data is None or len(data) < HEADER_SIZE:
            return None
        if data[0] != MAGIC_BYTE:
            return None
        schema_id, payload = unframe(data)
        known = self.registry.ids.get(schema_id)
        if known is None:
            return None
        text, schema_type = known
        out = {"schema_id": schema_id, "type": schema_type}
        if schema_type == "AVRO" and schema_id not in self.unsafe:
            try:
                check_avro(text)
                self.unsafe[schema_id] = None
            except (UnsafeSchemaError, ValueError, TypeError, AttributeError) as exc:
                self.unsafe[schema_id] = f"not decoded: the schema has {exc}"
        if self.unsafe.get(schema_id):
            return {**out, "error": self.unsafe[schema_id]}
        try:
            if schema_type == "AVRO":
                value = self.avro.deserialize(topic, bytes(data))
            elif schema_type == "JSON":
                value = json.loads(bytes(payload).decode("utf-8"))
            else:
                return {**out, "error": f"{schema_type} values are not decoded here"}
            shown = json.dumps(value, indent=2, ensure_ascii=False, default=repr)
        except (SerializationError, ValueError, RecursionError, TypeError) as exc:
            return {**out, "error": f"does not decode: {exc}"}
        if len(shown) > MAX_DECODED:
            shown = shown[:MAX_DECODED] + " …"
        return {**out, "text": shown}
