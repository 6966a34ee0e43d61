"""The flush scheduler's pass over the logs that can be due.

Under ``--fsync interval`` the broker runs a pass every
``log.flush.scheduler.interval.ms`` (1 s) that flushes each log whose
``flush.ms`` has passed since its last flush. Visiting every log costs the
same whether or not any can be due: 15-60 ms a second of the event loop of
a leader or follower of 10,000 partitions (bench/RESULTS.md, session 14),
with the default flush.ms (never: the checkpoint flushes) on all of them.
Here a log joins the set of candidates when it gets unflushed records after
none, or a new config while it has some (its ``on_unflushed``), and only if
its flush.ms is finite; the pass visits the candidates and drops those
flushed, closed or deleted. The mixin of
:class:`pluglog.storage.manager.SegmentLogStorage` (its ``_logs`` and
``_flush_candidates``); on the reactor thread.
"""

from pluglog.config import INT64_MAX


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
