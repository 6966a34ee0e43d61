"""A topic-partition's log: an ordered list of segments, the last one active.

Format: ``<data-dir>/<topic>-<partition>/`` holds the segment files of
:mod:`pluglog.storage.segment`, named by 20-digit base offset. Segments
removed by retention, DeleteRecords or truncation are renamed to
``*.deleted`` and unlinked ``file.delete.delay.ms`` later (through the
reactor's ``callLater`` when a reactor was given, at once otherwise), so a
fetch that already holds a :class:`~pluglog.storage.results.FileRange` of
them can finish.

Threading/reactor contract: every method is synchronous and runs on the
caller's (reactor) thread; time is never read from the clock, ``now_ms`` is
passed in. The fsync policy decides what an append costs:

* ``never``: appends never fsync; data reaches disk when the OS writes it
  back, or on :meth:`flush`/:meth:`close`.
* ``interval``: an append fsyncs when ``flush.messages`` records or
  ``flush.ms`` milliseconds have accumulated since the last flush; the broker
  service also calls :meth:`maybe_flush` (time-based) or :meth:`flush`.
* ``always``: ``fdatasync`` after every append, before it is acknowledged.

Invariants:

* ``segments`` is non-empty and sorted by base offset; each segment's base
  offset is >= the previous segment's next offset; only the last one is
  written to.
* ``log_start_offset <= log_end_offset`` and ``log_start_offset`` lies in the
  first segment; ``recovery_point <= log_end_offset``.
* An append is all or nothing: batches are validated before any byte is
  written, and all batches of one append go to one segment.
* ``truncate_to(o)`` removes the whole batch containing ``o``, so the log end
  afterwards is that batch's base offset (a batch is never split).
"""

from bisect import bisect_right
from functools import partial
from typing import Any

from twisted.logger import Logger

from pluglog.errors import OffsetOutOfRangeError
from pluglog.fileutil import unlink_files
from pluglog.storage.api import append_info
from pluglog.storage.log_durability import FSYNC_ALWAYS, FSYNC_INTERVAL, FSYNC_NEVER, LogDurability
from pluglog.storage.records import prepare_append, prepare_replicated
from pluglog.storage.results import ReadResult, SegmentInfo
from pluglog.storage.segment import MAX_RELATIVE_OFFSET

_log = Logger()


class BasePartitionLog(LogDurability):
    """The segment-agnostic part of a partition log (shared with memory.py).

    Subclasses provide ``_new_segment(base_offset, now_ms)`` and may override
    ``_sync_directory()``.
    """

    #: The remote tier (:class:`pluglog.storage.remote.tier.RemoteTier`) of a
    #: topic with remote.storage.enable, attached by the remote log manager:
    #: reads below the local log start go to it, and retention deletes only
    #: segments it holds. None otherwise (no cost on any path).
    remote_tier: Any = None

    def __init__(self, topic, partition, config, reactor=None, fsync=FSYNC_INTERVAL):
        if fsync not in (FSYNC_NEVER, FSYNC_INTERVAL, FSYNC_ALWAYS):
            raise ValueError(f"unknown fsync policy {fsync!r}")
        self.topic = topic
        self.partition = partition
        self.config = config
        self.reactor = reactor
        self.fsync = fsync
        self.segments = []
        self._bases = []
        self.log_start_offset = 0
        self.recovery_point = 0
        #: called with this log after a truncation (the storage checkpoints
        #: a recovery point that fell below the one on disk)
        self.on_truncation = None
        #: called with this log when it gets unflushed records after none,
        #: or a new config while it has some (the storage's flush scheduler
        #: then visits it: :meth:`pluglog.storage.manager.SegmentLogStorage.flush_due_logs`)
        self.on_unflushed = None
        self._unflushed_records = 0
        self._last_flush_ms = None
        self._dirty = []
        self._directory_dirty = False
        #: truncations so far: a background flush's mark taken before one
        #: no longer says what the log holds (:meth:`finish_flush`)
        self._truncations = 0
        self._pending_deletes = {}
        self.closed = False

    def __repr__(self):
        return f"<{type(self).__name__} {self.topic}-{self.partition}>"

    # -- attributes -----------------------------------------------------------

    @property
    def active_segment(self):
        return self.segments[-1]

    @property
    def log_end_offset(self):
        return self.segments[-1].next_offset

    @property
    def size_bytes(self):
        return sum(segment.size for segment in self.segments)

    def update_config(self, config):
        """Use a changed TopicConfig from the next append on (segment and
        flush settings, max.message.bytes, timestamp type)."""
        self.config = config
        if self._unflushed_records and self.on_unflushed is not None:
            self.on_unflushed(self)  # flush.ms may have become finite

    def _set_segments(self, segments):
        self.segments = segments
        self._bases = [segment.base_offset for segment in segments]

    # -- append -------------------------------------------------------------

    def append(self, batches, now_ms, leader_epoch=0, answer=None):
        """Append a client's batches; return their :class:`AppendInfo`.

        ``answer(first_offset, log_append_time, log_start_offset)``, if
        given, is called exactly once on success, as soon as the batches are
        in the file (the page cache) and no flush is due: before the index
        and counter bookkeeping, so the produce response leaves first (it is
        called at the end when a flush is due, so an acknowledgement never
        precedes a required fsync). Not called when ``append`` raises.
        """
        # The produce hot path: attributes are read once into locals.
        config = self.config
        log_append_time = now_ms if config.message_timestamp_type == "LogAppendTime" else -1
        segment = self.segments[-1]
        prepared = prepare_append(
            batches, segment.next_offset, leader_epoch, config.max_message_bytes, log_append_time
        )
        if segment.size:
            segment = self._maybe_roll(segment, prepared, now_ms)
        return self._written(segment, prepared, now_ms, log_append_time, answer)

    def append_replicated(self, batches, now_ms):
        """Store batches fetched from the partition leader unchanged (a
        follower's append); returns ``(AppendInfo or None, headers)``."""
        prepared, headers = prepare_replicated(batches, self.log_end_offset)
        if prepared is None:
            return None, headers
        segment = self.segments[-1]
        if segment.size:
            segment = self._maybe_roll(segment, prepared, now_ms)
        return self._written(segment, prepared, now_ms, -1), headers

    def _written(self, segment, prepared, now_ms, log_append_time, answer=None):
        """Write ``prepared`` to ``segment`` and apply the flush policy."""
        config = self.config
        fsync = self.fsync
        records = prepared.records
        if self._last_flush_ms is None:
            self._last_flush_ms = now_ms
        # Decided before the write: with no flush due, the acknowledgement may
        # leave as soon as the bytes are written (the segment calls it back).
        flush_due = fsync == FSYNC_ALWAYS or (
            fsync == FSYNC_INTERVAL
            and (
                self._unflushed_records + records >= config.flush_messages
                or now_ms - self._last_flush_ms >= config.flush_ms
            )
        )
        early = None
        if answer is not None and not flush_due:
            early = partial(answer, prepared.first_offset, log_append_time, self.log_start_offset)
            answer = None
        segment.append(prepared, early)
        if segment.created_ms < 0:
            segment.created_ms = now_ms
        dirty = self._dirty
        if not dirty or dirty[-1] is not segment:
            dirty.append(segment)
        if not self._unflushed_records and self.on_unflushed is not None:
            self.on_unflushed(self)
        self._unflushed_records += records
        if flush_due:
            self.flush()
            if fsync == FSYNC_INTERVAL:
                self._last_flush_ms = now_ms
        if answer is not None:
            answer(prepared.first_offset, log_append_time, self.log_start_offset)
        return append_info(prepared, log_append_time, self.log_start_offset)

    def _maybe_roll(self, segment, prepared, now_ms):
        """Return the segment ``prepared`` goes to: the non-empty active
        ``segment``, or a new one if a roll rule says so."""
        config = self.config
        if segment.created_ms >= 0:
            waited = now_ms - segment.created_ms
        else:
            # Found on disk: measure from record time like Kafka does, so a
            # restart does not reset the segment's age.
            first = segment.first_batch_timestamp
            waited = prepared.max_timestamp - first if first >= 0 else 0
        if (
            segment.size + prepared.size_bytes > config.segment_bytes
            or waited > config.segment_ms
            or segment.index_full()
            or prepared.last_offset - segment.base_offset > MAX_RELATIVE_OFFSET
        ):
            return self.roll(now_ms)
        return segment

    def roll(self, now_ms):
        """Start a new active segment at log_end_offset (no-op if the active one is empty)."""
        active = self.segments[-1]
        if active.size == 0:
            return active
        active.on_roll()
        segment = self._new_segment(self.log_end_offset, now_ms)
        self.segments.append(segment)
        self._bases.append(segment.base_offset)
        self._directory_dirty = True
        return segment

    # -- read ---------------------------------------------------------------

    def read(self, offset, max_bytes, max_offset=None, min_one_batch=True):
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            tier = self.remote_tier
            # Only bounded reads (consumers: below the high watermark) go to
            # the remote tier; a follower's unbounded read gets OFFSET_OUT_OF_RANGE
            # and restarts at the local start (KIP-405's follower bootstrap).
            if tier is not None and offset < self.log_start_offset and max_offset is not None:
                result = tier.read(
                    offset, max_bytes, max_offset, min_one_batch, self.log_start_offset, end
                )
                if result is not None:
                    return result
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {end}] "
                f"of {self.topic}-{self.partition}"
            )
        i = max(0, bisect_right(self._bases, offset) - 1)
        for segment in self.segments[i:]:
            if max_offset is not None and segment.base_offset >= max_offset:
                break
            records, first = segment.read(offset, max_bytes, max_offset, min_one_batch)
            if records is not None:
                if records or min_one_batch:
                    return ReadResult(records, len(records), first, self.log_start_offset, end)
                needs = getattr(segment, "first_batch_needs", None)
                needs = 0 if needs is None else needs(offset, max_bytes, max_offset)
                return ReadResult(b"", 0, -1, self.log_start_offset, end, needs)
        return ReadResult(b"", 0, -1, self.log_start_offset, end)

    def offset_for_timestamp(self, timestamp_ms):
        tier = self.remote_tier
        if tier is not None:
            found = tier.offset_for_timestamp(timestamp_ms)
            if found is not None and found[0] < self.log_start_offset:
                return found
        for segment in self.segments:
            if segment.next_offset <= self.log_start_offset:
                continue
            if segment.largest_timestamp >= timestamp_ms:
                found = segment.find_timestamp(timestamp_ms, self.log_start_offset)
                if found is not None:
                    return max(found[0], self.log_start_offset), found[1]
        return None

    def batch_headers(self, start_offset=0):
        i = max(0, bisect_right(self._bases, start_offset) - 1)
        for segment in list(self.segments[i:]):
            yield from segment.batch_headers(start_offset)

    def segment_infos(self):
        last = len(self.segments) - 1
        return [SegmentInfo.of(segment, i == last) for i, segment in enumerate(self.segments)]

    # -- removal ------------------------------------------------------------

    def delete_records_before(self, offset):
        end = self.log_end_offset
        if offset > end:
            raise OffsetOutOfRangeError(f"offset {offset} is beyond the log end {end}")
        if offset <= self.log_start_offset:
            return 0
        self.log_start_offset = offset
        # Whole segments whose every offset is below the new start go.
        count = bisect_right(self._bases, offset) - 1
        return self._delete_oldest(count)

    def delete_oldest_segments(self, count):
        tier = self.remote_tier
        if tier is not None:
            # Tiered: a segment leaves the disk only once its upload is confirmed.
            count = min(count, tier.uploaded_count(self.segments))
        return self._delete_oldest(count)

    def _delete_oldest(self, count):
        count = max(0, min(count, len(self.segments) - 1))
        for segment in self.segments[:count]:
            self._delete_segment(segment)
        if count:
            self._set_segments(self.segments[count:])
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        return count

    def truncate_fully_and_start_at(self, offset):
        """Drop every segment and continue empty at ``offset`` (a follower
        whose log ends before the leader's log starts)."""
        for segment in self.segments:
            self._delete_segment(segment)
        self._set_segments([self._new_segment(offset, -1)])
        self.log_start_offset = offset
        self._dirty = []
        self._directory_dirty = True
        self._truncations += 1
        self.recovery_point = offset

    def truncate_to(self, offset):
        end = self.log_end_offset
        if offset >= end:
            return
        if offset < self.log_start_offset:
            # Nothing below the target survives: start afresh at it.
            self.truncate_fully_and_start_at(offset)
            return
        keep = max(1, bisect_right(self._bases, offset))
        for segment in self.segments[keep:]:
            self._delete_segment(segment)
        self._set_segments(self.segments[:keep])
        self.segments[-1].truncate_to(offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self._dirty = [s for s in self._dirty if not s.deleted]
        self._directory_dirty = True
        self._truncations += 1
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        if self.on_truncation is not None:
            self.on_truncation(self)

    def _delete_segment(self, segment):
        segment.mark_deleted()
        self._directory_dirty = True
        delay_ms = self.config.file_delete_delay_ms
        if self.reactor is None or delay_ms <= 0:
            self._unlink(segment)
            return
        call = self.reactor.callLater(delay_ms / 1000.0, self._finish_delete, segment)
        self._pending_deletes[segment] = call

    def _finish_delete(self, segment):
        self._pending_deletes.pop(segment, None)
        self._unlink(segment)

    def _unlink(self, segment):
        """Delete a ``*.deleted`` segment's files: its descriptors are closed
        here, the unlinks run in the reactor's thread pool where there is
        one, as Kafka deletes in its scheduler's threads. Unlinking a
        page-cached segment frees its pages in the calling thread (0.4-1.6 ms
        for 8 MiB), a stall in every request of that turn when retention or
        tiered storage's local retention deletes a few segments a second. A
        crash before the unlinks leaves ``*.deleted`` files, which the next
        start removes."""
        in_thread = getattr(self.reactor, "callInThread", None)
        if in_thread is None:
            segment.delete_files()
        else:
            segment.delete_files(lambda paths: in_thread(unlink_files, paths))
