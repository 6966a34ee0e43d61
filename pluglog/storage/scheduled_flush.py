"""The flush scheduler's pass over the logs that can be due, and the
checkpoint flush's preparation over several reactor turns.

Under ``--fsync interval`` the broker runs a pass every
``log.flush.scheduler.interval.ms`` (1 s) that flushes each log whose
``flush.ms`` has passed since its last flush. Visiting every log costs the
same whether or not any can be due: 15-60 ms a second of the event loop of
a leader or follower of 10,000 partitions (bench/RESULTS.md, session 14),
with the default flush.ms (never: the checkpoint flushes) on all of them.
Here a log joins the set of candidates when it gets unflushed records after
none, or a new config while it has some (its ``on_unflushed``), and only if
its flush.ms is finite; the pass visits the candidates and drops those
flushed, closed or deleted.

The checkpoint's ``flush_all`` writes every log's pending index entries and
leader-epoch file, then syncs each log dir once and moves the recovery
points, all in one turn: after a leadership change at 10,000 partitions
the 10,000 epoch files held a follower's event loop for 3.6-13.6 s. Doing
the writes in a thread was slower (each system call trades the GIL with
the busy loop: session 13). :meth:`ScheduledFlushes.flush_preparation`
gives the broker those writes one log per step, done without syncs a few
milliseconds per turn before ``flush_all``; they are what ``flush_all``
would write first anyway (``write_unsynced``), always of the log's current
state, so whatever runs in between (appends, truncations, whose epoch files
are written and synced at once, flushes, deletions) leaves nothing stale:
``flush_all`` writes what changed since and syncs it all before any
recovery point moves, and a written but unsynced epoch file is synced
before a recovery point is checkpointed without a flush (the log's
``sync_side_files``).

The mixin of :class:`pluglog.storage.manager.SegmentLogStorage` (its
``_logs``, ``closed`` and ``_flush_candidates``); on the reactor thread.
"""

from twisted.logger import Logger

from pluglog.config import INT64_MAX
from pluglog.errors import KafkaStorageError

_log = Logger()


class ScheduledFlushes:
    """IScheduledFlushStorage for the segment storage."""

    def maybe_flush_all(self, now_ms):
        """Run each log's time-based flush, visiting every log."""
        flushed = [log.maybe_flush(now_ms) for log in self._logs.values()]
        return sum(flushed)

    def _log_unflushed(self, log):
        """A log's ``on_unflushed``: it has unflushed records. Only a finite
        flush.ms (not the default) can make it due before the checkpoint."""
        if log.config.flush_ms < INT64_MAX:
            self._flush_candidates[log] = None

    def flush_due_logs(self, now_ms):
        """IScheduledFlushStorage, the flush scheduler's pass (once a
        second): only the logs that registered unflushed records under a
        finite flush.ms, not every log. Walking all 10,000 partitions of a
        follower or leader cost 15-60 ms a second of its event loop
        (bench/RESULTS.md, session 14). A log leaves the set once flushed,
        closed or deleted."""
        candidates = self._flush_candidates
        if not candidates:
            return 0
        flushed = 0
        for log in list(candidates):
            if log.closed or self._logs.get((log.topic, log.partition)) is not log:
                del candidates[log]
            elif log.maybe_flush(now_ms):
                flushed += 1
                del candidates[log]
            elif not log._unflushed_records:
                del candidates[log]  # flushed by the checkpoint or an append
        return flushed

    def flush_preparation(self, min_logs):
        """ISlicedFlushStorage: None when fewer than ``min_logs`` logs have
        something to flush (``flush_all`` alone is short then), else an
        iterator writing one such log's index entries and epoch file per
        step (``write_unsynced``)."""
        logs = [(key, log) for key, log in self._logs.items() if log.has_unflushed()]
        if len(logs) < min_logs:
            return None
        return self._prepare_flush(logs)

    def _prepare_flush(self, logs):
        live = self._logs
        for key, log in logs:
            if self.closed:
                return
            if live.get(key) is not log or log.closed:
                continue  # deleted, moved or offline meanwhile
            try:
                log.write_unsynced()
            except (OSError, KafkaStorageError) as exc:
                # flush_all meets it again, names the file and fails the dir.
                _log.warn("preparing the flush of {log} failed: {exc}", log=log, exc=exc)
            yield
