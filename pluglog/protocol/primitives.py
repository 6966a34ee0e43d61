"""Kafka wire primitives: readers and writers for every field type.

Readers take a buffer (``memoryview`` or ``bytes``) and an offset and return
``(value, new_offset)``; they raise :class:`DecodeError` on truncated or invalid
input and nothing else.  Writers append ``bytes`` chunks to a list; joining happens
once per message, so nothing is copied twice.

RECORDS are returned as a ``memoryview`` slice of the input (zero copy) and on
output may be ``bytes``, ``memoryview``, ``None`` or a file-range object with a
``size`` attribute, which is placed in the chunk list untouched for ``sendfile``.
"""

import struct
import uuid

from pluglog.protocol.errors import DecodeError, EncodeError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")
BOOL = struct.Struct(">?")

ZERO_UUID = uuid.UUID(int=0)

_EMPTY_TAGS = b"\x00"


def _fixed_reader(st, name):
    unpack_from = st.unpack_from
    size = st.size

    def read(buf, pos):
        try:
            return unpack_from(buf, pos)[0], pos + size
        except struct.error:
            raise DecodeError(f"truncated {name} at offset {pos}") from None

    read.__name__ = "read_" + name
    return read


def _fixed_writer(st, name):
    pack = st.pack

    def write(out, value):
        try:
            out.append(pack(value))
        except struct.error as exc:
            raise EncodeError(f"bad {name} value {value!r}: {exc}") from None

    write.__name__ = "write_" + name
    return write


read_int8 = _fixed_reader(INT8, "int8")
read_int16 = _fixed_reader(INT16, "int16")
read_int32 = _fixed_reader(INT32, "int32")
read_int64 = _fixed_reader(INT64, "int64")
read_uint16 = _fixed_reader(UINT16, "uint16")
read_uint32 = _fixed_reader(UINT32, "uint32")
read_float64 = _fixed_reader(FLOAT64, "float64")
read_bool = _fixed_reader(BOOL, "bool")
write_int8 = _fixed_writer(INT8, "int8")
write_int16 = _fixed_writer(INT16, "int16")
write_int32 = _fixed_writer(INT32, "int32")
write_int64 = _fixed_writer(INT64, "int64")
write_uint16 = _fixed_writer(UINT16, "uint16")
write_uint32 = _fixed_writer(UINT32, "uint32")
write_float64 = _fixed_writer(FLOAT64, "float64")
write_bool = _fixed_writer(BOOL, "bool")


# -- varints (protobuf base-128; signed ones zig-zag) ---------------------------------


def read_uvarint(buf, pos, max_bytes=5):
    """Unsigned varint; ``max_bytes`` 5 for 32-bit values, 10 for 64-bit."""
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(max_bytes):
        if pos >= end:
            raise DecodeError(f"truncated varint at offset {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    raise DecodeError(f"varint longer than {max_bytes} bytes at offset {pos}")


def read_varint(buf, pos):
    n, pos = read_uvarint(buf, pos, 5)
    return (n >> 1) ^ -(n & 1), pos


def read_varlong(buf, pos):
    n, pos = read_uvarint(buf, pos, 10)
    return (n >> 1) ^ -(n & 1), pos


# Lengths and counts below 128 are by far the most common; cache their encodings.
_SMALL_UVARINTS = [bytes([i]) for i in range(128)]


def encode_uvarint(n):
    if 0 <= n < 128:
        return _SMALL_UVARINTS[n]
    if n < 0:
        raise EncodeError(f"negative unsigned varint {n}")
    parts = bytearray()
    while n >= 0x80:
        parts.append((n & 0x7F) | 0x80)
        n >>= 7
    parts.append(n)
    return bytes(parts)


def write_uvarint(out, n):
    out.append(encode_uvarint(n))


def write_varint(out, n):
    out.append(encode_uvarint(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF))


def write_varlong(out, n):
    out.append(encode_uvarint(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF))


# -- length-prefixed values -----------------------------------------------------------


def _slice(buf, pos, length, what):
    end = pos + length
    if end > len(buf):
        raise DecodeError(f"truncated {what}: need {length} bytes at offset {pos}")
    return buf[pos:end], end


def _decode_utf8(raw, pos):
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError:
        raise DecodeError(f"invalid UTF-8 in string at offset {pos}") from None


def read_string(buf, pos):
    n, pos = read_int16(buf, pos)
    if n < 0:
        raise DecodeError(f"negative string length {n} at offset {pos}")
    raw, end = _slice(buf, pos, n, "string")
    return _decode_utf8(raw, pos), end


def read_nullable_string(buf, pos):
    n, pos = read_int16(buf, pos)
    if n == -1:
        return None, pos
    if n < 0:
        raise DecodeError(f"bad string length {n} at offset {pos}")
    raw, end = _slice(buf, pos, n, "string")
    return _decode_utf8(raw, pos), end


def read_compact_string(buf, pos):
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise DecodeError(f"null in non-nullable compact string at offset {pos}")
    raw, end = _slice(buf, pos, n - 1, "string")
    return _decode_utf8(raw, pos), end


def read_compact_nullable_string(buf, pos):
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    raw, end = _slice(buf, pos, n - 1, "string")
    return _decode_utf8(raw, pos), end


def _read_bytes_view(buf, pos, nullable, compact):
    """Shared body of every bytes reader; returns a view, callers decide on copying."""
    if compact:
        n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        n, pos = read_int32(buf, pos)
    if n == -1:
        if nullable:
            return None, pos
        raise DecodeError(f"null in non-nullable bytes at offset {pos}")
    if n < 0:
        raise DecodeError(f"bad bytes length {n} at offset {pos}")
    return _slice(buf, pos, n, "bytes")


def read_bytes(buf, pos):
    view, pos = _read_bytes_view(buf, pos, False, False)
    return bytes(view), pos


def read_nullable_bytes(buf, pos):
    view, pos = _read_bytes_view(buf, pos, True, False)
    return (None if view is None else bytes(view)), pos


def read_compact_bytes(buf, pos):
    view, pos = _read_bytes_view(buf, pos, False, True)
    return bytes(view), pos


def read_compact_nullable_bytes(buf, pos):
    view, pos = _read_bytes_view(buf, pos, True, True)
    return (None if view is None else bytes(view)), pos


def read_records(buf, pos):
    """RECORDS: nullable bytes returned as a zero-copy ``memoryview`` slice."""
    if not isinstance(buf, memoryview):
        buf = memoryview(buf)
    return _read_bytes_view(buf, pos, True, False)


def read_compact_records(buf, pos):
    if not isinstance(buf, memoryview):
        buf = memoryview(buf)
    return _read_bytes_view(buf, pos, True, True)


def read_uuid(buf, pos):
    raw, end = _slice(buf, pos, 16, "uuid")
    return uuid.UUID(bytes=bytes(raw)), end


def read_array_length(buf, pos, compact, min_size=1):
    """Element count of an array, ``-1`` for null; bounded by the bytes left.

    ``min_size`` is the fewest bytes one element can take on the wire (the
    compiler derives it from the schema), so a count that the rest of the
    frame could not hold is refused before any element is decoded."""
    if compact:
        n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        n, pos = read_int32(buf, pos)
    if n < -1:
        raise DecodeError(f"bad array length {n} at offset {pos}")
    # Every element we define takes at least one byte, so a count above the bytes
    # left is garbage; checking now avoids looping two billion times on a bad frame.
    if n * min_size > len(buf) - pos:
        raise DecodeError(
            f"array length {n} (elements of >= {min_size} bytes) exceeds remaining "
            f"{len(buf) - pos} bytes"
        )
    return n, pos


def _encode_text(value):
    try:
        return value.encode("utf-8")
    except AttributeError:
        raise EncodeError(f"expected str, got {type(value).__name__}") from None


def write_string(out, value):
    raw = _encode_text(value)
    if len(raw) > 0x7FFF:
        raise EncodeError(f"string of {len(raw)} bytes is too long")
    out.append(INT16.pack(len(raw)))
    out.append(raw)


def write_nullable_string(out, value):
    if value is None:
        out.append(b"\xff\xff")
    else:
        write_string(out, value)


def write_compact_string(out, value):
    raw = _encode_text(value)
    out.append(encode_uvarint(len(raw) + 1))
    out.append(raw)


def write_compact_nullable_string(out, value):
    if value is None:
        out.append(b"\x00")
    else:
        write_compact_string(out, value)


def _blob_size(value):
    size = getattr(value, "size", None)
    if isinstance(size, int):
        return size  # file range; ``memoryview.nbytes`` is used for views below
    try:
        return memoryview(value).nbytes
    except TypeError:
        raise EncodeError(f"expected bytes-like, got {type(value).__name__}") from None


def write_bytes(out, value):
    out.append(INT32.pack(_blob_size(value)))
    out.append(value)


def write_nullable_bytes(out, value):
    if value is None:
        out.append(b"\xff\xff\xff\xff")
    else:
        write_bytes(out, value)


def write_compact_bytes(out, value):
    out.append(encode_uvarint(_blob_size(value) + 1))
    out.append(value)


def write_compact_nullable_bytes(out, value):
    if value is None:
        out.append(b"\x00")
    else:
        write_compact_bytes(out, value)


# RECORDS are nullable bytes on the wire; the object (possibly a file range) is kept.
write_records = write_nullable_bytes
write_compact_records = write_compact_nullable_bytes


def write_uuid(out, value):
    if isinstance(value, uuid.UUID):
        out.append(value.bytes)
    elif isinstance(value, bytes | bytearray) and len(value) == 16:
        out.append(bytes(value))
    else:
        raise EncodeError(f"bad uuid {value!r}")


def write_array_length(out, n, compact):
    if compact:
        out.append(encode_uvarint(n + 1))
    else:
        out.append(INT32.pack(n))


# -- tagged fields (flexible versions) ------------------------------------------------


def read_tagged_fields(buf, pos):
    """Read a tag buffer; return ``({tag: memoryview}, pos)``; callers ignore unknown tags."""
    count, pos = read_uvarint(buf, pos)
    tags = {}
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        tags[tag], pos = _slice(buf, pos, size, "tagged field")
    return tags, pos


def skip_tagged_fields(buf, pos):
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        _, pos = _slice(buf, pos, size, "tagged field")
    return pos


def write_tagged_fields(out, tags=None):
    """Write ``{tag: bytes}`` in ascending tag order (the spec requires sorted tags)."""
    if not tags:
        out.append(_EMPTY_TAGS)
        return
    out.append(encode_uvarint(len(tags)))
    for tag in sorted(tags):
        raw = tags[tag]
        out.append(encode_uvarint(tag))
        out.append(encode_uvarint(len(raw)))
        out.append(raw)
