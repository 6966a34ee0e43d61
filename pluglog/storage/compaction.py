"""Record-level work on stored batches: what the log cleaner and keyed topics need.

The produce and fetch paths never decode records (:mod:`pluglog.storage.records`
works on headers only). Compaction cannot avoid it: it has to know each
record's key and offset. This module keeps that work as small as it can be:

* records are walked, not built: :func:`iter_record_spans` yields each
  record's byte span, offset delta, key and whether its value is null,
  and a filtered batch reuses the kept records' bytes unchanged (their
  timestamp and offset deltas stay relative to the original batch's base
  offset and base timestamp, which the new batch keeps);
* compressed batches are decompressed, filtered and recompressed with the
  batch's own codec through :mod:`pluglog.protocol.codecs` (snappy
  in the xerial framing the Java client writes; raw snappy is read too);
* a batch whose records all survive is returned as the same bytes.

Batch metadata is kept as Kafka's cleaner keeps it: base offset, last offset
delta (so the batch still spans its original offsets and the next batch
follows without a gap in the batch chain), producer id, epoch, base
sequence, attributes and timestamps. A batch whose records all go is dropped,
unless the caller asks to retain it (the last batch of a producer, so
idempotent producer state survives); it is then written as an empty batch
(records count 0, no payload), as Kafka does.

Contract: pure functions over bytes, safe on any thread or process.
"""

import struct

from pluglog.errors import CorruptRecordError, InvalidRecordError, records_refused
from pluglog.protocol.codecs import compress, decompress
from pluglog.protocol.crc import crc32c
from pluglog.protocol.records import decode_varlong
from pluglog.storage.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
)

_U32 = struct.Struct(">I")
#: compression.type values and the batch attribute codec they stand for
CODEC_IDS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _varint(data, position):
    """Zig-zag varint at ``position``: ``(value, next position)``; the
    one-byte case (small lengths and deltas, most fields) stays inline."""
    byte = data[position]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), position + 1
    return decode_varlong(data, position)


def iter_record_spans(data, count):
    """Yield ``(start, end, offset_delta, key, value_is_null)`` for the
    ``count`` records of an uncompressed record array.

    The compaction hot loop (one pass per record of the dirty log): it
    decodes only what it needs, with the one-byte varint case inline."""
    position = 0
    size = len(data)
    try:
        for _ in range(count):
            length, body = _varint(data, position)
            end = body + length
            if length < 0 or end > size:
                raise InvalidRecordError("record length runs past the end of the batch")
            cursor = body + 1  # attributes
            byte = data[cursor]
            if byte < 0x80:  # timestamp delta
                cursor += 1
            else:
                _, cursor = decode_varlong(data, cursor)
            offset_delta, cursor = _varint(data, cursor)
            key_length, cursor = _varint(data, cursor)
            if key_length >= 0:
                key = data[cursor : cursor + key_length]
                cursor += key_length
            else:
                key = None
            if cursor >= end:
                raise InvalidRecordError("record fields run past the record length")
            # A null value is the varint -1, the single byte 0x01.
            yield position, end, offset_delta, key, data[cursor] == 1
            position = end
    except IndexError:
        raise InvalidRecordError("record runs past the end of the batch") from None


def batch_records(batch):
    """``(header fields, record array)`` of one stored or produced batch."""
    fields = HEADER_STRUCT.unpack_from(batch, 0)
    size = fields[1] + LOG_OVERHEAD
    payload = memoryview(batch)[HEADER_SIZE:size]
    return fields, decompress(fields[5] & COMPRESSION_MASK, payload)


def iter_keys(batch):
    """Yield ``(offset, key, value_is_null)`` of every record of ``batch``."""
    fields, data = batch_records(batch)
    base = fields[0]
    for _, _, delta, key, is_null in iter_record_spans(data, fields[12]):
        yield base + delta, key, is_null


def first_keyless_record(batch):
    """Offset delta of the first record without a key, or ``None``."""
    fields, data = batch_records(batch)
    for _, _, delta, key, _ in iter_record_spans(data, fields[12]):
        if key is None:
            return delta
    return None


def keyless_records(batch):
    """Batch indexes (0-based positions) of the records without a key."""
    fields, data = batch_records(batch)
    return [
        index
        for index, (_, _, _, key, _) in enumerate(iter_record_spans(data, fields[12]))
        if key is None
    ]


def _crc_ok(batch):
    """One whole batch whose CRC-32C matches (what the append checks too)."""
    if len(batch) < HEADER_SIZE:
        return False
    fields = HEADER_STRUCT.unpack_from(batch, 0)
    size = fields[1] + LOG_OVERHEAD
    return size == len(batch) and crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:size]) == fields[4]


def require_keys(batch):
    """Raise InvalidRecordsError naming every record of ``batch`` without a
    key (a compacted topic refuses the batch, as Kafka does)."""
    if not _crc_ok(batch):
        return  # the append's own validation refuses it (CORRUPT_MESSAGE)
    try:
        missing = keyless_records(batch)
    except CorruptRecordError as exc:
        raise InvalidRecordError(str(exc)) from None
    if missing:
        # Every keyless record is named (KIP-467), as Kafka's LogValidator does.
        reason = "a compacted topic cannot accept a record without a key"
        raise records_refused("compacted topic", [(index, reason) for index in missing])


def recompress(batch, compression_type):
    """``batch`` with its records compressed as topic config
    ``compression.type`` asks (``batch`` itself when it already is); header
    fields are kept, length and CRC recomputed. Validates the CRC first, so
    a corrupt batch is refused, not silently re-signed."""
    codec = CODEC_IDS[compression_type]
    fields = HEADER_STRUCT.unpack_from(batch, 0)
    if fields[5] & COMPRESSION_MASK == codec:
        return batch
    if not _crc_ok(batch):
        return batch  # left to the append's own validation, which refuses it
    _, data = batch_records(batch)
    return build(fields, data, fields[12], codec)


def build(fields, records_data, count, codec=None):
    """A batch with ``fields``' header (baseOffset, lastOffsetDelta, producer
    and timestamps kept) holding ``count`` records of ``records_data``
    compressed with ``codec`` (the header's codec by default); CRC recomputed."""
    fields = list(fields)
    if codec is None:
        codec = fields[5] & COMPRESSION_MASK
    payload = compress(codec, records_data) if count else b""
    if not count:
        codec = 0  # an empty batch has nothing to compress
    fields[1] = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    fields[4] = 0
    fields[5] = (fields[5] & ~COMPRESSION_MASK) | codec
    fields[12] = count
    header = bytearray(HEADER_STRUCT.pack(*fields))
    crc = crc32c(payload, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    _U32.pack_into(header, 17, crc)
    return bytes(header) + payload


def filter_batch(batch, keep, retain_empty=False):
    """Filter one stored batch by ``keep(offset, key, value_is_null) -> bool``.

    Returns ``(new_batch or None, kept, removed)``: ``batch`` itself when
    every record is kept; ``None`` when none is and ``retain_empty`` is
    false. Control batches (transaction markers) are kept whole.
    """
    fields = HEADER_STRUCT.unpack_from(batch, 0)
    if fields[5] & CONTROL_MASK:
        return batch, fields[12], 0
    fields, data = batch_records(batch)
    base = fields[0]
    spans = []
    total = 0
    for start, end, delta, key, is_null in iter_record_spans(data, fields[12]):
        total += 1
        if keep(base + delta, key, is_null):
            spans.append((start, end))
    kept = len(spans)
    if kept == total:
        return batch, kept, 0
    if not kept and not retain_empty:
        return None, 0, total
    records_data = b"".join(data[start:end] for start, end in spans)
    return build(fields, records_data, kept), kept, total - kept
