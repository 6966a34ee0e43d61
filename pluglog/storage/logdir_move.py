"""Moving a partition's log to another log dir of the same broker
(AlterReplicaLogDirs, JBOD), crash-safe and off the reactor.

Like Kafka's ReplicaAlterLogDirsThread, the bulk of the copy runs in a
background thread while the partition keeps taking appends:

1. ``<dest>/<topic>-<partition>.<hex>-future`` (Kafka's name for a future
   log) is created, and :func:`sync_files` rounds copy the partition's files
   into it from a thread, each round only what changed since the last: a
   file that only grew (segments, indexes: pluglog's files are append-only)
   gets its new tail, one replaced or truncated is copied again, one gone
   is removed. Every file written is fsynced. Rounds repeat until little is
   left (or ``replica.alter.log.dirs.io.max.bytes.per.second`` paces them);
2. on the reactor, so no append interleaves: the log is flushed, a last
   :func:`sync_files` copies the few bytes appended since (the tail), the
   future dir and its parent are fsynced, the source dir is renamed to
   ``*.deleted`` (it stops being the copy) and
3. the future dir is renamed to ``<dest>/<topic>-<partition>``.

Start-up (:func:`resolve_futures`) then finds exactly one complete copy
whatever moment a crash hit: a future dir next to a live copy is an
unfinished copy and is removed; a future dir without one (a crash between
2 and 3) is complete, since it was fsynced before step 2, and is promoted.
"""

import os
import shutil
import threading
import time
import uuid

from pluglog.errors import KafkaStorageError
from pluglog.fileutil import fsync_directory
from pluglog.storage.filenames import DELETED_SUFFIX, log_dir_name, parse_log_dir_name

FUTURE_SUFFIX = "-future"
_NAME_MAX = 255
#: a grown file gets only its tail when its last bytes up to the old size
#: still match the copy (a truncated-and-rewritten file would differ there)
_WINDOW = 64 * 1024
_CHUNK = 1 << 20


class MoveCancelledError(Exception):
    """The move was given up (the broker stops, the log went away)."""


class LogMove:
    """One partition's move in progress: what has been copied so far."""

    def __init__(self, key, log, source, future, destination, rate=0):
        self.key = key
        #: the log being moved: the move is given up if it stops serving
        self.log = log
        self.source = source
        self.future = future
        self.destination = destination
        #: file name -> (inode, size, mtime) of the source when copied;
        #: changed by the copying thread under ``lock``
        self.copied = {}
        self.lock = threading.Lock()
        #: bytes per second the background rounds may write (0: no limit)
        self.rate = rate
        self.rounds = 0
        self.cancelled = False

    def copied_bytes(self):
        with self.lock:
            return sum(key[1] for key in self.copied.values())


def _stat_key(st):
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _source_files(source):
    """``{name: stat}`` of the regular files of a partition dir."""
    out = {}
    with os.scandir(source) as entries:
        for entry in entries:
            if entry.name.endswith(DELETED_SUFFIX):
                continue
            try:
                if entry.is_file(follow_symlinks=False):
                    out[entry.name] = os.stat(entry.path)
            except FileNotFoundError:
                continue
    return out


def pending_bytes(move):
    """About how many bytes a :func:`sync_files` round would copy now."""
    total = 0
    for name, st in _source_files(move.source).items():
        old = move.copied.get(name)
        if old == _stat_key(st):
            continue
        if old is not None and old[0] == st.st_ino and st.st_size >= old[1]:
            total += st.st_size - old[1]
        else:
            total += st.st_size
    return total


def _same_window(path, target, size):
    width = min(_WINDOW, size)
    if width == 0:
        return True
    with open(path, "rb") as a, open(target, "rb") as b:
        a.seek(size - width)
        b.seek(size - width)
        return a.read(width) == b.read(width)


def _copy_range(path, target, start, end, move, paced):
    """Copy bytes ``[start, end)`` of ``path`` to the same place in
    ``target`` (created or cut to ``start``), then fsync it."""
    mode = "r+b" if start else "wb"
    began = time.monotonic()
    done = 0
    complete = True
    with open(path, "rb") as src, open(target, mode) as dst:
        src.seek(start)
        dst.seek(start)
        dst.truncate(start)
        remaining = end - start
        while remaining > 0:
            if move.cancelled:
                raise MoveCancelledError(move.key)
            chunk = src.read(min(_CHUNK, remaining))
            if not chunk:
                complete = False  # cut meanwhile: the next round looks again
                break
            dst.write(chunk)
            remaining -= len(chunk)
            done += len(chunk)
            if paced and move.rate > 0:
                ahead = done / move.rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
        dst.flush()
        os.fsync(dst.fileno())
    return done, complete


def sync_files(move, paced=True):
    """One round: bring ``move.future`` up to ``move.source`` file by file
    (see the module); returns the bytes written. Safe while the source takes
    appends; run from a thread (``paced``) or, for the last round, on the
    reactor with appends held off (not paced)."""
    written = 0
    files = _source_files(move.source)
    for name, st in sorted(files.items()):
        key = _stat_key(st)
        old = move.copied.get(name)
        if old == key:
            continue
        path = os.path.join(move.source, name)
        target = os.path.join(move.future, name)
        try:
            grown = (
                old is not None
                and old[0] == key[0]
                and key[1] >= old[1]
                and _same_window(path, target, old[1])
            )
            start = old[1] if grown else 0
            done, complete = _copy_range(path, target, start, key[1], move, paced)
            written += done
        except FileNotFoundError:
            # Gone meanwhile (retention, a compaction swap): not copied.
            files.pop(name)
            with move.lock:
                move.copied.pop(name, None)
            _unlink(target)
            continue
        with move.lock:
            # A short copy is remembered as such (no mtime matches -1).
            move.copied[name] = key if complete else (key[0], start + done, -1)
    for name in [n for n in move.copied if n not in files]:
        with move.lock:
            move.copied.pop(name)
        _unlink(os.path.join(move.future, name))
    return written


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def future_name(name):
    """``<topic>-<partition>.<hex>-future``, or None when it would not fit NAME_MAX."""
    future = f"{name}.{uuid.uuid4().hex}{FUTURE_SUFFIX}"
    return future if len(future) <= _NAME_MAX else None


def parse_future_name(name):
    """``(topic, partition)`` of a future dir's name, else None."""
    if not name.endswith(FUTURE_SUFFIX):
        return None
    stem = name[: -len(FUTURE_SUFFIX)]
    base, dot, tag = stem.rpartition(".")
    if not dot or len(tag) != 32:
        return None
    return parse_log_dir_name(base)


def resolve_futures(futures, live):
    """Start-up: ``futures`` is ``{(topic, partition): [future dir paths]}``,
    ``live`` the keys with a live copy. Removes unfinished futures and
    returns ``{key: path}`` of the ones to promote (renamed into place)."""
    promoted = {}
    for key, paths in futures.items():
        keep = None if key in live else max(paths, key=os.path.getmtime)
        for path in paths:
            if path != keep:
                shutil.rmtree(path, ignore_errors=True)
        if keep is not None:
            parent = os.path.dirname(keep)
            target = os.path.join(parent, f"{key[0]}-{key[1]}")
            os.replace(keep, target)
            fsync_directory(parent)
            promoted[key] = target
    return promoted


class LogMovesMixin:
    """Methods of :class:`pluglog.storage.manager.SegmentLogStorage`
    (ILogDirStorage's moves); it keeps ``_logs``, ``_dir_of``, ``_failed``
    and ``_moves``."""

    def move_log(self, topic, partition, destination):
        """Move the partition's log into the log dir ``destination`` all at
        once on the caller's thread (see :meth:`begin_move` for the way
        that leaves appends flowing) and return the log now serving it."""
        move = self.begin_move(topic, partition, destination)
        if move is None:
            return self._logs[(topic, partition)]
        try:
            return self.finish_move(move)
        except BaseException:
            self.abort_move(move)
            raise

    def begin_move(self, topic, partition, destination, rate=0):
        """Start moving the partition's log into the log dir ``destination``
        (storage.logdir_move): its future dir is made; the copy is
        :meth:`copy_step` rounds (any thread) then :meth:`finish_move` (the
        reactor) or :meth:`abort_move`. None when it is there already;
        KafkaStorageError when it cannot move."""
        key = (topic, partition)
        log = self._logs.get(key)
        if log is None:
            raise KafkaStorageError(f"{topic}-{partition} is not an online log here")
        source = self._dir_of[key]
        if destination in self._failed:
            raise KafkaStorageError(f"log dir {destination} has failed")
        if source == destination:
            return None
        name = log_dir_name(topic, partition)
        future_dir = future_name(name)
        if future_dir is None:
            raise KafkaStorageError(f"{name}: the future dir name would be too long to move it")
        future = os.path.join(destination, future_dir)
        try:
            os.mkdir(future)
        except OSError as exc:
            raise KafkaStorageError(f"cannot make {future}: {exc}") from exc
        move = LogMove(key, log, log.directory, future, destination, rate)
        self._moves[key] = move
        return move

    def copy_step(self, move):
        """One background copy round (safe off the reactor); bytes copied."""
        try:
            return sync_files(move)
        except OSError as exc:
            raise KafkaStorageError(f"copying {move.source} to {move.future}: {exc}") from exc

    def move_pending_bytes(self, move):
        """About how much the last, reactor-side round would copy now."""
        return pending_bytes(move)

    def moves(self):
        """``{(topic, partition): LogMove}`` of the moves in progress."""
        return dict(self._moves)

    def abort_move(self, move):
        """Give the move up: its future dir goes, the log stays where it was."""
        move.cancelled = True
        if self._moves.get(move.key) is move:
            del self._moves[move.key]
        shutil.rmtree(move.future, ignore_errors=True)

    def finish_move(self, move):
        """On the reactor: copy what was appended since the last round, swap
        the future dir in and return the log now serving the partition (the
        old one is retired like a deleted log). KafkaStorageError if not."""
        key = move.key
        log = self._logs.get(key)
        if log is not move.log or self._dir_of.get(key) in self._failed:
            raise KafkaStorageError(f"{key[0]}-{key[1]} stopped being served here mid-move")
        if move.destination in self._failed:
            raise KafkaStorageError(f"log dir {move.destination} has failed")
        topic, partition = key
        name = log_dir_name(topic, partition)
        source = self._dir_of[key]
        destination = move.destination
        try:
            log.flush()
            sync_files(move, paced=False)
            fsync_directory(move.future)
            fsync_directory(destination)
        except OSError as exc:
            raise KafkaStorageError(f"copying {name} to {destination} failed: {exc}") from exc
        # The swap: the source stops being the copy before the future
        # becomes it, so a crash leaves one complete copy (see the module).
        suffix = f".{uuid.uuid4().hex}{DELETED_SUFFIX}"
        retired = os.path.join(source, name[: 255 - len(suffix)] + suffix)
        os.replace(log.directory, retired)
        fsync_directory(source)
        target = os.path.join(destination, name)
        os.replace(move.future, target)
        fsync_directory(destination)
        del self._moves[key]
        moved = self.log_class(
            target,
            topic,
            partition,
            log.config,
            self.reactor,
            self.fsync,
            recovery_point=log.recovery_point,
            log_start_offset=log.log_start_offset,
            clean=True,
            open_segments=self.open_segments,
        )
        moved.on_truncation = self._truncated
        moved.on_unflushed = self._log_unflushed
        self._logs[key] = moved
        self._dir_of[key] = destination
        self._retire(log, retired)
        self.write_checkpoints()
        return moved
