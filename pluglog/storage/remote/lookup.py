"""ListOffsets by timestamp in the remote tier, to the record, as in a local segment.

:func:`find_timestamp` answers the first record at or after a timestamp in
one remote segment the way a local segment does
(:meth:`pluglog.storage.segment.Segment.find_timestamp` and then
:func:`pluglog.broker.timestamps.offset_for_timestamp`): the segment's
time index gives the last offset known to be older, its offset index the
file position to start from, the batch headers from there the first batch
whose max timestamp reaches the target, and that batch's records the
record. Every byte comes through the tier's bounded cache
(:meth:`~.tier.RemoteTier.load`: a miss is fetched in the reader thread
pool), so the reactor never waits on the store; the answer is a Deferred.
"""

import struct

from twisted.internet import defer

from pluglog.protocol.records import iter_batches
from pluglog.storage.remote.tier import CHUNK_BYTES, index_position, time_index_before

_HEADER = 61
_BASE_LENGTH = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")
_MAX_TIMESTAMP = struct.Struct(">q")
LOG_APPEND_TIME = 1


@defer.inlineCallbacks
def _bytes(tier, segment, start, end):
    """Bytes ``[start, end)`` of the segment's ``.log``, chunk by chunk."""
    chunks = []
    for number in range(start // CHUNK_BYTES, (end - 1) // CHUNK_BYTES + 1):
        chunks.append((yield tier.load(segment, "log", number)))
    joined = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    offset = (start // CHUNK_BYTES) * CHUNK_BYTES
    return joined[start - offset : end - offset]


@defer.inlineCallbacks
def find_timestamp(tier, segment, timestamp_ms, min_offset):
    """A Deferred firing with ``(offset, timestamp)`` of the first record of
    remote ``segment`` at offset >= ``min_offset`` with a timestamp >=
    ``timestamp_ms``, or None when it holds none."""
    time_index = yield tier.load(segment, "timeindex", -1)
    offset_index = yield tier.load(segment, "index", -1)
    base = segment.base_offset
    before = base + time_index_before(time_index, timestamp_ms)
    position = index_position(offset_index, max(before, min_offset) - base)
    end_of_segment = segment.size_bytes
    while position < end_of_segment:
        header = yield _bytes(tier, segment, position, min(position + _HEADER, end_of_segment))
        first, length = _BASE_LENGTH.unpack_from(header, 0)
        total = 12 + length
        last = first + _LAST_DELTA.unpack_from(header, 23)[0]
        max_timestamp = _MAX_TIMESTAMP.unpack_from(header, 35)[0]
        if max_timestamp < timestamp_ms or last < min_offset:
            position += total
            continue
        body = yield _bytes(tier, segment, position, position + total)
        for batch in iter_batches(body, verify_crc=False):
            if batch.timestamp_type == LOG_APPEND_TIME:
                # Every record carries the batch's append time.
                return max(batch.base_offset, min_offset), batch.max_timestamp
            for record in batch.records:
                if record.offset >= min_offset and record.timestamp >= timestamp_ms:
                    return record.offset, record.timestamp
        position += total
    return None
