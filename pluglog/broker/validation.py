"""Produce-time record validation: every record of a client batch is walked.

This is the part of Kafka's LogValidator that the header checks of
:mod:`pluglog.storage.records` (magic, lengths, CRC-32C, counts) cannot do:
it reads the records themselves, decompressing a compressed batch first, and
refuses the batch unless

* the attributes name a known codec (0-4) and no bit above the control flag
  is set (bit 6, Kafka's delete-horizon flag, belongs to the log cleaner);
* a compressed payload decompresses cleanly to at most
  :data:`DECOMPRESSION_FACTOR` x max.message.bytes (a "zip bomb" costs at
  most that much memory and CPU, then INVALID_RECORD);
* every record's framing is whole: length varint, attributes (an unused
  byte; one with its top bit set is refused, see :func:`walk_records`), timestamp and
  offset deltas, key, value and header lengths (a negative record length or
  header key length refused; negative key and value lengths are nulls, as
  Kafka reads them), each record ending exactly where its length
  says, exactly recordsCount records and no byte left over;
* offset deltas run 0, 1, ... lastOffsetDelta;
* timestamp deltas are well-formed varlongs. Kafka checks record timestamps
  only against message.timestamp.before/after.max.ms, which pluglog does not
  have; the header's maxTimestamp is what the time index uses.

Errors: framing, codec, attribute and decompression problems raise
:class:`InvalidRecordError` (INVALID_RECORD, which clients do not retry, as
Kafka's InvalidRecordException).
The CRC mismatch stays the storage layer's CORRUPT_MESSAGE.

Speed: the record walk runs in C, in :mod:`pluglog._recordwalk`
(pluglog/_recordwalk.c, built by setup.py; about 1 us for 50 x 200-byte
records). Without it (a checkout nobody ran ``build_ext`` in) the walk is
the pure-Python :func:`walk_records` (about 500 us), which is also the
reference the tests hold the C walk to. aiokafka's Cython iterator used to sit
between the two; it reads varints of up to ten bytes where Kafka refuses a
sixth, so it accepted batches Kafka refuses, and it went.
bench/validation_bench.py and bench/RESULTS.md have the figures.

Contract: pure functions over bytes-like objects, no I/O; the caller (the
leader append path in :meth:`pluglog.broker.partition.Partition.append`)
runs them before a byte is written, so a refused batch writes nothing.
"""

import struct
import zlib

import cramjam

from pluglog.errors import InvalidRecordError

try:  # our C walk (setup.py builds it; optional)
    from pluglog._recordwalk import walk as _c_walk
except ImportError:  # pragma: no cover - a checkout without build_ext
    _c_walk = None


#: a compressed batch may decompress to at most this many times max.message.bytes
DECOMPRESSION_FACTOR = 64
#: ... and never less than this (small max.message.bytes still allow real batches)
MIN_DECOMPRESSED_LIMIT = 16 << 20

_HEADER_SIZE = 61
_ATTRIBUTES_AT = 21
_FIELDS = struct.Struct(">qiibIhiqqqhii").unpack_from
# Bits a client may set: codec (0-2), timestamp type (3), transactional (4);
# control (5) is refused separately: only the broker writes markers.
_ALLOWED_ATTRIBUTES = 0x3F
_CONTROL = 0x20


def _error(message):
    return InvalidRecordError(message)


# -- decompression (bounded) ------------------------------------------------


def _limit(max_message_bytes):
    return max(max_message_bytes * DECOMPRESSION_FACTOR, MIN_DECOMPRESSED_LIMIT)


def _too_big(limit):
    return _error(
        f"compressed batch decompresses to more than {limit} bytes "
        f"({DECOMPRESSION_FACTOR} x max.message.bytes)"
    )


def _gunzip(data, limit):
    out = []
    total = 0
    data = bytes(data)
    while True:
        inflater = zlib.decompressobj(31)
        chunk = inflater.decompress(data, limit + 1 - total)
        total += len(chunk)
        out.append(chunk)
        if total > limit or inflater.unconsumed_tail:
            raise _too_big(limit)
        if not inflater.eof:
            raise _error("gzip payload is truncated")
        data = inflater.unused_data
        if not data:  # several gzip members are legal (Java reads them all)
            return b"".join(out)


def _raw_snappy_length(data, position):
    number = shift = 0
    for i in range(5):
        if position + i >= len(data):
            break
        byte = data[position + i]
        number |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return number
        shift += 7
    raise _error("snappy block has no valid length preamble")


def _unsnappy(data, limit):
    data = bytes(data)
    if data.startswith(b"\x82SNAPPY\x00"):  # xerial framing (Java, kafka-python)
        blocks = []
        position = 16
        while position < len(data):
            if position + 4 > len(data):
                raise _error("xerial snappy block length is truncated")
            (length,) = struct.unpack_from(">i", data, position)
            position += 4
            if length < 0 or position + length > len(data):
                raise _error("xerial snappy block runs past the payload")
            blocks.append(data[position : position + length])
            position += length
    else:  # raw snappy (librdkafka)
        blocks = [data]
    # Each raw block states its length up front: a bomb is refused unread.
    total = sum(_raw_snappy_length(block, 0) for block in blocks)
    if total > limit:
        raise _too_big(limit)
    return b"".join(bytes(cramjam.snappy.decompress_raw(block)) for block in blocks)


#: the first output buffer of a bounded LZ4 or zstd decompression, as a
#: multiple of the compressed size (client batches compress 2-10 times)
_FIRST_GUESS = 16


def _bounded(codec, data, limit):
    """Decompress into buffers that grow 8 times per try up to ``limit`` + 1
    bytes, so a payload that inflates past ``limit`` is stopped there.
    cramjam writes into a given buffer and fails when it is full."""
    data = bytes(data)
    size = min(limit + 1, max(1 << 16, len(data) * _FIRST_GUESS))
    while True:
        out = bytearray(size)
        try:
            written = codec.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if size <= limit:  # full, or damaged: a bigger buffer tells which
                size = min(limit + 1, size * 8)
                continue
            if "failed to write whole buffer" in str(exc):
                raise _too_big(limit) from None
            raise
        if written > limit:
            raise _too_big(limit)
        if written < size:
            return memoryview(out)[:written]
        size = min(limit + 1, size * 8)  # exactly full: there may be more


def _unlz4(data, limit):
    return _bounded(cramjam.lz4, data, limit)


def _unzstd(data, limit):
    return _bounded(cramjam.zstd, data, limit)


_DECOMPRESSORS = {1: _gunzip, 2: _unsnappy, 3: _unlz4, 4: _unzstd}


def decompress_bounded(codec, data, limit):
    """The records of a ``codec``-compressed payload, at most ``limit`` bytes."""
    try:
        return _DECOMPRESSORS[codec](data, limit)
    except InvalidRecordError:
        raise
    except Exception as exc:  # each library has its own error types
        raise _error(f"cannot decompress codec {codec} payload: {exc}") from exc


# -- record walk --------------------------------------------------------------


def _varint(data, position, max_bytes):
    number = shift = 0
    end = len(data)
    for i in range(max_bytes):
        if position + i >= end:
            raise _error("varint runs past the end of the records")
        byte = data[position + i]
        number |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (number >> 1) ^ -(number & 1), position + i + 1
        shift += 7
    raise _error(f"varint longer than {max_bytes} bytes")


def _skip_bytes(data, position, end, what):
    length, position = _varint(data, position, 5)
    if length > 0:  # any negative length is a null, as Kafka reads it
        position += length
        if position > end:
            raise _error(f"{what} runs past the end of its record")
    return position


def walk_records(data, count):
    """Walk ``count`` records of an uncompressed record array ``data``.

    Returns the offset deltas; raises InvalidRecordError on any framing
    fault. The pure-Python reference of the C walk.
    """
    position = 0
    size = len(data)
    offsets = []
    for index in range(count):
        length, position = _varint(data, position, 5)
        end = position + length
        if length <= 0 or end > size:
            raise _error(f"record {index} has length {length} with {size - position} bytes left")
        if data[position] & 0x80:
            # Kafka ignores this unused int8; aiokafka's C walker reads it as a
            # varint and refuses a top bit, so both walkers refuse it. No client
            # writes anything but 0.
            raise _error(f"record {index} has attributes byte {data[position]:#04x}")
        position += 1
        _, position = _varint(data, position, 10)  # timestamp delta
        offset_delta, position = _varint(data, position, 5)
        position = _skip_bytes(data, position, end, "key")
        position = _skip_bytes(data, position, end, "value")
        headers, position = _varint(data, position, 5)
        if headers < 0:
            raise _error(f"record {index} has {headers} headers")
        for _ in range(headers):
            name_length, position = _varint(data, position, 5)
            if name_length < 0:
                raise _error(f"record {index} has a header key of length {name_length}")
            position += name_length
            if position > end:
                raise _error("header key runs past the end of its record")
            position = _skip_bytes(data, position, end, "header value")
        if position != end:
            raise _error(
                f"record {index} is {length} bytes but its fields take {position - end + length}"
            )
        offsets.append(offset_delta)
    if position != size:
        raise _error(f"{size - position} bytes left after {count} records")
    return offsets


_ORDER = list(range(1 << 12))


def _in_order(base_offset, count):
    # Clients send base offset 0: a slice of a prebuilt list beats range().
    if base_offset == 0 and count <= len(_ORDER):
        return _ORDER[:count]
    return list(range(base_offset, base_offset + count))


def validate_records(batch, max_message_bytes):
    """Walk every record of the one client batch ``batch``; return the count.

    ``batch`` is a bytes-like holding exactly one magic-2 batch. Its header
    and CRC are the storage layer's to check; a batch over max.message.bytes
    is left to it too (refused there without being walked).
    """
    view = memoryview(batch)
    if len(view) > max_message_bytes or len(view) < _HEADER_SIZE:
        return 0  # the storage layer refuses it (MESSAGE_TOO_LARGE / INVALID_RECORD)
    base_offset, _, _, _, _, attributes, last_delta, _, _, _, _, _, count = _FIELDS(view, 0)
    if attributes & ~_ALLOWED_ATTRIBUTES & 0xFFFF:
        raise _error(f"batch attributes {attributes:#06x} set bits clients may not use")
    if attributes & _CONTROL:
        raise _error("clients may not write control batches")
    codec = attributes & 0x07
    if codec > 4:
        raise _error(f"unknown compression codec {codec}")
    if count < 0:
        raise _error(f"negative record count {count}")
    if codec:
        records = decompress_bounded(codec, view[_HEADER_SIZE:], _limit(max_message_bytes))
        # The C iterator would decompress again (unbounded) if the codec bits stayed.
        view = b"".join(
            (view[:_ATTRIBUTES_AT], bytes((0, attributes & 0xF8)), view[23:_HEADER_SIZE], records)
        )
    if last_delta != count - 1:
        raise _error(f"lastOffsetDelta {last_delta} does not match recordsCount {count}")
    if _c_walk is not None:
        try:
            _c_walk(view[_HEADER_SIZE:], count)
        except ValueError as exc:
            raise _error(str(exc)) from None
        return count
    # Without the C walk (a checkout without build_ext): the reference walker.
    # aiokafka's Cython iterator is not a substitute: it reads varints of up to
    # ten bytes where Kafka refuses a sixth, so it accepts batches Kafka refuses.
    offsets = [base_offset + delta for delta in walk_records(view[_HEADER_SIZE:], count)]
    if len(offsets) != count:
        raise _error(f"batch says {count} records but holds {len(offsets)}")
    if last_delta != count - 1 or offsets != _in_order(base_offset, count):
        raise _error(f"record offset deltas are not 0..{last_delta} in order")
    return count
