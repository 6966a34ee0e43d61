"""Offset lookup by timestamp with Kafka's record-level precision.

The storage's time index answers per batch: the first batch whose max
timestamp reaches the target. Kafka's ListOffsets answers the first *record*
with timestamp >= target, so this decodes that one batch (ListOffsets is not
a hot path) to find the record. That record is always in the batch the index
returns: any earlier batch holding a record at or past the target would have
a max timestamp at or past it too.
"""

from pluglog.protocol.records import iter_batches

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


def max_timestamp_offset(log, high_watermark):
    """ListOffsets MAX_TIMESTAMP (-3, v7+): ``(offset, timestamp)`` of the
    first record with the largest timestamp below ``high_watermark``, or
    None when there is none. The segment infos' largest timestamps find the
    segment, its batch headers the batch, and that batch is decoded. The
    local log only (a remote tier's segments are not searched)."""
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
