"""In-memory storage: the twin of the segment storage for tests and demos.

Format: each "segment" is a ``bytearray`` of batches exactly as the segment
storage would write them (same validation, offset assignment, leader epoch
and LogAppendTime patching, done by the shared
:class:`~pluglog.storage.log.BasePartitionLog`), plus per-batch columns
(base offset, last offset, start position, end position, running max
timestamp) in :mod:`array`\\ s, so every lookup is a bisect. Segments roll
on the same rules (segment.bytes, segment.ms); retention, DeleteRecords and
truncation behave the same. Reads return ``bytes`` rather than file ranges.

Threading/reactor contract: synchronous, caller's thread, no clock reads.
Nothing survives the process; flush and the fsync policy are no-ops.

Invariants: as for the segment storage (see :mod:`pluglog.storage.log`);
the columns always describe exactly the batches in ``data``.
"""

from array import array
from bisect import bisect_left, bisect_right

from zope.interface import implementer

from pluglog.config import TopicConfig
from pluglog.interfaces import (
    ICompactableLog,
    ICompactingStorage,
    IFlushableLog,
    IPartitionLog,
    IReplicatedLog,
    IReplicatingStorage,
)
from pluglog.storage.compaction import filter_batch, iter_keys
from pluglog.storage.log import FSYNC_NEVER, BasePartitionLog
from pluglog.storage.records import PreparedAppend, parse_header

_COLUMNS = ("data", "bases", "lasts", "starts", "ends", "max_timestamps", "running_max")


class MemorySegment:
    """A segment held in memory; same duck type as LogSegment."""

    def __init__(self, base_offset, created_ms=-1):
        self.base_offset = base_offset
        self.created_ms = created_ms
        self.deleted = False
        self.cleaned_ms = -1  # when compaction first rewrote it (tombstone clock)
        self._clear()

    def _clear(self):
        self.data = bytearray()
        self.bases = array("q")
        self.lasts = array("q")
        self.starts = array("q")
        self.ends = array("q")
        self.max_timestamps = array("q")
        self.running_max = array("q")  # max timestamp of batches [0..i]

    @property
    def size(self):
        return len(self.data)

    @property
    def next_offset(self):
        return self.lasts[-1] + 1 if self.lasts else self.base_offset

    @property
    def largest_timestamp(self):
        return self.running_max[-1] if self.running_max else -1

    @property
    def first_batch_timestamp(self):
        return self.running_max[0] if self.running_max else -1

    def index_full(self):
        return False

    def append(self, prepared, written=None):
        position = len(self.data)
        for piece in prepared.pieces:
            self.data += piece
        if written is not None:
            written()
        running = self.largest_timestamp
        for base, last, size, batch_max in prepared.batches:
            self.bases.append(base)
            self.lasts.append(last)
            self.starts.append(position)
            position += size
            self.ends.append(position)
            self.max_timestamps.append(batch_max)
            running = max(running, batch_max)
            self.running_max.append(running)

    def read(self, offset, max_bytes, max_offset=None, min_one_batch=True):
        first = bisect_left(self.lasts, offset)
        if first == len(self.lasts):
            return None, -1
        if max_offset is not None and self.bases[first] >= max_offset:
            return b"", -1
        start = self.starts[first]
        stop = bisect_right(self.ends, start + max_bytes)
        if max_offset is not None:
            stop = min(stop, bisect_left(self.bases, max_offset))
        if stop <= first:
            if not min_one_batch:
                return b"", -1
            stop = first + 1
        return bytes(self.data[start : self.ends[stop - 1]]), self.bases[first]

    def find_timestamp(self, timestamp, min_offset=0):
        # Every batch before the running max reaches the target is older.
        first = max(bisect_left(self.lasts, min_offset), bisect_left(self.running_max, timestamp))
        for i in range(first, len(self.bases)):
            if self.max_timestamps[i] >= timestamp:
                return self.bases[i], self.max_timestamps[i]
        return None

    def batch_headers(self, start_offset):
        for i in range(bisect_left(self.lasts, start_offset), len(self.starts)):
            yield parse_header(self.data, self.starts[i])

    def truncate_to(self, offset):
        keep = bisect_left(self.lasts, offset)
        if keep == len(self.lasts):
            return 0
        cut = len(self.data) - self.starts[keep]
        del self.data[self.starts[keep] :]
        columns = (
            self.bases,
            self.lasts,
            self.starts,
            self.ends,
            self.max_timestamps,
            self.running_max,
        )
        for column in columns:
            del column[keep:]
        return cut

    def on_roll(self):
        pass

    def flush(self):
        pass

    def close(self):
        pass

    def mark_deleted(self):
        self.deleted = True

    def delete_files(self):
        self._clear()

    def batches(self):
        """``(header, bytes)`` of every batch, in order."""
        for start, end in zip(self.starts, self.ends, strict=True):
            yield parse_header(self.data, start), bytes(self.data[start:end])


@implementer(IPartitionLog, IFlushableLog, IReplicatedLog, ICompactableLog)
class MemoryPartitionLog(BasePartitionLog):
    """IPartitionLog kept in memory (records are returned as bytes)."""

    def __init__(self, topic, partition, config, reactor=None, fsync=FSYNC_NEVER):
        super().__init__(topic, partition, config, reactor, fsync)
        self._set_segments([MemorySegment(0)])

    def _new_segment(self, base_offset, now_ms):
        return MemorySegment(base_offset, now_ms)

    def compact(self, now_ms):
        """ICompactableLog: Kafka's rules over the segments below the active
        one (and below the first holding a record younger than
        min.compaction.lag.ms). Each segment is rewritten in place; its last
        batch and producers' batches stay, emptied, so offsets and
        idempotence state survive."""
        lag = self.config.min_compaction_lag_ms
        sources = []
        for segment in self.segments[:-1]:
            if lag > 0 and segment.largest_timestamp > now_ms - lag:
                break
            sources.append(segment)
        latest = {}
        for segment in sources:
            for _header, batch in segment.batches():
                for offset, key, _is_null in iter_keys(batch):
                    latest[key] = offset
        removed = 0
        expiry = self.config.delete_retention_ms
        for segment in sources:
            expired = segment.cleaned_ms >= 0 and segment.cleaned_ms + expiry <= now_ms

            def keep(offset, key, is_null, expired=expired):
                if key is None or latest.get(key) != offset:
                    return False
                return not (is_null and expired)

            found = list(segment.batches())
            rebuilt = MemorySegment(segment.base_offset, segment.created_ms)
            for i, (header, batch) in enumerate(found):
                retain = i == len(found) - 1 or header.producer_id >= 0
                new, _kept, gone = filter_batch(batch, keep, retain_empty=retain)
                removed += gone
                if new is not None:
                    new_header = parse_header(new)
                    span = (header.base_offset, header.last_offset, len(new), header.max_timestamp)
                    rebuilt.append(
                        PreparedAppend(
                            [new],
                            [span],
                            header.base_offset,
                            header.last_offset,
                            new_header.max_timestamp,
                            header.last_offset,
                            len(new),
                            new_header.records_count,
                        )
                    )
            for column in _COLUMNS:
                setattr(segment, column, getattr(rebuilt, column))
            if segment.cleaned_ms < 0:
                segment.cleaned_ms = now_ms
        return removed


@implementer(ICompactingStorage, IReplicatingStorage)
class MemoryLogStorage:
    """ILogStorage whose logs live in memory; ``close`` forgets nothing until
    the object itself is dropped, so a test can reopen a log."""

    log_class = MemoryPartitionLog

    def __init__(self, topic_defaults=None, reactor=None):
        self.topic_defaults = topic_defaults or TopicConfig()
        self.reactor = reactor
        self._logs = {}

    def open_log(self, topic, partition, topic_config=None):
        log = self._logs.get((topic, partition))
        config = topic_config or self.topic_defaults
        if log is None:
            log = MemoryPartitionLog(topic, partition, config, self.reactor)
            self._logs[(topic, partition)] = log
        else:
            log.config = config
            log.closed = False
        return log

    def get_log(self, topic, partition):
        return self._logs.get((topic, partition))

    def delete_log(self, topic, partition):
        log = self._logs.pop((topic, partition), None)
        if log is not None:
            for segment in log.segments:
                segment.delete_files()

    def logs(self):
        return list(self._logs.values())

    def flush_all(self):
        for log in self._logs.values():
            log.flush()

    def close(self):
        for log in self._logs.values():
            log.close()
