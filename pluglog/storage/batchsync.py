"""Batched durability of many logs at once: new partitions and a clean stop.

Three places made one log at a time durable, with an fsync per file, on
the broker's only event loop: creating a partition (its
``partition.metadata``, an atomic write: the file, then its directory),
closing the storage (per segment an fdatasync of the log and an fsync of
each index, per log its leader-epoch file and directory) and recovering
after an unclean stop (per log an fdatasync of each re-scanned segment and
an atomic write of a repaired leader-epoch file). At 10,000 partitions that
was 22-60 s of a CreateTopics during which no other client was served,
73-116 s of a clean stop and most of a 67 s restart after SIGKILL
(bench/RESULTS.md, issue 24).

Here the files are written first, without syncs, and then each log dir's
file system is synced once with ``syncfs`` (:func:`pluglog.fileutil.syncfs`:
Linux 5.8+, documented as the guarantees of fsync on every file of the file
system, renames included, and reporting write-back errors). Where syncfs is
missing or fails, or fewer than ``min_logs`` logs share the dir (syncfs also
writes back other programs' dirty pages, a cost the broker does not bound),
the files are synced one by one as before, so an error names the file.

:func:`prepare_new_logs` (creating a new log's files, which opening it
would otherwise do on the reactor) and :func:`sync_new_logs` only touch
files by path and are safe in a pool thread (the broker runs them there);
:func:`close_logs` runs on the reactor at stop, when nothing else is served.
"""

import os
import shutil
import stat
import uuid

from twisted.logger import Logger

from pluglog.errors import KafkaStorageError
from pluglog.fileutil import atomic_write, fsync_directory, fsync_path, syncfs, syncfs_available
from pluglog.storage.filenames import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    log_dir_name,
    segment_path,
)
from pluglog.topicids import FILE_NAME as PARTITION_METADATA

_log = Logger()

#: the files of a new partition that a sync must cover (the segment files
#: are empty; their names are made durable by the directory's sync)
NEW_LOG_FILES = (PARTITION_METADATA,)


def _sync_one_by_one(directories):
    """fsync each new log's files and directory, then each parent once."""
    parents = set()
    for directory in directories:
        try:
            for name in NEW_LOG_FILES:
                path = os.path.join(directory, name)
                if os.path.exists(path):
                    fsync_path(path)
            fsync_directory(directory)
        except FileNotFoundError:
            continue  # deleted meanwhile: nothing left to make durable
        except OSError as exc:
            raise KafkaStorageError(f"fsync of new log {directory} failed: {exc}") from exc
        parents.add(os.path.dirname(directory))
    for parent in sorted(parents):
        try:
            fsync_directory(parent)
        except OSError as exc:
            raise KafkaStorageError(f"fsync of log dir {parent} failed: {exc}") from exc


def prepare_new_logs(directories, files):
    """Create the directories of new logs with their first segment's empty
    files and ``files`` ({name: bytes}, e.g. ``partition.metadata``), all
    without syncs: opening such a log then finds its files instead of
    creating them. A directory that already exists is left alone (it may
    hold an earlier log; opening it decides). Returns the directories made.
    Raises OSError. Thread-safe
    (paths only); a crash part-way leaves logs that open as new ones
    (missing files are created or rebuilt, ``*.tmp`` ones removed)."""
    made = []
    for directory in directories:
        try:
            os.mkdir(directory)
        except FileExistsError:
            continue
        made.append(directory)
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            # mknod makes the empty file without a descriptor: the open-file
            # budget (storage.openfiles) counts only the segments' own.
            os.mknod(segment_path(directory, 0, suffix), 0o644 | stat.S_IFREG)
        for name, data in files.items():
            atomic_write(os.path.join(directory, name), data, sync=False)
    return made


def discard_new_logs(directories):
    """Remove directories :func:`prepare_new_logs` made for a topic deleted
    before they were opened: renamed to ``*.deleted`` first (which the next
    start removes, should a crash interrupt), then removed. Thread-safe."""
    for directory in directories:
        target = f"{directory}.{uuid.uuid4().hex}{DELETED_SUFFIX}"
        try:
            os.replace(directory, target)
        except FileNotFoundError:
            continue
        shutil.rmtree(target, ignore_errors=True)


def sync_new_logs(directories, min_logs, use_syncfs=True):
    """Make new logs' directories (and the files written in them) durable.

    ``directories``: the new logs' paths. Those of a log dir with at least
    ``min_logs`` of them get one syncfs of that dir; the rest, and every
    one whose syncfs failed, an fsync per file. Raises KafkaStorageError
    naming what failed. Thread-safe (paths only)."""
    by_parent = {}
    for directory in directories:
        by_parent.setdefault(os.path.dirname(directory), []).append(directory)
    rest = []
    for parent, dirs in sorted(by_parent.items()):
        if syncfs_applies(len(dirs), min_logs, use_syncfs):
            try:
                syncfs(parent)
                continue
            except OSError as exc:
                _log.warn(
                    "syncfs of {dir} failed ({exc}): syncing the new logs one by one",
                    dir=parent,
                    exc=exc,
                )
        rest.extend(dirs)
    _sync_one_by_one(rest)


def _batched(directory, logs, write, mark, what):
    """Write each log's unsynced part (``write(log)``), sync ``directory``'s
    file system once, then mark each log synced (``mark(log)``). False, with
    nothing marked, when the write or the sync failed: the caller then goes
    log by log, with an fsync per file, so an error names the file."""
    try:
        for log in logs:
            write(log)
        syncfs(directory)
    except (OSError, KafkaStorageError) as exc:
        _log.warn(
            "syncfs of {dir} failed ({exc}): {what} log by log", dir=directory, exc=exc, what=what
        )
        return False
    for log in logs:
        mark(log)
    return True


def syncfs_applies(count, min_logs, use_syncfs=True):
    """Whether ``count`` logs of one log dir are synced with one syncfs
    (where it reports errors, and at least ``min_logs`` of them: syncfs
    also writes back every other program's dirty pages on the file system,
    a cost the broker does not bound), not file by file."""
    return use_syncfs and syncfs_available() and count >= min_logs


def sync_logs(directory, logs, min_logs, use_syncfs=True):
    """Flush ``logs`` (all of one log dir, each with something to flush)
    with one syncfs: each writes what its flush would sync, the dir is
    synced, then each is marked synced (its recovery point moves). False
    (nothing marked) when the batch does not apply or its sync failed: the
    caller flushes log by log."""
    if not syncfs_applies(len(logs), min_logs, use_syncfs):
        return False
    return _batched(
        directory,
        logs,
        lambda log: log.write_unsynced(),
        lambda log: log.synced_by_caller(),
        "flushing",
    )


def close_logs(directory, logs, min_logs, use_syncfs=True):
    """Close ``logs`` (all of one log dir) durably; True when done batched.

    Batched: every log writes what its close would sync (segment data and
    index entries, leader-epoch files) without syncing, the dir's file
    system is synced once, and only then are the logs marked synced (their
    recovery points move) and their descriptors closed, with nothing left
    to write. False (nothing closed) when the batch does not apply or its
    sync failed: the caller closes log by log, with an fsync per file."""
    if not syncfs_applies(len(logs), min_logs, use_syncfs) or not all(
        hasattr(log, "write_for_close") for log in logs
    ):
        return False
    return _batched(
        directory,
        logs,
        lambda log: log.write_for_close(),
        lambda log: log.close_synced(),
        "closing",
    )


class NewLogBatchesMixin:
    """INewLogBatches for :class:`pluglog.storage.manager.SegmentLogStorage`
    (its ``data_dirs``, ``_failed``, ``_logs``, ``_offline``, ``_dir_of``,
    ``_planned``, ``syncfs_min_logs``)."""

    def _dir_counts(self, live):
        counts = dict.fromkeys(live, 0)
        for directory in [*self._dir_of.values(), *self._planned.values()]:
            if directory in counts:
                counts[directory] += 1
        return counts

    def plan_new_logs(self, keys):
        """Choose the log dirs of new logs ``keys`` ((topic, partition)s not
        open yet), as open_log will use them; returns their directories for
        :meth:`prepare_new_logs`."""
        live = [d for d in self.data_dirs if d not in self._failed]
        counts = self._dir_counts(live)
        paths = []
        for key in keys:
            if key in self._logs or key in self._offline:
                continue
            directory = self._planned.get(key)
            if directory is None and live:
                directory = min(live, key=lambda d: counts[d])
                counts[directory] += 1
                self._planned[key] = directory
            if directory is not None:
                paths.append(os.path.join(directory, log_dir_name(*key)))
        return paths

    def prepare_new_logs(self, directories, files):
        """Any thread: :func:`prepare_new_logs`."""
        return prepare_new_logs(directories, files)

    def discard_new_logs(self, directories):
        """Any thread: :func:`discard_new_logs`."""
        discard_new_logs(directories)

    def sync_new_logs(self, directories):
        """Any thread: :func:`sync_new_logs` (one syncfs per dir of at least
        ``syncfs_min_logs`` new logs)."""
        sync_new_logs(directories, self.syncfs_min_logs, use_syncfs=self.batched_flush)
