"""The broker's periodic checkpoint, its file writes spread over reactor turns.

Every ``log.flush.offset.checkpoint.interval.ms`` the storage's logs are
flushed (each log dir synced once, then the recovery points move and the
checkpoint files are written), the high watermarks are checkpointed and
each partition's producer state is snapshotted. At 10,000 partitions that
was one turn of several seconds (the 10,000 leader-epoch files after a
leadership change, 10,000 producer snapshots: 9.3 s of a follower's event
loop, bench/RESULTS.md, session 14), during which nothing was served or
replicated. Writing those files from a thread was slower still: each system
call trades the GIL with the busy loop (session 13). Here, when at least
:data:`SLICED_MIN_LOGS` logs have something to flush or partitions a
snapshot to write, the work runs a few milliseconds per turn
(:data:`SLICE_SECONDS`, then ``callLater(0)``), in three parts:

1. the storage's flush preparation
   (:class:`~pluglog.interfaces.ISlicedFlushStorage`), one log per step:
   its index entries and leader-epoch file written without syncs;
2. the flush. Where the storage can sync in a thread
   (:class:`~pluglog.interfaces.IBackgroundFlushStorage`,
   :mod:`pluglog.storage.background_flush`): a log per step, every log
   with something to flush writes what changed and hands it over, and each
   partition's producer state is taken
   (:meth:`~pluglog.broker.partition_txns.PartitionTransactions.capture_snapshot`)
   before the sync begins; a pool thread syncs what was handed over (each
   log dir's file system, or its files one by one where the dir has fewer
   than ``syncfs_min_logs`` logs to flush) while the loop serves; then,
   back on the loop, a log per step, the
   recovery points move to the log ends handed over, and the checkpoint
   files are written. A ``fdatasync`` of a busy log in the loop's turn
   held every client for 130 ms or more, and ``flush_all`` at 10,000
   partitions 616-636 ms (bench/RESULTS.md, session 16). Otherwise, in one turn
   as before: ``flush_all`` (which writes what changed since and syncs
   every log dir before it moves a recovery point) and the producer states
   taken as of the log ends just synced. Either way no snapshot names
   unsynced data; then the log-dir probe and the HW checkpoint;
3. the snapshots written, one per step, each skipped if its partition was
   truncated, reset, deleted or taken offline since; the older snapshots
   are unlinked in a thread at the end.

Durability is unchanged: nothing moves a recovery point before the sync
that covers it. One checkpoint at a time (one due while another runs is
skipped); :meth:`Checkpointer.stop` abandons a running one before a clean
stop, which flushes and snapshots everything itself. With few logs (tests,
small brokers) the steps are not spread over turns: the hand-over runs in
the calling turn, the sync in the thread, and the rest in the turn the sync
returns to. With a reactor without a thread pool (``getThreadPool``), all of
it runs in the calling turn, as before.
"""

import time

from twisted.internet import defer
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure

from pluglog.broker.log_dirs import check_log_dirs
from pluglog.broker.partition_txns import unlink_all
from pluglog.interfaces import IBackgroundFlushStorage, ISlicedFlushStorage

log = Logger()

#: at least this many logs to flush (or snapshots to write) for the
#: checkpoint to spread its work over turns
SLICED_MIN_LOGS = 100
#: the work done per reactor turn when spread
SLICE_SECONDS = 0.005


class Checkpointer:
    """Runs the broker's checkpoints, one at a time."""

    def __init__(self, broker):
        self.broker = broker
        #: the running checkpoint's steps, or None
        self._steps = None
        self._sliced = False
        self._call = None
        #: the background flush whose sync is in flight, or None
        self._background = None

    @property
    def running(self):
        return self._steps is not None

    def checkpoint(self):
        """Start a checkpoint (skipped while one runs); it may finish in a
        later reactor turn."""
        if self._steps is not None:
            return
        broker = self.broker
        storage = broker.storage
        can_slice = hasattr(broker.reactor, "callLater")
        prepare = None
        if can_slice and ISlicedFlushStorage.providedBy(storage):
            prepare = storage.flush_preparation(SLICED_MIN_LOGS)
        self._sliced = prepare is not None
        self._steps = self._run(prepare, can_slice)
        self._step()

    def _run(self, prepare, can_slice):
        broker = self.broker
        if prepare is not None:
            yield from prepare
            if broker.storage.closed:
                return  # stopped meanwhile: the close flushed everything
        background = self._begin_background()
        if background is not None:
            self._background = background
            yield from background.capture()
            # Producer states before the sync begins: no snapshot names
            # data it does not cover.
            captured = self._capture_snapshots()
            outcome = [{}]
            if background.captured:
                reactor = broker.reactor
                pending = deferToThreadPool(reactor, reactor.getThreadPool(), background.sync)
                outcome = []
                pending.addBoth(outcome.append)
                yield pending
                if isinstance(outcome[0], Failure):
                    log.failure("checkpoint sync failed", outcome[0])
            yield from background.finish(outcome[0])
            self._background = None
        try:
            if background is None or not background.complete:
                broker.storage.flush_all()
            else:
                broker.storage.write_checkpoints()
        finally:
            check_log_dirs(broker)  # a checkpoint write may have failed a dir
        broker.replicas.checkpoint_hw()
        if background is None:
            captured = self._capture_snapshots()
        if can_slice and len(captured) >= SLICED_MIN_LOGS:
            self._sliced = True
        # Not fsynced (pluglog.broker.partition_txns): two fsyncs per active
        # partition each checkpoint cost a minute at 10,000. The older
        # snapshots are unlinked in a thread (10,000 unlinks held the loop
        # for 8 s, session 12).
        threads = hasattr(broker.reactor, "callInThread")
        retired = []
        for part, snap in captured:
            try:
                part.write_snapshot(snap, sync=False, retired=retired)
            except OSError as exc:
                log.warn("producer snapshot of {p} failed: {e}", p=part.log, e=exc)
            yield
        if retired:
            if threads:
                broker.reactor.callInThread(unlink_all, retired)
            else:
                unlink_all(retired)

    def _begin_background(self):
        """The storage's background flush (its sync in a pool thread), or
        None: the storage or the reactor cannot (``flush_all`` then)."""
        broker = self.broker
        storage = broker.storage
        if not (
            IBackgroundFlushStorage.providedBy(storage)
            and hasattr(broker.reactor, "getThreadPool")
        ):
            return None
        return storage.begin_background_flush()

    def _capture_snapshots(self):
        captured = []
        for part in list(self.broker.partitions.values()):
            snap = part.capture_snapshot()
            if snap is not None:
                captured.append((part, snap))
        return captured

    def _resume(self, result):
        self._step()
        return result

    def _step(self):
        self._call = None
        steps = self._steps
        if steps is None:
            return
        deadline = time.perf_counter() + SLICE_SECONDS if self._sliced else None
        try:
            for step in steps:
                if isinstance(step, defer.Deferred) and not step.called:
                    step.addBoth(self._resume)  # the generator resumes then
                    return
                if deadline is not None and time.perf_counter() >= deadline:
                    self._call = self.broker.reactor.callLater(0, self._step)
                    return
                if deadline is None and self._sliced:
                    deadline = time.perf_counter() + SLICE_SECONDS
        except Exception:
            self._steps = None
            log.failure("checkpoint failed")
            return
        self._steps = None

    def stop(self):
        """Abandon a running checkpoint (a clean stop flushes everything)."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        if self._background is not None:
            # The sync in flight is left to finish; its logs take back
            # what they handed over, and the stop's close flushes it.
            self._background.abandon()
            self._background = None
        if self._steps is not None:
            self._steps.close()
            self._steps = None
