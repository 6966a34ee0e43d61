"""The LogCleaner service: which compacted log to clean next, where the work runs, the swap.

Every ``log.cleaner.backoff.ms`` (and on :meth:`LogCleaner.run_once`) the
reactor thread looks at each partition whose ``cleanup.policy`` lists
``compact`` and computes, from segment sizes and timestamps only, its
cleanable range (:func:`cleanable_range`). A log is due when its dirty
ratio reaches ``min.cleanable.dirty.ratio``, when its oldest dirty record is
older than ``max.compaction.lag.ms``, or when a tombstone it kept has
passed ``delete.retention.ms`` (so deleted keys do go without new writes).
The dirtiest due logs, at most ``log.cleaner.threads`` at a time and never a
log twice, each get a :class:`~pluglog.storage.cleaner.CleanJob`.

Where the work runs: :func:`pluglog.storage.cleaner.clean` is handed to a
``multiprocessing`` pool (spawned, so no reactor state is forked) of
``log.cleaner.threads`` workers, terminated when the broker stops
(decoding records is CPU work in Python; in a thread it would hold the GIL
against the reactor and raise produce latency), niced by
:data:`WORKER_NICENESS` so the reactor wins the CPU on a busy host. Tests
pass a ``runner`` that
runs the job inline. The job carries paths, never descriptors or objects.

Locking contract, the whole of it: the worker reads only non-active segment
files and writes only ``*.cleaned`` files; every change to a live log (the
swap, the checkpoint) happens back on the reactor thread in
:meth:`LogCleaner._finish`, which first checks that the sources are still
the log's segments (retention, DeleteRecords, truncation or a topic deletion
in the meantime abort the swap and drop the files, see
:func:`pluglog.storage.swap.swap_in`). Appends only touch the active
segment, which a pass never includes; fetches holding a FileRange of a
replaced segment keep reading it, as its files are unlinked only after
``file.delete.delay.ms``.

The first dirty offset of each log lives in ``cleaner-offset-checkpoint`` in
the data directory (Kafka's name and format), written after every swap.

Which logs take which path is declared, never guessed: built-in segment-file
logs (:class:`pluglog.storage.segment_log.ISegmentFilesLog`) are cleaned in the
pool as above; any other log of a compacted topic provides
:class:`pluglog.interfaces.ICompactableLog` (the broker refuses a topic
whose log does not, :mod:`pluglog.broker.capabilities`) and its
``compact(now_ms)`` runs on the reactor thread once per tick.
"""

import os
from multiprocessing import get_context

from twisted.application import service
from twisted.internet import defer, task
from twisted.logger import Logger
from zope.interface import Attribute, Interface, implementer

from pluglog.interfaces import ICompactableLog
from pluglog.storage.cleaner import (  # noqa: F401 - cleanable_range: tests
    clean,
    cleanable_range,
    is_compacted,
    map_capacity,
    plan_clean,
)
from pluglog.storage.manager import CheckpointError, read_checkpoint, write_checkpoint
from pluglog.storage.segment_log import ISegmentFilesLog
from pluglog.storage.swap import SwapAborted, discard_cleaned, swap_in

log = Logger()

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"


class ILogCleaner(Interface):
    """Compacts logs whose cleanup.policy lists ``compact``."""

    stats = Attribute("dict of counters: passes, bytes_read, bytes_written, records_removed")

    def run_once():
        """Start passes for the due logs; Deferred fired when they finished."""


#: niceness of the worker processes: cleaning is background work, and on a
#: busy host the reactor's produce and fetch answers must win the CPU
WORKER_NICENESS = 10


def _background_priority():
    os.nice(WORKER_NICENESS)


def _inline_runner(job):
    return defer.succeed(clean(job))


@implementer(ILogCleaner)
class LogCleaner(service.Service):
    """See the module docstring. ``runner(job) -> Deferred[CleanResult]``
    replaces the process pool (tests)."""

    name = "log-cleaner"

    def __init__(self, broker, runner=None):
        self.broker = broker
        self.reactor = broker.reactor
        self.runner = runner
        self._executor = None
        self._pool_size = 0
        self._timer = None
        self._in_progress = set()
        self._horizons = {}  # (topic, partition) -> earliest tombstone expiry
        self._cannot_compact = set()  # logged once each
        self.stats = {"passes": 0, "bytes_read": 0, "bytes_written": 0, "records_removed": 0}
        self.last_results = []
        self._checkpoint_path = os.path.join(broker.config.data_dir, CLEANER_CHECKPOINT)
        try:
            self.first_dirty = read_checkpoint(self._checkpoint_path)
        except CheckpointError:
            self.first_dirty = {}

    # -- scheduling -----------------------------------------------------------

    def startService(self):
        super().startService()
        config = self.broker.config
        if self.runner is None:
            self.runner = self._run_in_pool
        self._timer = task.LoopingCall(self._tick)
        self._timer.clock = self.reactor
        self._timer.start(max(config.log_cleaner_backoff_ms, 10) / 1000.0, now=False)

    def stopService(self):
        if self._timer is not None and self._timer.running:
            self._timer.stop()
        if self._executor is not None:
            # A pass can take minutes; stopping the broker must not wait for
            # it. Its .cleaned files are removed when the log is next opened.
            self._executor.terminate()
            self._executor = None
        return super().stopService()

    def _tick(self):
        if self.runner is None or self.broker.config.log_cleaner_threads < 1:
            return
        interval = max(self.broker.config.log_cleaner_backoff_ms, 10) / 1000.0
        if self._timer.interval != interval:
            self._timer.interval = interval  # log.cleaner.backoff.ms changed
        d = self.run_once()
        d.addErrback(lambda f: log.failure("log cleaner pass failed", f))

    def _pool(self):
        """The worker pool, resized when log.cleaner.threads changed (a
        dynamic config); running passes finish in the old pool."""
        threads = max(1, self.broker.config.log_cleaner_threads)
        if self._executor is None or self._pool_size != threads:
            if self._executor is not None:
                self._executor.close()  # its workers exit after their pass
            self._executor = get_context("spawn").Pool(threads, _background_priority)
            self._pool_size = threads
        return self._executor

    def _run_in_pool(self, job):
        d = defer.Deferred()
        # The callbacks run on the pool's result thread: hop to the reactor.
        self._pool().apply_async(
            clean,
            (job,),
            callback=lambda result: self.reactor.callFromThread(d.callback, result),
            error_callback=lambda error: self.reactor.callFromThread(d.errback, error),
        )
        return d

    def due_logs(self):
        """``[(ratio, partition, job)]`` of logs to clean now, dirtiest first."""
        now = self.broker.now_ms()
        config = self.broker.config
        due = []
        for key, part in list(self.broker.partitions.items()):
            plog = part.log
            if key in self._in_progress or not ISegmentFilesLog.providedBy(plog):
                continue
            if not is_compacted(part.config) or plog.closed:
                continue
            first_unstable, aborted = part.transactions_for_cleaning()
            found = plan_clean(
                plog,
                part.config,
                self.first_dirty.get(key, 0),
                now,
                map_capacity(config.log_cleaner_dedupe_buffer_size, config.log_cleaner_threads),
                config.log_cleaner_io_max_bytes_per_second,
                first_unstable,
                aborted,
            )
            if found is None:
                continue
            job, ratio, max_lag_due = found
            horizon = self._horizons.get(key)
            tombstones_due = horizon is not None and now >= horizon
            has_dirty = job.segments[-1].next_offset > job.first_dirty_offset
            if not (
                (has_dirty and (ratio >= part.config.min_cleanable_dirty_ratio or max_lag_due))
                or tombstones_due
            ):
                continue
            due.append((ratio, key, job))
        due.sort(key=lambda item: -item[0])
        return due

    def run_once(self):
        """Clean the due logs (up to log.cleaner.threads at once)."""
        if not self.broker.config.log_cleaner_enable:
            return defer.succeed([])
        slots = max(1, self.broker.config.log_cleaner_threads) - len(self._in_progress)
        try:
            self._compact_in_place()
        except Exception:
            log.failure("in-place compaction failed")
        started = []
        for _ratio, key, job in self.due_logs()[: max(0, slots)]:
            self._in_progress.add(key)
            d = defer.maybeDeferred(self.runner, job)
            d.addCallback(self._finish, key, job.directory)
            d.addBoth(self._done, key)
            started.append(d)
        return defer.gatherResults(started, consumeErrors=True)

    def _compact_in_place(self):
        """One ``compact()`` pass of each compacted log that compacts itself."""
        now = self.broker.now_ms()
        for part in list(self.broker.partitions.values()):
            plog = part.log
            if ISegmentFilesLog.providedBy(plog) or not is_compacted(part.config) or plog.closed:
                continue
            if not ICompactableLog.providedBy(plog):
                # Made compacted after it was opened (AlterConfigs elsewhere): say so.
                if (part.topic, part.index) not in self._cannot_compact:
                    self._cannot_compact.add((part.topic, part.index))
                    log.error(
                        "{topic}-{partition} is compacted but its log ({cls}) does not "
                        "provide ICompactableLog: it is not compacted",
                        topic=part.topic,
                        partition=part.index,
                        cls=type(plog).__name__,
                    )
                continue
            removed = plog.compact(now)
            self.stats["passes"] += 1
            self.stats["records_removed"] += removed
            if removed:
                log.info(
                    "compacted {topic}-{partition}: {removed} record(s) removed",
                    topic=part.topic,
                    partition=part.index,
                    removed=removed,
                )

    def _done(self, result, key):
        self._in_progress.discard(key)
        return result

    # -- reactor side of a pass ---------------------------------------------

    def _finish(self, result, key, directory):
        """Swap the cleaned groups in (reactor thread) and move the checkpoint."""
        part = self.broker.partitions.get(key)
        plog = None if part is None else part.log
        horizon = None
        swapped = 0
        for group in result.groups:
            if plog is None or plog.closed:
                discard_cleaned(directory, group.base_offset)
                continue
            try:
                segment = swap_in(plog, group)
                swapped += 1
            except SwapAborted as exc:
                log.info("{exc}; the pass is dropped", exc=exc)
                plog = None
                continue
            expiry = group.tombstone_horizon_ms
            if group.dirty:
                # delete.retention.ms counts from when the cleaned segment
                # became visible, not from when a (possibly long) pass began.
                now = self.broker.now_ms()
                os.utime(segment.log_path, ns=(now * 1_000_000, now * 1_000_000))
                if expiry is not None:
                    expiry = now + part.config.delete_retention_ms
            if expiry is not None:
                horizon = expiry if horizon is None else min(horizon, expiry)
        if swapped and part is not None:
            # The same offsets in other batches: what a session remembered
            # of a read (pluglog.server.handlers.fetch) no longer holds.
            part.log_rewritten()
        if plog is not None:
            plog._directory_dirty = True
            self.first_dirty[key] = result.end_offset
            self._write_checkpoint()
            if horizon is None:
                self._horizons.pop(key, None)
            else:
                self._horizons[key] = horizon
        self.stats["passes"] += 1
        self.stats["bytes_read"] += result.bytes_read
        self.stats["bytes_written"] += result.bytes_written
        self.stats["records_removed"] += result.records_removed
        self.last_results = (self.last_results + [result])[-16:]
        log.info(
            "cleaned {topic}-{partition} up to offset {end}: {read} bytes read, {written} "
            "written, {removed} record(s) removed, {groups} segment(s) in {secs:.3f} s",
            topic=result.topic,
            partition=result.partition,
            end=result.end_offset,
            read=result.bytes_read,
            written=result.bytes_written,
            removed=result.records_removed,
            groups=swapped,
            secs=result.seconds,
        )
        return result

    def _write_checkpoint(self):
        live = {k: v for k, v in self.first_dirty.items() if k in self.broker.partitions}
        self.first_dirty = live
        write_checkpoint(self._checkpoint_path, live)


def make_log_cleaner(broker):
    """The built-in plugin's service (``log.cleaner.enable``)."""
    broker.cleaner = LogCleaner(broker)
    return broker.cleaner
