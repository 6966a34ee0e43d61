"""The checkpoint flush, with its syncs in a thread.

Every ``log.flush.offset.checkpoint.interval.ms`` the broker flushes every
log and checkpoints the recovery points. :meth:`CheckpointFlushes.flush_all`
does it in the calling (reactor) turn: where ``syncfs`` reports errors
(Linux 5.8+) and a log dir has at least ``syncfs_min_logs`` logs to flush,
their writes go out unsynced and the file system is synced once; otherwise
an ``fdatasync`` per log. Either way the loop waits for the disk to take
every dirty page: under a producer at half the latency bench's peak the
checkpoint's ``fdatasync`` calls held it 130-160 ms (the worst
acknowledgement 220-266 ms), and at 10,000 partitions ``flush_all``'s turn
was 616-636 ms (bench/RESULTS.md, session 16). Kafka flushes from its
scheduler threads, never from a request handler.

:meth:`CheckpointFlushes.begin_background_flush` splits it in three:

1. on the reactor, a log per step, each log with anything to flush writes
   it without syncing and hands it over (``capture_flush``: the dirty
   segments, the changed directory, the unflushed count and the log end at
   that moment, and, in a dir synced file by file, the paths to sync);
2. in a pool thread, :meth:`BackgroundFlush.sync`: a log dir with at least
   ``syncfs_min_logs`` logs handed over has its file system synced once
   (one system call, the GIL released throughout; a thread doing many
   small file calls was slower than the loop at 10,000 logs, session 13);
   a dir with fewer has each handed-over file synced by path (an
   ``fdatasync`` per segment, an ``fsync`` per side file and directory, as
   ``flush`` would: ``syncfs`` writes back every program's dirty pages on
   the file system, a cost the broker does not bound);
3. on the reactor, a log per step, :meth:`BackgroundFlush.finish` gives
   each log its mark back (``finish_flush``): the recovery point moves to the captured log
   end, never past it, and not at all if the log was truncated meanwhile;
   what was appended meanwhile stays the next flush's. A dir whose sync
   failed gets its marks back unsynced and the caller runs ``flush_all``,
   which flushes log by log and names the failing file, as before; a log
   whose file went meanwhile (deleted) gets its mark back unsynced.

Durability is unchanged: a recovery point moves only after a sync that
began after everything below it was written. With ``batched_flush`` off
there is no background flush and the broker calls ``flush_all``. The
mixin of :class:`pluglog.storage.manager.SegmentLogStorage` (its
``_logs``, ``_dir_of``, ``_failed``, ``batched_flush``,
``syncfs_min_logs``, ``write_checkpoints``).
"""

from collections import deque

from twisted.logger import Logger

from pluglog.errors import KafkaStorageError
from pluglog.fileutil import syncfs
from pluglog.storage.batchsync import sync_logs, syncfs_applies
from pluglog.storage.log_durability import sync_files

_log = Logger()


class BackgroundFlush:
    """One checkpoint flush: the logs it hands over, and their marks.

    :meth:`capture` and :meth:`finish` return iterators of one log per
    step, for the caller to run a few milliseconds per reactor turn (each
    log's capture and return stand alone; 10,000 of them in one go held the
    loop 50-60 ms each way); :meth:`sync` runs between the two, in a thread.
    """

    def __init__(self, storage, logs, syncfs_dirs=()):
        self.storage = storage
        #: [(key, log, log dir)] with anything to flush when this began
        self._logs = logs
        #: the log dirs synced with one syncfs; the others file by file
        self.syncfs_dirs = frozenset(syncfs_dirs)
        #: ids of the marks whose files went before the sync (set by it)
        self._vanished = set()
        #: {log dir: [(log, FlushMark)]}
        self.captured = {}
        #: dirs where a capture failed (the caller's flush_all names the file)
        self.failed = set()
        #: after :meth:`finish`'s steps: True when nothing is left for flush_all
        self.complete = False
        #: the marks still to give back, once finish began (or abandon)
        self._pending = None

    def __len__(self):
        return sum(map(len, self.captured.values()))

    def capture(self):
        """On the reactor, one log per step: the log writes what it has and
        hands it over (``capture_flush``). A log deleted, closed or flushed
        since this began is skipped."""
        live = self.storage._logs
        for key, log, directory in self._logs:
            if self._pending is not None:
                return  # abandoned
            if live.get(key) is not log or log.closed or not log.has_unflushed():
                continue
            try:
                mark = log.capture_flush(files=directory not in self.syncfs_dirs)
            except (OSError, KafkaStorageError) as exc:
                _log.warn("writing {log} out failed: {exc}", log=log, exc=exc)
                self.failed.add(directory)
                continue
            self.captured.setdefault(directory, []).append((log, mark))
            yield

    def sync(self):
        """Any thread, after :meth:`capture`: sync each captured log dir's
        file system once, or each handed-over file of a dir synced file by
        file. Returns {dir: OSError} for the dirs that failed."""
        failed = {}
        vanished = self._vanished
        for directory, marks in self.captured.items():
            try:
                if directory in self.syncfs_dirs:
                    syncfs(directory)
                    continue
                for _log, mark in marks:
                    try:
                        sync_files(mark.files)
                    except FileNotFoundError:
                        # Deleted since the capture: that log is left as
                        # unsynced (its next flush, if it has one, syncs).
                        vanished.add(id(mark))
            except OSError as exc:
                failed[directory] = exc
        return failed

    def finish(self, failed):
        """On the reactor, after :meth:`sync` returned ``failed`` (or raised:
        pass anything that is not a dict, and every dir counts as failed):
        an iterator giving one log its mark back per step
        (``finish_flush``); then :attr:`complete` says whether the caller
        must run ``flush_all`` for the rest."""
        if self._pending is None:
            if not isinstance(failed, dict):
                failed = dict.fromkeys(self.captured)
            for directory, exc in failed.items():
                _log.warn(
                    "the checkpoint's sync of {dir} failed ({exc}): flushing log by log",
                    dir=directory,
                    exc=exc,
                )
            vanished = self._vanished
            self._pending = deque(
                (log, mark, directory not in failed and id(mark) not in vanished)
                for directory, marks in self.captured.items()
                for log, mark in marks
            )
            self.complete = not failed and not self.failed
        return self._give_back()

    def _give_back(self):
        pending = self._pending
        while pending:
            log, mark, synced = pending.popleft()
            log.finish_flush(mark, synced)
            yield

    def abandon(self):
        """The flush will not finish (a stop): every log not given its mark
        back yet takes back what it handed over, unsynced."""
        if self._pending is None:
            self._pending = deque()
            for marks in self.captured.values():
                self._pending.extend((log, mark, False) for log, mark in marks)
        pending = self._pending
        while pending:
            log, mark, _synced = pending.popleft()
            log.finish_flush(mark, False)


class CheckpointFlushes:
    """The checkpoint's flushes of :class:`~pluglog.storage.manager.SegmentLogStorage`."""

    def begin_background_flush(self):
        """IBackgroundFlushStorage: None where syncs cannot leave the
        reactor (``batched_flush`` off, a log that cannot hand over) or no
        log has anything to flush; else a :class:`BackgroundFlush` of every
        log with something to flush, to :meth:`~BackgroundFlush.capture`.
        Its sync is one ``syncfs`` for a log dir with at least
        ``syncfs_min_logs`` such logs (where syncfs reports errors), else a
        sync of each handed-over file by path: syncfs writes back every
        program's dirty pages on the file system, a cost the broker does
        not bound, while a few fdatasyncs cost only its own data."""
        if not self.batched_flush:
            return None
        logs = list(self._logs.items())
        if not all(hasattr(log, "capture_flush") for _key, log in logs):
            return None
        dir_of = self._dir_of
        failed = self._failed
        pending = [
            (key, log, dir_of[key])
            for key, log in logs
            if dir_of.get(key) is not None and dir_of[key] not in failed and log.has_unflushed()
        ]
        if not pending:
            return None
        counts = {}
        for _key, _log, directory in pending:
            counts[directory] = counts.get(directory, 0) + 1
        syncfs_dirs = {
            d for d, count in counts.items() if syncfs_applies(count, self.syncfs_min_logs)
        }
        return BackgroundFlush(self, pending, syncfs_dirs)

    def flush_all(self):
        """Flush every log, then write the recovery-point checkpoints.

        Where ``syncfs`` reports errors (Linux 5.8+), a log dir's logs are
        written out (index entries, leader-epoch files) and the file system
        is synced once, instead of an fdatasync per log and an fsync per
        changed directory: the same durability (syncfs is documented as
        fsync of every file of the file system, renames included) for one
        system call, where an fdatasync per log held a 10,000-partition
        follower's event loop for 50 s of a catch-up (bench/RESULTS.md,
        session 12). The recovery points move only after the sync returned.
        If it fails, the dir's logs are flushed one by one, so the failing
        file is named as before. Only when at least ``syncfs_min_logs`` logs
        of the dir have something to flush: syncfs also writes back every
        other program's dirty pages on that file system, a cost the broker
        does not bound, while a few fdatasyncs cost only its own data."""
        by_dir = {}
        for key, log in self._logs.items():
            by_dir.setdefault(self._dir_of.get(key), []).append(log)
        for directory, logs in by_dir.items():
            if (
                self.batched_flush
                and directory is not None
                and all(hasattr(log, "write_unsynced") for log in logs)
                and sync_logs(
                    directory, [log for log in logs if log.has_unflushed()], self.syncfs_min_logs
                )
            ):
                continue
            for log in logs:
                log.flush()
        self.write_checkpoints()
