"""Record batch headers and produce-time validation.

Format: a log is a concatenation of magic-2 record batches exactly as they
travel on the wire. Only the fixed 61-byte big-endian header is ever parsed
here (kafka-protocol.md §2.1)::

    0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32
    16 magic i8 | 17 crc u32 | 21 attributes i16 | 23 lastOffsetDelta i32
    27 baseTimestamp i64 | 35 maxTimestamp i64 | 43 producerId i64
    49 producerEpoch i16 | 53 baseSequence i32 | 57 recordsCount i32 | 61 records

The CRC-32C covers ``[21, end)``, so baseOffset and partitionLeaderEpoch can be
patched without recomputing it; only LogAppendTime re-stamping (attributes and
maxTimestamp) needs a new CRC.

Contract: pure functions over bytes-like objects, no I/O; safe on any thread.
Work is O(batches): records inside a batch are never decoded (that is
:mod:`pluglog.protocol.records`' job). What an append or a read returns is in
:mod:`pluglog.storage.results`.

Invariants of :func:`prepare_append`: nothing is returned unless every batch
passed validation, so a failed append writes nothing; offsets assigned are
contiguous from ``next_offset``.
"""

import struct
from collections import namedtuple

from pluglog.errors import CorruptRecordError, InvalidRecordError, MessageTooLargeError
from pluglog.protocol.crc import crc32c

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
HEADER_SIZE = 61
#: bytes before batchLength's count starts (baseOffset + batchLength)
LOG_OVERHEAD = 12
#: smallest legal batchLength: the header minus LOG_OVERHEAD
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

CREATE_TIME = 0
LOG_APPEND_TIME = 1

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
# baseOffset, batchLength, partitionLeaderEpoch: the 16 bytes the broker patches.
_PATCH_STRUCT = struct.Struct(">qii")
_ATTRS_STRUCT = struct.Struct(">h")
_TS_STRUCT = struct.Struct(">q")
_CRC_STRUCT = struct.Struct(">I")
_unpack_header = HEADER_STRUCT.unpack_from

assert HEADER_STRUCT.size == HEADER_SIZE


class BatchHeader(
    namedtuple(
        "BatchHeader",
        "base_offset batch_length partition_leader_epoch magic crc attributes "
        "last_offset_delta base_timestamp max_timestamp producer_id producer_epoch "
        "base_sequence records_count",
    )
):
    """The 61-byte header of a magic-2 record batch (a public value type).

    Fields, in wire order: ``base_offset``, ``batch_length`` (bytes after
    the first 12), ``partition_leader_epoch``, ``magic`` (2), ``crc``
    (CRC-32C of the bytes from ``attributes`` on), ``attributes`` (codec,
    timestamp type, transactional and control bits), ``last_offset_delta``,
    ``base_timestamp``, ``max_timestamp``, ``producer_id``,
    ``producer_epoch``, ``base_sequence``, ``records_count``. Derived:
    ``last_offset``, ``next_offset``, ``size`` (bytes in the log),
    ``compression``, ``timestamp_type``, ``is_transactional``,
    ``is_control``.
    """

    __slots__ = ()

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self):
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self):
        """Bytes the batch occupies in a log (header included)."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self):
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self):
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self):
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self):
        return bool(self.attributes & CONTROL_MASK)


def parse_header(buf, position=0):
    """Return the :class:`BatchHeader` at ``position`` of ``buf`` (no checks)."""
    return BatchHeader._make(_unpack_header(buf, position))


def _check_batch(view, position, end, max_message_bytes):
    """Validate the client batch at ``position`` of ``view`` (a memoryview
    ending at ``end``); return its raw header tuple (:class:`BatchHeader`
    field order). This is the one place client batches are checked."""
    if end - position < HEADER_SIZE:
        raise InvalidRecordError(f"{end - position} trailing bytes are not a batch header")
    fields = _unpack_header(view, position)
    (
        _,
        batch_length,
        _,
        magic,
        crc,
        _,
        last_delta,
        _,
        _,
        _,
        _,
        _,
        count,
    ) = fields
    if magic != 2:
        raise InvalidRecordError(f"unsupported record batch magic {magic}")
    size = batch_length + LOG_OVERHEAD
    if batch_length < MIN_BATCH_LENGTH:
        raise InvalidRecordError(f"batch length {batch_length} is too small")
    if size > max_message_bytes:
        raise MessageTooLargeError(
            f"batch of {size} bytes exceeds max.message.bytes {max_message_bytes}"
        )
    if position + size > end:
        raise InvalidRecordError(f"batch of {size} bytes truncated to {end - position} bytes")
    if crc32c(view[position + ATTRIBUTES_OFFSET : position + size]) != crc:
        raise CorruptRecordError(f"CRC mismatch in batch at byte {position}")
    if count <= 0 or last_delta != count - 1:
        raise InvalidRecordError(
            f"lastOffsetDelta {last_delta} does not match recordsCount {count}"
        )
    # Whether a client may send a control batch or an idempotent batch
    # without sequences is the broker's rule (pluglog.broker.validation,
    # producer_state): its own markers and transactional offset commits are
    # both, and go through here too.
    return fields


def _check_buffer(view, max_message_bytes, position=0, found=None):
    """Validate every batch of one buffer from ``position`` (``found`` lists
    those already checked before it); return ``[(position, fields)]``."""
    end = len(view)
    if found is None:
        found = []
    while position < end:
        fields = _check_batch(view, position, end, max_message_bytes)
        found.append((position, fields))
        position += fields[1] + LOG_OVERHEAD
    if not found:
        raise InvalidRecordError("no record batches")
    return found


def validate_batches(buf, max_message_bytes):
    """Check client batches in ``buf`` and return their headers.

    Raises :class:`InvalidRecordError` for structural problems (wrong magic,
    bad lengths, inconsistent counts, a
    truncated or empty buffer), :class:`MessageTooLargeError` for a batch over
    ``max_message_bytes`` and :class:`CorruptRecordError` for a CRC mismatch.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    return [BatchHeader._make(fields) for _, fields in _check_buffer(view, max_message_bytes)]


def scan_batches(buf, position=0, end=None, next_offset=None, check_crc=True):
    """Walk the well-formed batches of a stored log region.

    Returns ``(entries, stop)`` where entries are ``(position, header)`` for
    every complete batch from ``position`` and ``stop`` is the byte after the
    last good one. It stops (without raising) at a torn or corrupt batch, a
    wrong magic, or a base offset below ``next_offset`` (offsets must grow).
    Control and compacted batches are accepted: this reads our own logs.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    if end is None:
        end = len(view)
    entries = []
    while end - position >= HEADER_SIZE:
        header = BatchHeader._make(_unpack_header(view, position))
        size = header.batch_length + LOG_OVERHEAD
        if (
            header.magic != 2
            or header.batch_length < MIN_BATCH_LENGTH
            or position + size > end
            or header.last_offset_delta < 0
            or (next_offset is not None and header.base_offset < next_offset)
        ):
            break
        if check_crc and crc32c(view[position + ATTRIBUTES_OFFSET : position + size]) != (
            header.crc
        ):
            break
        entries.append((position, header))
        next_offset = header.base_offset + header.last_offset_delta + 1
        position += size
    return entries, position


class PreparedAppend:
    """Validated batches with offsets assigned, ready to write.

    ``pieces`` are buffers whose concatenation is the bytes to store; the
    patched headers are small new bytes objects and the batch bodies are
    memoryview slices of the caller's buffer (no copy). ``batches`` holds one
    ``(base_offset, last_offset, size, max_timestamp)`` tuple per batch, in
    order (``max_timestamp`` as stored, i.e. after LogAppendTime re-stamping).
    """

    __slots__ = (
        "pieces",
        "batches",
        "first_offset",
        "last_offset",
        "max_timestamp",
        "offset_of_max_timestamp",
        "size_bytes",
        "records",
    )

    def __init__(
        self,
        pieces,
        batches,
        first_offset,
        last_offset,
        max_timestamp,
        offset_of_max_timestamp,
        size_bytes,
        records,
    ):
        self.pieces = pieces
        self.batches = batches
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.max_timestamp = max_timestamp
        self.offset_of_max_timestamp = offset_of_max_timestamp
        self.size_bytes = size_bytes
        self.records = records


def prepare_append(buffers, next_offset, leader_epoch, max_message_bytes, log_append_time_ms=-1):
    """Validate ``buffers`` and assign offsets from ``next_offset``.

    ``buffers`` is one bytes-like holding concatenated batches, or a list of
    them. With ``log_append_time_ms >= 0`` (message.timestamp.type =
    LogAppendTime) each batch's timestamp type and maxTimestamp are rewritten
    and its CRC recomputed (header plus a running CRC over the body).
    """
    if isinstance(buffers, list | tuple):
        checked = [
            (view, _check_buffer(view, max_message_bytes)) for view in map(memoryview, buffers)
        ]
        if not checked:
            raise InvalidRecordError("no record batches")
    else:
        view = memoryview(buffers)
        end = len(view)
        if not end:
            raise InvalidRecordError("no record batches")
        fields = _check_batch(view, 0, end, max_message_bytes)
        (_, length, _, _, _, _, last_delta, _, batch_max, _, _, _, count) = fields
        size = length + LOG_OVERHEAD
        if size < end:
            found = _check_buffer(view, max_message_bytes, size, [(0, fields)])
        elif log_append_time_ms < 0:
            # The Produce v3+ case, one buffer holding one batch: no loop.
            last = next_offset + last_delta
            return PreparedAppend(
                [_PATCH_STRUCT.pack(next_offset, length, leader_epoch), view[16:size]],
                [(next_offset, last, size, batch_max)],
                next_offset,
                last,
                batch_max if batch_max > -1 else -1,
                last if batch_max > -1 else -1,
                size,
                count,
            )
        else:
            found = [(0, fields)]
        checked = [(view, found)]
    pieces = []
    batches = []
    first_offset = next_offset
    max_timestamp = -1
    offset_of_max = -1
    records = 0
    size_bytes = 0
    for view, found in checked:
        for position, fields in found:
            (_, batch_length, _, _, _, attributes, last_delta, _, header_max, _, _, _, count) = (
                fields
            )
            size = batch_length + LOG_OVERHEAD
            if log_append_time_ms >= 0:
                patched = bytearray(view[position : position + HEADER_SIZE])
                _PATCH_STRUCT.pack_into(patched, 0, next_offset, batch_length, leader_epoch)
                _ATTRS_STRUCT.pack_into(
                    patched, ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK
                )
                _TS_STRUCT.pack_into(patched, MAX_TIMESTAMP_OFFSET, log_append_time_ms)
                body = view[position + HEADER_SIZE : position + size]
                crc = crc32c(body, crc32c(memoryview(patched)[ATTRIBUTES_OFFSET:]))
                _CRC_STRUCT.pack_into(patched, CRC_OFFSET, crc)
                pieces.append(bytes(patched))
                pieces.append(body)
                batch_max = log_append_time_ms
            else:
                pieces.append(_PATCH_STRUCT.pack(next_offset, batch_length, leader_epoch))
                pieces.append(view[position + 16 : position + size])
                batch_max = header_max
            last = next_offset + last_delta
            if batch_max > max_timestamp:
                max_timestamp = batch_max
                offset_of_max = last
            batches.append((next_offset, last, size, batch_max))
            records += count
            size_bytes += size
            next_offset = last + 1
    return PreparedAppend(
        pieces,
        batches,
        first_offset,
        next_offset - 1,
        max_timestamp,
        offset_of_max,
        size_bytes,
        records,
    )


def prepare_replicated(buf, next_offset):
    """Batches fetched from the leader, to be stored exactly as they are.

    Offsets, partition leader epochs and CRCs stay as the leader wrote them;
    every batch is CRC-checked and must start at or after ``next_offset``
    (gaps are legal: compaction leaves them). A trailing partial batch is
    ignored (the next fetch asks again from the new end). Returns
    ``(prepared, headers)``; ``prepared`` is ``None`` when ``buf`` holds no
    complete batch. Raises :class:`CorruptRecordError` when a batch is
    corrupt or does not follow the log.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    entries, stop = scan_batches(view, 0, len(view), next_offset)
    if len(view) - stop >= HEADER_SIZE:
        header = parse_header(view, stop)
        if stop + header.size <= len(view):
            raise CorruptRecordError(
                f"replicated batch at offset {header.base_offset} is corrupt or does not "
                f"follow offset {next_offset}"
            )
    if not entries:
        return None, []
    headers = [header for _, header in entries]
    max_timestamp = offset_of_max = -1
    batches = []
    records = 0
    for header in headers:
        last = header.base_offset + header.last_offset_delta
        if header.max_timestamp > max_timestamp:
            max_timestamp, offset_of_max = header.max_timestamp, last
        batches.append((header.base_offset, last, header.size, header.max_timestamp))
        records += header.records_count
    prepared = PreparedAppend(
        [view[:stop]],
        batches,
        headers[0].base_offset,
        batches[-1][1],
        max_timestamp,
        offset_of_max,
        stop,
        records,
    )
    return prepared, headers
