"""The log cleaner's work on one log: pick the cleanable range, compact it into ``.cleaned`` files.

Kafka's LogCleaner, in two halves. This module is the part that may run away
from the reactor (a worker thread or process): :func:`clean` reads segment
files by path, builds the key -> latest offset map over the dirty section and
writes each group of source segments as ``<base>.log.cleaned`` plus its two
indexes. It never touches a live file. :mod:`pluglog.storage.swap` (reactor
thread) swaps the results in; :mod:`pluglog.broker.log_cleaner` schedules.

Terms (Kafka's): a log's *clean* section is ``[log start, first dirty
offset)``, already compacted; the *dirty* section runs from the first dirty
offset (the cleaner checkpoint, a segment base offset) to the first
*uncleanable* offset: the active segment's base, or earlier the first
segment holding a record newer than ``min.compaction.lag.ms``. The dirty
ratio is dirty bytes / (clean + dirty bytes).

What a pass keeps, per record (:func:`clean`):

* records without a key go (a compacted topic refuses them at produce time;
  older ones may remain from before the policy changed);
* a record stays when no later record in the cleaned range has its key;
* records of aborted transactions go, and never shadow a committed value
  of their key; cleaning stops below a transaction still open;
* a tombstone (null value) stays until ``delete.retention.ms`` after its
  segment was first cleaned. That time is the cleaned segment file's mtime
  (set to the pass's ``now_ms``, so a task.Clock drives it); clean and dirty
  segments are never merged into one group, so a tombstone's clock is not
  restarted by later passes;
* batch metadata as Kafka keeps it (:mod:`pluglog.storage.compaction`): a
  batch keeps its offsets span, producer fields and codec; the last batch of
  each producer, and the last batch of every group (so that a ``.swap``
  names exactly the offsets it replaces), stay as empty batches when all of
  their records go.

The map is bounded like Kafka's by ``log.cleaner.dedupe.buffer.size``: 24
bytes an entry (a 16-byte hash and an 8-byte offset in Kafka) at a 0.9 load
factor; a pass that fills it stops at the last whole segment it mapped, and
the next pass continues from there. I/O is held to
``log.cleaner.io.max.bytes.per.second`` by :class:`Throttler`.

Contract: :func:`clean` is a pure function of a :class:`CleanJob` (picklable,
paths only) and the files; it runs on any thread or process, reads only
segments below the active one (which nobody writes any more) and writes only
``*.cleaned`` files. If a source is deleted or renamed meanwhile the open
descriptor still reads it, and the swap notices the log changed and drops the
result.
"""

import os
import time
from dataclasses import dataclass, field

from pluglog.fileutil import fsync_path, write_pieces
from pluglog.storage.compaction import filter_batch, iter_keys
from pluglog.storage.filenames import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_path,
)
from pluglog.storage.index import OffsetIndex, TimeIndex
from pluglog.storage.records import HEADER_SIZE, LOG_OVERHEAD, parse_header
from pluglog.storage.segment import MAX_RELATIVE_OFFSET
from pluglog.storage.txnindex import aborted_index, carry_entries, is_aborted

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
#: Kafka's SkimpyOffsetMap: 16-byte MD5 plus 8-byte offset per entry
MAP_ENTRY_BYTES = 24
MAP_LOAD_FACTOR = 0.9
_READ_CHUNK = 8 * 1024 * 1024


def map_capacity(dedupe_buffer_size, threads):
    """Keys one pass may map: the buffer is shared by the cleaner threads."""
    per_thread = dedupe_buffer_size // max(1, threads)
    return max(1, int(per_thread // MAP_ENTRY_BYTES * MAP_LOAD_FACTOR))


@dataclass(frozen=True)
class SourceSegment:
    """A segment of the cleanable range as the reactor saw it."""

    base_offset: int
    next_offset: int
    size: int
    path: str
    cleaned_ms: int  # when it was last cleaned (file mtime); -1 if it is dirty


@dataclass(frozen=True)
class CleanJob:
    """Everything :func:`clean` needs, picklable for a worker process."""

    topic: str
    partition: int
    directory: str
    segments: tuple  # SourceSegment, oldest first, none of them active
    first_dirty_offset: int
    now_ms: int
    delete_retention_ms: int
    max_map_entries: int
    segment_bytes: int
    index_interval_bytes: int
    max_index_bytes: int
    io_bytes_per_second: float = float("inf")
    #: aborted transactions overlapping the range: (producer id, first
    #: offset, marker offset); their records are dropped, not mapped
    aborted: tuple = ()


@dataclass
class CleanedGroup:
    """One ``.cleaned`` segment and the sources it replaces."""

    base_offset: int
    sources: tuple  # base offsets of the replaced segments
    next_offset: int
    size: int
    cleaned_ms: int
    #: earliest time a retained tombstone may be dropped, or None
    tombstone_horizon_ms: int | None = None
    #: made of dirty segments (first cleaning): its clock starts at the swap
    dirty: bool = False


@dataclass
class CleanResult:
    """What a pass did; ``end_offset`` is the next first dirty offset."""

    topic: str
    partition: int
    end_offset: int
    groups: list = field(default_factory=list)
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    seconds: float = 0.0


class Throttler:
    """Hold a byte rate by sleeping (Kafka's Throttler); ``sleep`` and
    ``clock`` are injectable for tests."""

    def __init__(self, rate, clock=time.monotonic, sleep=time.sleep):
        self.rate = rate
        self.clock = clock
        self.sleep = sleep
        self.start = clock()
        self.done = 0

    def __call__(self, nbytes):
        self.done += nbytes
        if self.rate == float("inf"):
            return
        ahead = self.done / self.rate - (self.clock() - self.start)
        if ahead > 0:
            self.sleep(ahead)


def iter_file_batches(fd, size, throttle=None):
    """Yield ``(position, batch bytes)`` of the whole batches of a segment file."""
    position = 0
    while size - position >= HEADER_SIZE:
        data = os.pread(fd, min(_READ_CHUNK, size - position), position)
        if throttle is not None:
            throttle(len(data))
        view = memoryview(data)
        used = 0
        while len(data) - used >= HEADER_SIZE:
            length = parse_header(data, used).batch_length + LOG_OVERHEAD
            if used + length > len(data):
                break
            yield position + used, view[used : used + length]
            used += length
        if not used:
            # One batch bigger than the chunk: read exactly it.
            length = parse_header(data).batch_length + LOG_OVERHEAD
            data = os.pread(fd, length, position)
            if len(data) < length:
                return
            if throttle is not None:
                throttle(len(data))
            yield position, memoryview(data)
            used = length
        position += used


def iter_file_headers(fd, size):
    """Yield the BatchHeader of every batch of a segment file (headers only)."""
    position = 0
    while size - position >= HEADER_SIZE:
        header = parse_header(os.pread(fd, HEADER_SIZE, position))
        yield header
        position += header.batch_length + LOG_OVERHEAD


def _open_sources(job):
    fds = {}
    try:
        for source in job.segments:
            fds[source.base_offset] = os.open(source.path, os.O_RDONLY)
    except OSError:
        for fd in fds.values():
            os.close(fd)
        raise
    return fds


def _build_map(job, fds, throttle, result):
    """Map the dirty segments' keys to their latest offset; return the map
    and the offset the mapped range ends at (a segment boundary)."""
    offsets = {}
    end = job.first_dirty_offset
    aborted = aborted_index(job.aborted)
    for source in job.segments:
        if source.base_offset < job.first_dirty_offset:
            continue
        mapped = {}
        for _, batch in iter_file_batches(fds[source.base_offset], source.size, throttle):
            if is_aborted(batch, aborted):
                continue
            for offset, key, _ in iter_keys(batch):
                if key is not None:
                    mapped[key] = offset
        result.bytes_read += source.size
        new_keys = sum(1 for key in mapped if key not in offsets)
        if offsets and len(offsets) + new_keys > job.max_map_entries:
            break  # full: the next pass continues from this segment
        offsets.update(mapped)
        end = source.next_offset
    return offsets, end


def _groups(sources, segment_bytes, max_index_bytes, index_interval_bytes):
    """Consecutive sources merged while they fit one segment; clean and dirty
    sources are never merged (their tombstone clocks differ)."""
    groups = []
    for source in sources:
        if groups:
            group = groups[-1]
            size = sum(s.size for s in group) + source.size
            entries = size // max(1, index_interval_bytes) + 1
            if (
                (group[0].cleaned_ms < 0) == (source.cleaned_ms < 0)
                and size <= segment_bytes
                and source.next_offset - 1 - group[0].base_offset <= MAX_RELATIVE_OFFSET
                and entries * 12 <= max_index_bytes
            ):
                group.append(source)
                continue
        groups.append([source])
    return groups


def _last_producer_batches(job, fds, end):
    """Base offset of the last batch of each producer in the cleaned range."""
    last = {}
    for source in job.segments:
        if source.base_offset >= end:
            break
        for header in iter_file_headers(fds[source.base_offset], source.size):
            # Markers carry no sequence: the producer's state is its last data batch.
            if header.producer_id >= 0 and not header.is_control:
                last[header.producer_id] = header.base_offset
    return set(last.values())


def is_compacted(topic_config):
    return "compact" in topic_config.cleanup_policy.split(",")


def cleanable_range(log_, topic_config, first_dirty, now_ms, first_unstable=None):
    """Return ``(sources, first_dirty, dirty_ratio, max_lag_due)`` of a log,
    or ``None`` when nothing below the active segment may be cleaned.

    ``sources`` lists the segments from the log start to the first
    uncleanable offset (the active segment, or the first segment holding a
    record younger than min.compaction.lag.ms)."""
    segments = log_.segments[:-1]
    if not segments:
        return None
    if first_dirty > log_.log_end_offset:
        first_dirty = 0  # a checkpoint entry of a deleted, recreated topic
    first_dirty = max(first_dirty, segments[0].base_offset)
    lag = topic_config.min_compaction_lag_ms
    sources = []
    clean_bytes = dirty_bytes = 0
    first_dirty_ts = None
    for segment in segments:
        if lag > 0 and segment.largest_timestamp > now_ms - lag:
            break
        if first_unstable is not None and segment.next_offset > first_unstable:
            break  # an open transaction: its outcome decides what to keep
        sources.append(segment)
        if segment.base_offset < first_dirty:
            clean_bytes += segment.size
        else:
            dirty_bytes += segment.size
            if first_dirty_ts is None:
                first_dirty_ts = segment.first_batch_timestamp
    if not sources:
        return None
    total = clean_bytes + dirty_bytes
    ratio = dirty_bytes / total if total else 0.0
    max_lag_due = (
        first_dirty_ts is not None
        and first_dirty_ts >= 0
        and now_ms - first_dirty_ts > topic_config.max_compaction_lag_ms
    )
    return sources, first_dirty, ratio, max_lag_due


def plan_clean(
    log_,
    topic_config,
    first_dirty,
    now_ms,
    max_map_entries,
    io_rate=float("inf"),
    first_unstable=None,
    aborted=(),
):
    """Return ``(job, dirty_ratio, max_lag_due)`` for the cleanable range of a
    segment-file log (see :func:`cleanable_range`), or ``None``. Reactor
    thread: it reads segment sizes, timestamps and file mtimes only.
    ``first_unstable``: the partition's first offset of an open transaction
    (cleaning stops below it); ``aborted``: its aborted transactions."""
    found = cleanable_range(log_, topic_config, first_dirty, now_ms, first_unstable)
    if found is None:
        return None
    sources, first_dirty, ratio, max_lag_due = found
    job = CleanJob(
        log_.topic,
        log_.partition,
        log_.directory,
        tuple(
            SourceSegment(
                s.base_offset,
                s.next_offset,
                s.size,
                s.log_path,
                cleaned_ms_of(s.log_path) if s.base_offset < first_dirty else -1,
            )
            for s in sources
        ),
        first_dirty,
        now_ms,
        topic_config.delete_retention_ms,
        max_map_entries,
        topic_config.segment_bytes,
        topic_config.index_interval_bytes,
        topic_config.segment_index_bytes,
        io_rate,
        tuple(aborted),
    )
    return job, ratio, max_lag_due


def clean(job):
    """Compact the cleanable range of ``job``; see the module docstring."""
    started = time.monotonic()
    result = CleanResult(job.topic, job.partition, job.first_dirty_offset)
    throttle = Throttler(job.io_bytes_per_second)
    fds = _open_sources(job)
    try:
        offsets, end = _build_map(job, fds, throttle, result)
        result.end_offset = end
        retained = _last_producer_batches(job, fds, end)
        sources = [s for s in job.segments if s.next_offset <= end]
        live = {}  # producer id -> its open transaction still has records here
        for group in _groups(
            sources, job.segment_bytes, job.max_index_bytes, job.index_interval_bytes
        ):
            result.groups.append(
                _clean_group(job, fds, group, offsets, retained, throttle, result, live)
            )
    finally:
        for fd in fds.values():
            os.close(fd)
    result.seconds = time.monotonic() - started
    return result


def _clean_group(job, fds, group, offsets, retained, throttle, result, live):
    aborted = aborted_index(job.aborted)
    base = group[0].base_offset
    dirty = group[0].cleaned_ms < 0
    cleaned_ms = job.now_ms if dirty else max(s.cleaned_ms for s in group)
    horizon = None
    path = segment_path(job.directory, base, LOG_SUFFIX) + CLEANED_SUFFIX
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    index_offsets, index_positions, times, time_offsets = [], [], [], []
    position = since = 0
    max_ts, offset_of_max = -1, base
    try:
        for n, source in enumerate(group):
            tombstones_expire = (
                source.cleaned_ms >= 0
                and source.cleaned_ms + job.delete_retention_ms <= job.now_ms
            )
            last_in_group = n == len(group) - 1
            batches = list(iter_file_batches(fds[source.base_offset], source.size, throttle))
            for i, (_, batch) in enumerate(batches):
                header = parse_header(batch)
                aborted_batch = is_aborted(batch, aborted)

                def keep(
                    offset, key, is_null, tombstones_expire=tombstones_expire, drop=aborted_batch
                ):
                    if key is None or drop:
                        return False
                    latest = offsets.get(key)
                    if latest is not None and offset < latest:
                        return False
                    return not (is_null and tombstones_expire)

                keep_empty = header.base_offset in retained or (
                    last_in_group and i == len(batches) - 1
                )
                if header.is_control and header.producer_id >= 0:
                    # A marker whose transaction has no record left goes like
                    # a tombstone, delete.retention.ms after it was first
                    # cleaned (Kafka's rule); until then it stays.
                    if not live.pop(header.producer_id, False) and not keep_empty:
                        if tombstones_expire:
                            continue
                        if horizon is None:
                            horizon = cleaned_ms + job.delete_retention_ms
                new, kept, removed = filter_batch(batch, keep, keep_empty)
                result.records_removed += removed
                if kept and header.is_transactional and not header.is_control:
                    # Records left: the marker saying whether they count stays.
                    # (A batch emptied but kept for producer state opens no
                    # transaction when read back: it has nothing to hide.)
                    live[header.producer_id] = True
                if new is None:
                    continue
                if horizon is None and _has_tombstone(new):
                    horizon = cleaned_ms + job.delete_retention_ms
                if since > job.index_interval_bytes:
                    index_offsets.append(header.base_offset - base)
                    index_positions.append(position)
                    if max_ts >= 0 and (not times or max_ts > times[-1]):
                        times.append(max_ts)
                        time_offsets.append(offset_of_max - base)
                    since = 0
                position = write_pieces(out, [new], position, len(new))
                throttle(len(new))
                since += len(new)
                if header.max_timestamp > max_ts:
                    max_ts, offset_of_max = header.max_timestamp, header.last_offset
        os.fsync(out)
    finally:
        os.close(out)
    if max_ts >= 0 and (not times or max_ts > times[-1]):
        times.append(max_ts)
        time_offsets.append(offset_of_max - base)
    for kind, index, args in (
        (INDEX_SUFFIX, OffsetIndex, (index_offsets, index_positions)),
        (TIME_INDEX_SUFFIX, TimeIndex, (times, time_offsets)),
    ):
        index_path = segment_path(job.directory, base, kind) + CLEANED_SUFFIX
        holder = index(index_path, base, job.max_index_bytes)
        holder.reset(*args)
        fsync_path(index_path)
    # The sources' aborted transactions go with them into the cleaned segment.
    carry_entries(
        [segment_path(job.directory, source.base_offset, TXN_INDEX_SUFFIX) for source in group],
        segment_path(job.directory, base, TXN_INDEX_SUFFIX) + CLEANED_SUFFIX,
    )
    os.utime(path, ns=(cleaned_ms * 1_000_000, cleaned_ms * 1_000_000))
    result.bytes_written += position
    return CleanedGroup(
        base,
        tuple(s.base_offset for s in group),
        group[-1].next_offset,
        position,
        cleaned_ms,
        horizon,
        dirty,
    )


def _has_tombstone(batch):
    return any(is_null for _, _, is_null in iter_keys(batch))


def cleaned_ms_of(path):
    """When a segment file was last cleaned (its mtime, ms)."""
    return os.stat(path).st_mtime_ns // 1_000_000
