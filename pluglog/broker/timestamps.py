"""Offset lookup by timestamp with Kafka's record-level precision.

The storage's time index answers per batch: the first batch whose max
timestamp reaches the target. Kafka's ListOffsets answers the first *record*
with timestamp >= target, so this decodes that one batch (ListOffsets is not
a hot path) to find the record. That record is always in the batch the index
returns: any earlier batch holding a record at or past the target would have
a max timestamp at or past it too.
"""

from twisted.internet import defer

from pluglog.interfaces import ITieredLog
from pluglog.protocol.records import iter_batches
from pluglog.storage.remote.lookup import find_timestamp

LOG_APPEND_TIME = 1


def offset_for_timestamp(log, target_ms, high_watermark):
    """Return ``(offset, timestamp)`` of the first record with timestamp >=
    ``target_ms`` below ``high_watermark``, or ``None``."""
    found = log.offset_for_timestamp(target_ms)
    if found is None or found[0] >= high_watermark:
        return None
    start = found[0]
    result = log.read(start, 1, max_offset=high_watermark, min_one_batch=True)
    if not result.size:
        # A remote tier's answer (tiered storage), still being fetched:
        # its segment-granular offset stands.
        return found
    records = result.records
    data = records if isinstance(records, (bytes, bytearray, memoryview)) else records.read()
    for batch in iter_batches(data, verify_crc=False):
        if batch.timestamp_type == LOG_APPEND_TIME:
            # Every record carries the batch's append time.
            if batch.max_timestamp >= target_ms:
                return max(batch.base_offset, start), batch.max_timestamp
            continue
        for record in batch.records:
            if record.offset >= start and record.timestamp >= target_ms:
                if record.offset >= high_watermark:
                    return None
                return record.offset, record.timestamp
    return None


def offset_for_timestamp_deferred(log, target_ms, high_watermark):
    """:func:`offset_for_timestamp` across both tiers, as a Deferred: when
    the answer is in a remote segment (tiered storage) that segment's time
    and offset indexes and the batch are read through the remote tier's
    cache (:mod:`pluglog.storage.remote.lookup`), off the reactor, for the
    exact record as in a local segment."""
    tier = log.remote_tier if ITieredLog.providedBy(log) else None
    if tier is not None and tier.loaded:
        segment = tier.segment_for_timestamp(target_ms)
        if segment is not None and segment.base_offset < log.log_start_offset:
            d = find_timestamp(tier, segment, target_ms, tier.log_start_offset)

            def found(answer):
                if answer is None or answer[0] >= log.log_start_offset:
                    # Not below the local start after all: the local log answers.
                    return offset_for_timestamp(log, target_ms, high_watermark)
                return answer

            return d.addCallback(found)
    return defer.succeed(offset_for_timestamp(log, target_ms, high_watermark))


def max_timestamp_offset(log, high_watermark):
    """ListOffsets MAX_TIMESTAMP (-3, v7+): ``(offset, timestamp)`` of the
    first record with the largest timestamp below ``high_watermark``, or
    None when there is none. The segment infos' largest timestamps find the
    segment, its batch headers the batch, and that batch is decoded. The
    local log only: :func:`max_timestamp_offset_deferred` adds the remote tier."""
    best = None
    for info in log.segment_infos():
        if info.base_offset >= high_watermark or info.next_offset <= log.log_start_offset:
            continue
        if info.largest_timestamp >= 0 and (best is None or info.largest_timestamp > best[0]):
            best = (info.largest_timestamp, info.base_offset, info.next_offset)
    if best is None:
        return None
    target, first, end = best
    for header in log.batch_headers(max(first, log.log_start_offset)):
        if header.base_offset >= min(end, high_watermark):
            break
        if header.max_timestamp != target:
            continue
        result = log.read(header.base_offset, 1, max_offset=high_watermark)
        records = result.records
        data = records if isinstance(records, (bytes, bytearray, memoryview)) else records.read()
        for batch in iter_batches(data, verify_crc=False):
            if batch.timestamp_type == LOG_APPEND_TIME:
                return batch.base_offset, batch.max_timestamp
            for record in batch.records:
                if record.timestamp == target:
                    return record.offset, target
    return None


def max_timestamp_offset_deferred(log, high_watermark):
    """:func:`max_timestamp_offset` across both tiers, as a Deferred. The
    remote segments' metadata carries each one's max timestamp; when the
    largest of all is in a segment below the local start (ties: the earlier
    offset, as in one log) that segment is searched through the remote
    tier's cache (:func:`~pluglog.storage.remote.lookup.find_timestamp`, off
    the reactor) for its first record with that timestamp."""
    local = max_timestamp_offset(log, high_watermark)
    tier = log.remote_tier if ITieredLog.providedBy(log) else None
    if tier is None or not tier.loaded or tier.log_start_offset is None:
        return defer.succeed(local)
    start = tier.log_start_offset
    best = None
    for segment in tier.segments:
        if segment.next_offset <= start or segment.base_offset >= log.log_start_offset:
            continue
        if segment.max_timestamp >= 0 and (
            best is None or segment.max_timestamp > best.max_timestamp
        ):
            best = segment
    if best is None or (local is not None and best.max_timestamp < local[1]):
        return defer.succeed(local)
    d = find_timestamp(tier, best, best.max_timestamp, start)

    def found(answer):
        # None: the newest records were deleted (DeleteRecords) after the
        # metadata was written; the local log's answer stands.
        if answer is None or answer[0] >= high_watermark:
            return local
        return answer

    return d.addCallback(found)
