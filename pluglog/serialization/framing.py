"""Confluent's wire framing: ``0x00`` + 4-byte big-endian schema id + payload.

Every Confluent serializer (Avro, JSON Schema, Protobuf) prefixes values this
way, so a framed value says which registered schema wrote it. The broker's
optional schema validation reads only these five bytes.
"""

import struct

MAGIC_BYTE = 0
HEADER_SIZE = 5
_HEADER = struct.Struct(">bI")


class SerializationError(ValueError):
    """A value could not be serialized or a framed value could not be read."""


def frame(schema_id, payload):
    """Return ``payload`` prefixed with the magic byte and ``schema_id``."""
    return _HEADER.pack(MAGIC_BYTE, schema_id) + payload


def schema_id_of(data):
    """Return the schema id of a framed value; raise SerializationError if
    ``data`` is not framed (too short or a wrong magic byte)."""
    if data is None or len(data) < HEADER_SIZE:
        size = "null" if data is None else f"{len(data)} bytes"
        raise SerializationError(f"value ({size}) is too short for the schema id framing")
    magic, schema_id = _HEADER.unpack_from(data, 0)
    if magic != MAGIC_BYTE:
        raise SerializationError(f"unknown magic byte {magic} (expected {MAGIC_BYTE})")
    return schema_id


def unframe(data):
    """Return ``(schema_id, payload memoryview)`` of a framed value."""
    schema_id = schema_id_of(data)
    return schema_id, memoryview(data)[HEADER_SIZE:]
