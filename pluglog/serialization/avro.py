"""Avro values in Confluent's framing, with fastavro, against a schema registry.

:class:`AvroSerializer` is an ISerializer provider interchangeable with
confluent-kafka's AvroSerializer / AvroDeserializer: it registers (or looks up)
the writer schema under the subject its strategy names, frames the Avro
binary with the schema id, and on the way back fetches the writer schema by
id (cached: ids are immutable) and resolves it against an optional reader
schema with fastavro's schema resolution.
"""

import io
import json

import fastavro
from fastavro.read import SchemaResolutionError
from fastavro.schema import SchemaParseException, to_parsing_canonical_form
from zope.interface import implementer

from pluglog.interfaces import ISerializer
from pluglog.serialization.framing import SerializationError, frame, unframe
from pluglog.serialization.registered import RegisteredSerializer
from pluglog.serialization.strategies import topic_name_strategy


def parse(schema):
    """Parse an Avro schema given as JSON text or a decoded object.

    Returns ``(parsed schema, decoded JSON)``; raises SerializationError naming
    what is wrong (bad JSON, unknown type, missing field...)."""
    if isinstance(schema, bytes | bytearray):
        schema = bytes(schema).decode("utf-8")
    if isinstance(schema, str):
        try:
            decoded = json.loads(schema)
        except ValueError as exc:
            raise SerializationError(f"schema is not JSON: {exc}") from None
    else:
        decoded = schema
    try:
        # A fresh named-schema table per parse keeps schemas independent.
        parsed = fastavro.parse_schema(decoded, named_schemas={})
    except (SchemaParseException, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise SerializationError(f"invalid Avro schema: {exc}") from None
    return parsed, decoded


def canonical(schema):
    """Avro's Parsing Canonical Form of ``schema`` (text or object): two
    schemas that write the same bytes have the same form."""
    parsed, _decoded = parse(schema)
    return to_parsing_canonical_form(parsed)


@implementer(ISerializer)
class AvroSerializer(RegisteredSerializer):
    """Framed Avro through a registry (any ISchemaRegistry provider).

    ``schema`` (JSON text) is the writer schema for :meth:`serialize`; without
    it the subject's latest registered version is used, as confluent-kafka's
    ``use.latest.version`` does. ``reader_schema`` (optional) is what
    :meth:`deserialize` resolves old or new writer schemas to.
    """

    def __init__(
        self,
        registry,
        schema=None,
        is_key=False,
        subject_name_strategy=topic_name_strategy,
        auto_register=True,
        reader_schema=None,
    ):
        super().__init__(registry, schema, is_key, subject_name_strategy, auto_register)
        self._schema = None if schema is None else parse(schema)
        self._reader = parse(reader_schema)[0] if reader_schema is not None else None
        # self._ids: subject -> (schema id, parsed writer schema)
        self._writers = {}  # schema id -> parsed schema

    def _writer_for(self, topic):
        parsed, decoded = self._schema or (None, None)
        subject = self.strategy(topic, self.is_key, decoded)
        cached = self._ids.get(subject)
        if cached is not None:
            return cached
        schema_id, text = self._registered(subject)
        if parsed is None:
            parsed = parse(text)[0]
        self._ids[subject] = (schema_id, parsed)
        self._writers[schema_id] = parsed
        return schema_id, parsed

    def serialize(self, topic, value):
        if value is None:
            return None
        schema_id, parsed = self._writer_for(topic)
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, parsed, value)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SerializationError(f"{topic}: value does not match its schema: {exc}") from None
        return frame(schema_id, out.getvalue())

    def writer_schema(self, schema_id):
        """The parsed schema registered under ``schema_id`` (cached)."""
        parsed = self._writers.get(schema_id)
        if parsed is None:
            parsed = parse(self.registry.get_schema(schema_id))[0]
            self._writers[schema_id] = parsed
        return parsed

    def deserialize(self, topic, data):
        if data is None:
            return None
        schema_id, payload = unframe(data)
        writer = self.writer_schema(schema_id)
        try:
            return fastavro.schemaless_reader(io.BytesIO(payload), writer, self._reader)
        except (
            SchemaResolutionError,
            ValueError,
            TypeError,
            EOFError,
            IndexError,
            KeyError,
        ) as exc:
            raise SerializationError(
                f"{topic}: cannot read Avro with schema id {schema_id}: {exc}"
            ) from None
