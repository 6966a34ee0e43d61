"""Walking a segment's .log file batch by batch, reading headers only.

Reads of a log file that need nothing of the segment but its
descriptor, each reading in chunks with ``os.pread``:

* :func:`iter_headers`, the header-only walk that offset and timestamp
  lookups and truncation use to step from an index entry to the batch they
  want (no CRC check: the file was checked when it was opened), and
  :func:`first_at_time` over it, a lookup by time;
* :func:`find_batch` and :func:`batches_end`, the same walk for a fetch's
  read (the batch holding an offset, where the batches a byte limit allows
  end), unpacking only the fields a step needs;
* :func:`scan_file`, the CRC-checked scan that recovery cuts a torn or
  corrupt tail at, and that finds a segment's next offset and max timestamp;
* :func:`index_entries`, the sparse offset and time index entries of a
  scanned file, as the append path would have written them;
* :func:`extend_indexes`, the entries an index file's lost tail held
  (index files are not fsynced with the log; see ``LogSegment.flush``).

``fileno`` is a callable returning the descriptor, asked once per chunk: a
walk is a generator, and between two of its steps the caller may touch other
segments, so the open-files LRU may have closed and reopened this one's.
"""

import os
import struct
from bisect import bisect_left

from pluglog.storage.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    parse_header,
    scan_batches,
)

# Header walks read this much at a time; scans read bigger chunks.
SCAN_CHUNK = 16384
#: find_batch's first read: an index entry is at most index.interval.bytes
#: (4 KiB by default) plus one batch before the batch sought
FIND_CHUNK = 8192
RECOVERY_CHUNK = 8 * 1024 * 1024


def iter_headers(fileno, position, end):
    """Yield ``(position, header)`` of batches in [position, end), headers
    only; stop at the first header that is not a magic-2 batch."""
    while end - position >= HEADER_SIZE:
        data = os.pread(fileno(), min(SCAN_CHUNK, end - position), position)
        used = 0
        while len(data) - used >= HEADER_SIZE:
            header = parse_header(data, used)
            if header.magic != 2 or header.batch_length < MIN_BATCH_LENGTH:
                return
            yield position + used, header
            used += header.batch_length + LOG_OVERHEAD
        position += used


#: what a walk that only steps over batches needs of a header: base offset,
#: batch length, partition leader epoch, magic, CRC, attributes, last
#: offset delta (bytes 0-26; parse_header's named tuple costs more than the
#: rest of a step)
_STEP = struct.Struct(">qiibIhi")
_step = _STEP.unpack_from


def find_batch(fileno, position, end, offset):
    """``(position, base_offset, batch_length)`` of the first batch in
    [position, end) whose last offset is >= ``offset``, or None (none
    there, or a header that is not a magic-2 batch first). What
    :func:`iter_headers` + ``parse_header`` find, without building a
    header for every batch stepped over; the first chunk is small, as the
    batch sought is usually within ``index.interval.bytes`` of ``position``."""
    chunk = FIND_CHUNK
    while end - position >= HEADER_SIZE:
        data = os.pread(fileno(), min(chunk, end - position), position)
        size = len(data)
        used = 0
        while size - used >= HEADER_SIZE:
            base, length, _, magic, _, _, delta = _step(data, used)
            if magic != 2 or length < MIN_BATCH_LENGTH:
                return None
            if base + delta >= offset:
                return position + used, base, length
            used += length + LOG_OVERHEAD
        if not used:
            return None  # the file ended inside a header
        position += used
        chunk = SCAN_CHUNK
    return None


def batches_end(fileno, position, end, limit, max_offset):
    """``(stop, next)``: where the whole batches from ``position`` (a batch
    start) stop, the end of the last one that ends at or before ``limit``
    and, with ``max_offset``, starts below it (``position`` when the first
    does not); and ``(position, base_offset, batch_length)`` of the batch
    that did not fit, as :func:`find_batch` gives it, or None (the walk
    reached ``end`` or a header that is not a magic-2 batch)."""
    stop = position
    while end - position >= HEADER_SIZE:
        data = os.pread(fileno(), min(SCAN_CHUNK, end - position), position)
        size = len(data)
        used = 0
        while size - used >= HEADER_SIZE:
            base, length, _, magic, _, _, _ = _step(data, used)
            if magic != 2 or length < MIN_BATCH_LENGTH:
                return stop, None
            batch_end = position + used + length + LOG_OVERHEAD
            if batch_end > limit or (max_offset is not None and base >= max_offset):
                return stop, (position + used, base, length)
            stop = batch_end
            used += length + LOG_OVERHEAD
        if not used:
            return stop, None
        position += used
    return stop, None


def first_at_time(fileno, position, end, timestamp, min_offset):
    """``(base_offset, max_timestamp)`` of the first batch from ``position``
    holding offsets >= ``min_offset`` with a max timestamp >= ``timestamp``,
    or None (a ListOffsets by time, from the time index's entry)."""
    for _, header in iter_headers(fileno, position, end):
        if header.max_timestamp >= timestamp and header.next_offset > min_offset:
            return header.base_offset, header.max_timestamp
    return None


def scan_file(fileno, position, end, check_crc, next_offset=None):
    """Return ``(entries, stop)`` for the valid batches from ``position``
    (see :func:`~pluglog.storage.records.scan_batches`); ``stop`` is where
    the first torn or corrupt batch (or ``end``) begins."""
    entries = []
    while position < end:
        data = os.pread(fileno(), min(RECOVERY_CHUNK, end - position), position)
        found, stop = scan_batches(data, 0, len(data), next_offset, check_crc)
        if not found and len(data) >= HEADER_SIZE:
            # A batch bigger than one chunk: read exactly that batch.
            size = parse_header(data).batch_length + LOG_OVERHEAD
            if len(data) < size <= end - position:
                data = os.pread(fileno(), size, position)
                found, stop = scan_batches(data, 0, len(data), next_offset, check_crc)
        if not found:
            break
        entries.extend((position + p, h) for p, h in found)
        next_offset = found[-1][1].next_offset
        position += stop
    return entries, position


def index_entries(entries, base_offset, interval):
    """The index entries of scanned ``entries`` (``(position, header)``),
    one per ``interval`` bytes as appends add them.

    Returns ``(offsets, positions, times, time_offsets, since, max_ts,
    offset_of_max)``: relative offsets and file positions for the offset
    index, timestamps and relative offsets for the time index, the bytes
    written since the last entry, and the largest timestamp (-1 if none)
    with the offset it belongs to (``base_offset`` if none).
    """
    offsets, positions, times, time_offsets = [], [], [], []
    since = 0
    max_ts, offset_of_max = -1, base_offset
    for position, header in entries:
        if since > interval:
            offsets.append(header.base_offset - base_offset)
            positions.append(position)
            if max_ts >= 0 and (not times or max_ts > times[-1]):
                times.append(max_ts)
                time_offsets.append(offset_of_max - base_offset)
            since = 0
        since += header.batch_length + LOG_OVERHEAD
        if header.max_timestamp > max_ts:
            max_ts, offset_of_max = header.max_timestamp, header.last_offset
    return offsets, positions, times, time_offsets, since, max_ts, offset_of_max


def extend_indexes(fileno, size, index, time_index, interval):
    """Add to ``index`` and ``time_index`` (in memory) the entries the
    interval rule of ``LogSegment.append`` gives the batches after the last
    offset-index entry; return how many offset entries were added.

    The time index may have lost more than the offset index, so the running
    maximum timestamp is taken from its last entry on."""
    _, tail = index.last_entry()
    max_ts = time_index.last_timestamp
    offset_of_max = -1
    start = tail
    if time_index.offsets:
        offset_of_max = time_index.base_offset + time_index.offsets[-1]
        start = min(tail, index.lookup(offset_of_max)[1])
    # Index points between ``start`` and ``tail`` are in the offset index
    # already; the time index may still lack theirs.
    points = set(index.positions[bisect_left(index.positions, start) :])
    since = 0
    added = 0
    for position, header in iter_headers(fileno, start, size):
        if position > tail and since > interval:
            index.append(header.base_offset, position)
            added += 1
            since = 0
            time_index.maybe_append(max_ts, offset_of_max)
        elif position in points:
            time_index.maybe_append(max_ts, offset_of_max)
        if position >= tail:
            since += header.batch_length + LOG_OVERHEAD
        if header.max_timestamp > max_ts:
            max_ts, offset_of_max = header.max_timestamp, header.last_offset
    # A rolled or closed segment ends with its largest timestamp (on_roll).
    time_index.maybe_append(max_ts, offset_of_max)
    return added
