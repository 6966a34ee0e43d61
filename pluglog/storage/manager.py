"""The log manager: every partition log of the broker's log dirs.

``log.dirs`` (JBOD) may list several directories; each has its own
checkpoints and clean-shutdown marker and holds whole partitions. A new
partition goes to the dir with the fewest partitions (Kafka's rule); a
partition found in two dirs stops start-up with one line naming both.

Format (see :mod:`pluglog.storage.filenames`): one ``<topic>-<partition>/``
directory per log, plus two checkpoint files in Kafka's text format::

    0                      format version
    2                      number of entries
    orders 0 1234          topic, partition, offset (one line each)
    orders 1 977

``recovery-point-offset-checkpoint`` records, per log, an offset below which
everything is known to be fsynced; ``log-start-offset-checkpoint`` records
log start offsets moved by DeleteRecords. Both are written atomically
(``.tmp`` + fsync + rename + directory fsync). ``close()`` finally writes the
empty marker ``.pluglog_cleanshutdown``.

Opening a data directory removes the marker first (so a crash from then on is
an unclean stop), then opens every log:

* marker present: no rescan; each log locates its end from the active
  segment's last index entry plus a short scan of the tail;
* marker absent: each log re-scans every segment from its recovery point
  onward (CRC check, torn tail cut, indexes rebuilt);
* in both cases missing index files are rebuilt, corrupt ones are rebuilt
  when first loaded, and leftover ``*.deleted`` / ``*.tmp`` files and deleted
  partition directories are removed.

Threading/reactor contract: synchronous, on the caller's (reactor) thread;
the reactor is only used for ``callLater`` (delayed file deletion).
``prepare_new_logs`` and ``sync_new_logs`` touch files by path only and run
in the broker's pool threads (:mod:`pluglog.storage.batchsync`).
Invariant: at most one SegmentPartitionLog per (topic, partition).
"""

import os
import shutil
import uuid

from twisted.logger import Logger
from zope.interface import implementer

from pluglog.config import TopicConfig
from pluglog.errors import KafkaStorageError
from pluglog.fileutil import fsync_directory
from pluglog.interfaces import (
    IBackgroundFlushStorage,
    ICompactingStorage,
    ILogDirMoves,
    INewLogBatches,
    IReplicatingStorage,
    IScheduledFlushStorage,
    ISlicedFlushStorage,
)
from pluglog.storage.background_flush import CheckpointFlushes
from pluglog.storage.batchsync import NewLogBatchesMixin, close_logs, sync_logs
from pluglog.storage.checkpoints import (  # noqa: F401 (imported from here too)
    CHECKPOINT_VERSION,
    CheckpointError,
    TruncationCheckpoints,
    read_checkpoint,
    write_checkpoint,
)
from pluglog.storage.filenames import (
    CLEAN_SHUTDOWN_FILE,
    DELETED_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    TMP_SUFFIX,
    log_dir_name,
    parse_log_dir_name,
)
from pluglog.storage.log import FSYNC_INTERVAL
from pluglog.storage.logdir_move import LogMovesMixin, parse_future_name, resolve_futures
from pluglog.storage.openfiles import OpenSegments
from pluglog.storage.scheduled_flush import ScheduledFlushes
from pluglog.storage.segment_log import SegmentPartitionLog

_log = Logger()


@implementer(
    ICompactingStorage,
    IReplicatingStorage,
    ILogDirMoves,
    INewLogBatches,
    IScheduledFlushStorage,
    ISlicedFlushStorage,
    IBackgroundFlushStorage,
)
class SegmentLogStorage(
    LogMovesMixin, NewLogBatchesMixin, TruncationCheckpoints, ScheduledFlushes, CheckpointFlushes
):
    """ILogStorage over segment files in one or more log dirs."""

    log_class = SegmentPartitionLog
    #: flush_all syncs each log dir's file system once where it can; False
    #: flushes log by log (an fdatasync each), as before
    batched_flush = True
    #: ... and when at least this many of the dir's logs have unflushed writes
    syncfs_min_logs = 100

    def __init__(
        self,
        data_dir,
        topic_defaults=None,
        reactor=None,
        fsync=FSYNC_INTERVAL,
        max_open_segments=0,
        max_open_files=0,
    ):
        # ``data_dir``: one directory or a sequence of them (``log.dirs``, JBOD).
        dirs = [data_dir] if isinstance(data_dir, (str, os.PathLike)) else list(data_dir)
        self.data_dirs = [os.path.abspath(d) for d in dirs]
        self.data_dir = self.data_dirs[0]
        # Descriptors scale with segments in use, not with all of them:
        # a budget of descriptors (log.max.open.files, storage/openfiles.py).
        self.open_segments = OpenSegments(max_open_files, max_open_segments)
        self.topic_defaults = topic_defaults or TopicConfig()
        self.reactor = reactor
        self.fsync = fsync
        self._logs = {}
        self._offline = {}
        #: (topic, partition) -> the log dir holding it (offline ones too)
        self._dir_of = {}
        #: log dir -> (st_dev, st_ino) when opened: a dir renamed or removed
        #: under the broker no longer matches (see probe_dirs)
        self._dir_ids = {}
        #: failed log dir -> reason; its partitions are offline until restart
        self._failed = {}
        self._pending_deletes = {}
        #: future dirs found at start-up, {key: [paths]} (storage.logdir_move)
        self._futures = {}
        #: moves in progress, {key: LogMove}
        self._moves = {}
        #: (topic, partition) -> the recovery point the checkpoint file holds
        self._checkpointed = {}
        self._truncation_call = None
        #: logs that may become due for a time-based flush (flush_due_logs)
        self._flush_candidates = {}
        #: (topic, partition) -> the log dir chosen for a log prepared in a
        #: thread (plan_new_logs) and not opened yet
        self._planned = {}
        self.closed = False
        self.opened_clean = True
        for directory in self.data_dirs:
            try:
                os.makedirs(directory, exist_ok=True)
                marker = os.path.join(directory, CLEAN_SHUTDOWN_FILE)
                clean = os.path.exists(marker)
                if clean:
                    os.unlink(marker)
                    fsync_directory(directory)
                self.opened_clean = self.opened_clean and clean
                st = os.stat(directory)
                self._dir_ids[directory] = (st.st_dev, st.st_ino)
                self._load_logs(directory, clean)
            except OSError as exc:
                raise KafkaStorageError(f"cannot open data directory {directory}: {exc}") from exc
        try:
            for key, path in resolve_futures(self._futures, set(self._dir_of)).items():
                _log.info("finished moving {path} after a crash", path=path)
                self._open_existing(key, path, os.path.dirname(path), 0, 0, False)
        except OSError as exc:
            raise KafkaStorageError(f"cannot finish a log dir move: {exc}") from exc
        self._sync_recovered()
        self.write_checkpoints()

    def _path(self, name, directory=None):
        return os.path.join(directory or self.data_dir, name)

    def _load_logs(self, directory, clean):
        try:
            recovery_points = read_checkpoint(self._path(RECOVERY_POINT_CHECKPOINT, directory))
            start_offsets = read_checkpoint(self._path(LOG_START_OFFSET_CHECKPOINT, directory))
        except CheckpointError:
            # Without trustworthy recovery points, re-scan everything.
            recovery_points, start_offsets, clean = {}, {}, False
        for name in sorted(os.listdir(directory)):
            path = self._path(name, directory)
            if name.endswith(DELETED_SUFFIX):
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
                continue
            if name.endswith(TMP_SUFFIX) and os.path.isfile(path):
                os.unlink(path)
                continue
            future = parse_future_name(name)
            if future is not None and os.path.isdir(path):
                self._futures.setdefault(future, []).append(path)
                continue
            parsed = parse_log_dir_name(name)
            if parsed is None or not os.path.isdir(path):
                continue
            other = self._dir_of.get(parsed)
            if other is not None:
                # Serving either copy could lose the other's records: the
                # operator decides which one goes.
                raise KafkaStorageError(
                    f"partition {parsed[0]}-{parsed[1]} is in two log dirs, {other} and "
                    f"{directory}: remove the stale copy and restart"
                )
            self._open_existing(
                parsed,
                path,
                directory,
                recovery_points.get(parsed, 0),
                start_offsets.get(parsed, 0),
                clean,
            )

    def _open_existing(self, key, path, directory, recovery_point, log_start_offset, clean):
        self._dir_of[key] = directory
        try:
            self._logs[key] = SegmentPartitionLog(
                path,
                key[0],
                key[1],
                self.topic_defaults,
                self.reactor,
                self.fsync,
                recovery_point=recovery_point,
                log_start_offset=log_start_offset,
                clean=clean,
                open_segments=self.open_segments,
                defer_sync=True,
            )
            self._logs[key].on_truncation = self._truncated
            self._logs[key].on_unflushed = self._log_unflushed
        except (KafkaStorageError, OSError) as exc:
            # One unreadable partition must not stop the broker: it stays
            # offline (open_log refuses it) and the others are served.
            self._offline[key] = str(exc)
            _log.error(
                "partition {topic}-{partition} is offline: {reason}",
                topic=key[0],
                partition=key[1],
                reason=str(exc),
            )

    def _sync_recovered(self):
        """Recovery at open left its syncs here (``defer_sync``): one syncfs
        per log dir (batchsync.sync_logs), else log by log; a log whose
        flush fails is offline, as one that could not be opened."""
        by_dir = {}
        for key, log in self._logs.items():
            if log.has_unflushed():
                by_dir.setdefault(self._dir_of[key], []).append((key, log))
        for directory, entries in by_dir.items():
            logs = [log for _key, log in entries]
            if self.batched_flush and sync_logs(directory, logs, self.syncfs_min_logs):
                continue
            for key, log in entries:
                try:
                    log.flush()
                except (KafkaStorageError, OSError) as exc:
                    del self._logs[key]
                    self._offline[key] = str(exc)
                    _log.error("partition {p} is offline: {reason}", p=key, reason=str(exc))

    def _choose_dir(self):
        """Kafka's rule (LogManager.nextLogDirs): the dir with the fewest
        partitions, the first listed on a tie."""
        live = [d for d in self.data_dirs if d not in self._failed]
        if not live:
            raise KafkaStorageError("every log dir has failed")
        if len(live) == 1:
            # No count to compare: counting is O(partitions) per new log,
            # quadratic over one CreateTopics of 10,000.
            return live[0]
        counts = self._dir_counts(live)
        return min(live, key=lambda d: counts[d])

    def failed_dirs(self):
        """``{log dir: reason}`` for the dirs that failed while serving."""
        return dict(self._failed)

    def probe_dirs(self):
        """Check every live log dir is still the one opened and usable;
        mark those that are not failed. Returns ``{dir: reason}`` of the
        newly failed ones (the broker takes their partitions offline)."""
        newly = {}
        if len(self.data_dirs) == 1:
            return newly  # the only dir: failing it would leave nothing to serve
        for directory in self.data_dirs:
            if directory in self._failed:
                continue
            try:
                st = os.stat(directory)
                if (st.st_dev, st.st_ino) != self._dir_ids.get(directory):
                    raise FileNotFoundError(f"{directory} was replaced or removed")
                # Readable? One directory read, not a listing of every
                # partition dir on each probe.
                with os.scandir(directory) as entries:
                    next(entries, None)
            except OSError as exc:
                newly[directory] = str(exc)
                self.mark_dir_failed(directory, str(exc))
        return newly

    def mark_dir_failed(self, directory, reason):
        """Take ``directory`` out of service: its logs are closed and stay
        offline (open_log refuses them) until the broker restarts."""
        if directory in self._failed:
            return
        self._failed[directory] = reason
        for key in [k for k, d in self._dir_of.items() if d == directory]:
            log = self._logs.pop(key, None)
            self._offline[key] = f"log dir {directory} failed: {reason}"
            if log is not None:
                try:
                    log.close()
                except (OSError, KafkaStorageError):
                    # The dir is gone: nothing left to flush into; let go
                    # of the descriptors all the same.
                    for segment in log.segments:
                        segment.deleted = True  # close without writing indexes
                        segment.close()
                    log.closed = True

    def dir_of(self, topic, partition):
        """The log dir holding the partition, or None."""
        return self._dir_of.get((topic, partition))

    def open_log(self, topic, partition, topic_config=None):
        config = topic_config or self.topic_defaults
        reason = self._offline.get((topic, partition))
        if reason is not None:
            raise KafkaStorageError(f"{topic}-{partition} could not be opened: {reason}")
        log = self._logs.get((topic, partition))
        if log is None:
            directory = self._planned.pop((topic, partition), None)
            if directory is None or directory in self._failed:
                directory = self._choose_dir()
            log = SegmentPartitionLog(
                self._path(log_dir_name(topic, partition), directory),
                topic,
                partition,
                config,
                self.reactor,
                self.fsync,
                open_segments=self.open_segments,
            )
            log.on_truncation = self._truncated
            log.on_unflushed = self._log_unflushed
            self._logs[(topic, partition)] = log
            self._dir_of[(topic, partition)] = directory
        else:
            log.update_config(config)
        return log

    def get_log(self, topic, partition):
        return self._logs.get((topic, partition))

    def offline_logs(self):
        """``{(topic, partition): reason}`` for logs that could not be opened."""
        return dict(self._offline)

    def delete_log(self, topic, partition):
        """Rename the partition directory to ``*.deleted`` and remove it after
        file.delete.delay.ms (at once without a reactor)."""
        self._offline.pop((topic, partition), None)
        self._planned.pop((topic, partition), None)
        self._dir_of.pop((topic, partition), None)
        log = self._logs.pop((topic, partition), None)
        if log is None:
            return
        # Cut the name as Kafka does (LocalLog.logDeleteDirName): a 249-character
        # topic plus the suffix would exceed NAME_MAX (255) and fail the rename.
        suffix = f".{uuid.uuid4().hex}{DELETED_SUFFIX}"
        parent, name = os.path.split(log.directory)
        target = os.path.join(parent, name[: 255 - len(suffix)] + suffix)
        os.replace(log.directory, target)
        self._retire(log, target)
        self.write_checkpoints()

    def _retire(self, log, target):
        """Remove the renamed dir of a log no longer served after
        file.delete.delay.ms (reads in flight may still use its files)."""
        delay_ms = log.config.file_delete_delay_ms
        if self.reactor is None or delay_ms <= 0:
            self._remove(log, target)
        else:
            call = self.reactor.callLater(delay_ms / 1000.0, self._remove, log, target)
            self._pending_deletes[target] = (log, call)

    def _remove(self, log, path):
        self._pending_deletes.pop(path, None)
        for segment in log.segments:
            segment.deleted = True
            segment.close()
        log.closed = True
        shutil.rmtree(path, ignore_errors=True)

    def logs(self):
        return list(self._logs.values())

    def write_checkpoints(self):
        """Write the recovery-point and log-start-offset checkpoints, one
        pair per log dir naming the logs in it (as Kafka does)."""
        for directory in self.data_dirs:
            if directory in self._failed:
                continue
            logs = {k: log for k, log in self._logs.items() if self._dir_of.get(k) == directory}
            try:
                # A recovery point never passes epochs that are not on disk
                # (pluglog.storage.epochs); after flush_all nothing is pending.
                for log in logs.values():
                    sync = getattr(log, "sync_side_files", None)
                    if sync is not None:
                        sync()
                write_checkpoint(
                    self._path(RECOVERY_POINT_CHECKPOINT, directory),
                    {key: log.recovery_point for key, log in logs.items()},
                )
                write_checkpoint(
                    self._path(LOG_START_OFFSET_CHECKPOINT, directory),
                    {key: log.log_start_offset for key, log in logs.items()},
                )
                self._checkpointed.update((key, log.recovery_point) for key, log in logs.items())
            except OSError as exc:
                if len(self.data_dirs) == 1:
                    raise  # the only dir: nothing left to serve from
                self.mark_dir_failed(directory, str(exc))

    def close(self):
        if self.closed:
            return
        # One syncfs per log dir instead of fsyncs per file, one log after
        # another: 73-116 s at 10,000 partitions (storage.batchsync).
        by_dir = {}
        for key, log in self._logs.items():
            by_dir.setdefault(self._dir_of.get(key), []).append(log)
        for directory, logs in by_dir.items():
            batched = self.batched_flush and directory is not None
            if not (batched and close_logs(directory, logs, self.syncfs_min_logs)):
                for log in logs:
                    log.close()
        for path, (log, call) in list(self._pending_deletes.items()):
            if call.active():
                call.cancel()
            self._remove(log, path)
        self.write_checkpoints()
        for directory in self.data_dirs:
            if directory in self._failed:
                continue  # no clean marker: the next start recovers what is left
            with open(self._path(CLEAN_SHUTDOWN_FILE, directory), "wb") as handle:
                os.fsync(handle.fileno())
            fsync_directory(directory)
        self.closed = True
