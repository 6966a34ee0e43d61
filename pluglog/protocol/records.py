"""Build and decode magic-2 record batches, records included.

This is the full record codec (kafka-protocol.md §2): zig-zag varints,
records, headers, batch headers and CRCs; the compression codecs it applies
to the record array are :mod:`pluglog.protocol.codecs`. Clients, tests,
benchmarks and compaction use it. The broker's produce and fetch paths must
not: they work on batch headers only (:mod:`pluglog.storage.records`),
because decoding records costs Python work per record.
"""

import struct
from typing import NamedTuple

from pluglog.errors import CorruptRecordError, InvalidRecordError
from pluglog.protocol.codecs import CODEC_NAMES, compress, decompress
from pluglog.protocol.crc import crc32c

_HEADER = struct.Struct(">qiibIhiqqqhii")
_HEADER_SIZE = 61
_CRC_START = 21
_U32 = struct.Struct(">I")


class Record(NamedTuple):
    """One record. ``offset_delta`` defaults to the record's position in the
    batch and ``timestamp`` to the batch's base timestamp when building;
    decoded records carry all fields, ``offset`` included."""

    key: bytes | None = None
    value: bytes | None = None
    headers: tuple | list = ()
    timestamp: int | None = None
    offset_delta: int | None = None
    offset: int | None = None


class RecordBatch(NamedTuple):
    """A decoded batch: the header fields plus its records."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    records: list

    @property
    def compression(self):
        return self.attributes & 0x07

    @property
    def timestamp_type(self):
        return (self.attributes >> 3) & 1

    @property
    def is_transactional(self):
        return bool(self.attributes & 0x10)

    @property
    def is_control(self):
        return bool(self.attributes & 0x20)

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    @property
    def size(self):
        return self.batch_length + 12


# -- varints ------------------------------------------------------------------


def _encode_unsigned(number):
    out = bytearray()
    while number > 0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def encode_varint(value):
    """Zig-zag encode a signed 32-bit integer."""
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"{value} does not fit a varint (int32)")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value):
    """Zig-zag encode a signed 64-bit integer."""
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _decode_unsigned(buf, position, max_bytes):
    number = 0
    shift = 0
    for i in range(max_bytes):
        try:
            byte = buf[position + i]
        except IndexError:
            raise InvalidRecordError("varint runs past the end of the buffer") from None
        number |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return number, position + i + 1
        shift += 7
    raise InvalidRecordError(f"varint longer than {max_bytes} bytes")


def decode_varint(buf, position=0):
    """Return ``(value, next_position)`` of the zig-zag varint at ``position``."""
    number, position = _decode_unsigned(buf, position, 5)
    if number > 0xFFFFFFFF:
        raise InvalidRecordError("varint overflows int32")
    return (number >> 1) ^ -(number & 1), position


def decode_varlong(buf, position=0):
    """Return ``(value, next_position)`` of the zig-zag varlong at ``position``."""
    number, position = _decode_unsigned(buf, position, 10)
    if number > 0xFFFFFFFFFFFFFFFF:
        raise InvalidRecordError("varlong overflows int64")
    return (number >> 1) ^ -(number & 1), position


# -- build --------------------------------------------------------------------


def _encode_bytes(data):
    if data is None:
        return encode_varint(-1)
    return encode_varint(len(data)) + bytes(data)


def encode_record(record, base_timestamp, default_delta):
    timestamp = base_timestamp if record.timestamp is None else record.timestamp
    delta = default_delta if record.offset_delta is None else record.offset_delta
    return encode_record_fields(
        record.key, record.value, record.headers, timestamp - base_timestamp, delta
    )


# Zig-zag encodings of 0..16383 (one or two bytes): record lengths, offset
# and timestamp deltas and field sizes are almost always in this range, and a
# table lookup costs a fraction of the encoding loop per record.
_SMALL = tuple(_encode_unsigned(n << 1) for n in range(1 << 14))
_MINUS_ONE = encode_varint(-1)


def _small_varint(value):
    if 0 <= value < 16384:
        return _SMALL[value]
    return encode_varlong(value)


def encode_record_fields(key, value, headers, timestamp_delta, offset_delta):
    """One record's bytes (length prefix included) from its fields; the
    producer's accumulator calls this once per record as it is sent."""
    small = _SMALL
    if headers:
        parts = [encode_varint(len(headers))]
        for name, header_value in headers:
            parts.append(_encode_bytes(name.encode("utf-8") if isinstance(name, str) else name))
            parts.append(_encode_bytes(header_value))
        tail = b"".join(parts)
    else:
        tail = b"\x00"
    body = b"".join(
        (
            b"\x00",
            small[timestamp_delta]
            if 0 <= timestamp_delta < 16384
            else encode_varlong(timestamp_delta),
            small[offset_delta] if 0 <= offset_delta < 16384 else encode_varint(offset_delta),
            _MINUS_ONE if key is None else _small_varint(len(key)),
            b"" if key is None else key,
            _MINUS_ONE if value is None else _small_varint(len(value)),
            b"" if value is None else value,
            tail,
        )
    )
    return _small_varint(len(body)) + body


def build_batch(
    records,
    base_offset=0,
    compression=0,
    producer_id=-1,
    producer_epoch=-1,
    base_sequence=-1,
    base_timestamp=None,
    is_transactional=False,
    partition_leader_epoch=0,
    is_control=False,
    timestamp_type=0,
):
    """Return the bytes of one magic-2 batch holding ``records``."""
    records = [r if isinstance(r, Record) else Record(*r) for r in records]
    if not records:
        raise ValueError("a record batch needs at least one record")
    if isinstance(compression, str):
        compression = CODEC_NAMES[compression]
    timestamps = [r.timestamp for r in records if r.timestamp is not None]
    if base_timestamp is None:
        base_timestamp = records[0].timestamp if records[0].timestamp is not None else 0
    max_timestamp = max(timestamps) if timestamps else base_timestamp
    encoded = [encode_record(r, base_timestamp, i) for i, r in enumerate(records)]
    deltas = [i if r.offset_delta is None else r.offset_delta for i, r in enumerate(records)]
    return build_batch_from_encoded(
        encoded,
        len(records),
        deltas[-1],
        base_timestamp,
        max_timestamp,
        base_offset=base_offset,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        partition_leader_epoch=partition_leader_epoch,
        is_control=is_control,
        timestamp_type=timestamp_type,
    )


def build_batch_from_encoded(
    encoded,
    count,
    last_offset_delta,
    base_timestamp,
    max_timestamp,
    base_offset=0,
    compression=0,
    producer_id=-1,
    producer_epoch=-1,
    base_sequence=-1,
    is_transactional=False,
    partition_leader_epoch=0,
    is_control=False,
    timestamp_type=0,
):
    """A batch from records already encoded with :func:`encode_record_fields`
    (a list of bytes); the batch header, compression and CRC-32C are done here."""
    payload = compress(compression, b"".join(encoded))
    attributes = (
        compression
        | (timestamp_type << 3)
        | (0x10 if is_transactional else 0)
        | (0x20 if is_control else 0)
    )
    header = bytearray(
        _HEADER.pack(
            base_offset,
            _HEADER_SIZE - 12 + len(payload),
            partition_leader_epoch,
            2,
            0,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    crc = crc32c(payload, crc32c(memoryview(header)[_CRC_START:]))
    _U32.pack_into(header, 17, crc)
    return bytes(header) + payload


# -- parse --------------------------------------------------------------------


def _decode_bytes(buf, position):
    length, position = decode_varint(buf, position)
    if length < 0:
        return None, position
    end = position + length
    if end > len(buf):
        raise InvalidRecordError("record field runs past the end of the batch")
    return bytes(buf[position:end]), end


def _varint_at(data, position):
    """Zig-zag varint at ``position``: one- and two-byte values (record and
    field lengths, deltas) inline, longer ones through :func:`decode_varlong`.
    Returns ``(value, next_position)``."""
    try:
        first = data[position]
        if first < 0x80:
            return (first >> 1) ^ -(first & 1), position + 1
        second = data[position + 1]
        if second < 0x80:
            number = (first & 0x7F) | (second << 7)
            return (number >> 1) ^ -(number & 1), position + 2
    except IndexError:
        raise InvalidRecordError("varint runs past the end of the buffer") from None
    return decode_varlong(data, position)


def decode_records(data, count, base_offset, base_timestamp):
    """Decode ``count`` records from the (uncompressed) record array ``data``."""
    records = []
    append = records.append
    varint = _varint_at
    size = len(data)
    position = 0
    for _ in range(count):
        length, position = varint(data, position)
        end = position + length
        if length < 0 or end > size:
            raise InvalidRecordError("record length runs past the end of the batch")
        position += 1  # attributes: unused
        ts_delta, position = varint(data, position)
        offset_delta, position = varint(data, position)
        if not -(2**31) <= offset_delta < 2**31:
            raise InvalidRecordError("varint overflows int32")
        n, position = varint(data, position)
        if n < 0:
            key = None
        else:
            if position + n > end:
                raise InvalidRecordError("record field runs past the end of the batch")
            key = data[position : position + n]
            position += n
        n, position = varint(data, position)
        if n < 0:
            value = None
        else:
            if position + n > end:
                raise InvalidRecordError("record field runs past the end of the batch")
            value = data[position : position + n]
            position += n
        header_count, position = varint(data, position)
        headers = []
        for _ in range(header_count):
            name, position = _decode_bytes(data, position)
            header_value, position = _decode_bytes(data, position)
            if name is None:
                raise InvalidRecordError("a record header has a null name")
            headers.append((name.decode("utf-8"), header_value))
        if position != end:
            raise InvalidRecordError("record length does not match its fields")
        append(
            Record(
                key,
                value,
                headers,
                base_timestamp + ts_delta,
                offset_delta,
                base_offset + offset_delta,
            )
        )
    return records


def parse_batch(buf, verify_crc=True):
    """Decode the first batch of ``buf`` (records included) into a RecordBatch."""
    view = memoryview(buf)
    if len(view) < _HEADER_SIZE:
        raise InvalidRecordError(f"{len(view)} bytes are too few for a batch header")
    fields = _HEADER.unpack_from(view, 0)
    if fields[3] != 2:
        raise InvalidRecordError(f"unsupported record batch magic {fields[3]}")
    size = fields[1] + 12
    if size < _HEADER_SIZE or size > len(view):
        raise InvalidRecordError(f"batch length {fields[1]} does not fit {len(view)} bytes")
    if verify_crc and crc32c(view[_CRC_START:size]) != fields[4]:
        raise CorruptRecordError("record batch CRC mismatch")
    data = decompress(fields[5] & 0x07, view[_HEADER_SIZE:size])
    records = decode_records(data, fields[12], fields[0], fields[7])
    return RecordBatch(*fields, records)


def iter_batches(buf, verify_crc=True):
    """Yield every complete batch in ``buf``; a truncated last batch (as a fetch
    response may end with) is ignored."""
    view = memoryview(buf)
    position = 0
    while len(view) - position >= _HEADER_SIZE:
        size = struct.unpack_from(">i", view, position + 8)[0] + 12
        if position + size > len(view):
            return
        yield parse_batch(view[position : position + size], verify_crc)
        position += size


def batches_end(buf, start):
    """One past the last offset of the last complete batch in ``buf``, or
    ``start`` when that is further (a consumer's next fetch offset: with
    compaction a batch's last offsets may hold no record)."""
    view = memoryview(buf)
    position = 0
    end = start
    while len(view) - position >= _HEADER_SIZE:
        base, size = struct.unpack_from(">qi", view, position)
        size += 12
        if position + size > len(view):
            break
        last_delta = struct.unpack_from(">i", view, position + 23)[0]
        end = max(end, base + last_delta + 1)
        position += size
    return end


def iter_records(buf, verify_crc=True):
    """Yield every decoded Record of every complete batch in ``buf``."""
    for batch in iter_batches(buf, verify_crc):
        yield from batch.records
