"""A partition log's durability: flushes, the batched and background flushes, close.

The mixin of :class:`pluglog.storage.log.BasePartitionLog` (its segments,
``_dirty`` segments, ``_directory_dirty``, ``_unflushed_records``,
``_truncations`` and ``recovery_point``), on the reactor thread. A flush
syncs what was written and moves the recovery point to the log end; the
storage can also batch many logs' flushes into one file-system sync, in the
same turn (``write_unsynced`` + ``synced_by_caller``) or with the sync in
a thread (``capture_flush`` + ``finish_flush``,
:mod:`pluglog.storage.background_flush`: the thread syncs the file system,
or the files the capture names): then the recovery point moves only to the
log end at the capture, and only if no truncation happened since.
"""

from typing import Any, NamedTuple

from pluglog.fileutil import fsync_path

FSYNC_NEVER = "never"
FSYNC_INTERVAL = "interval"
FSYNC_ALWAYS = "always"


class FlushMark(NamedTuple):
    """What :meth:`BasePartitionLog.capture_flush` handed to a background sync."""

    truncations: int
    end: int  # the log end offset when captured
    segments: list  # (segment, size when captured)
    directory: bool  # the directory had changed
    records: int  # unflushed records
    side_files: Any  # the subclass's token (leader-epoch file saves)
    #: what the sync must cover if it syncs file by file, not the file
    #: system: ``(path, data_only)`` (fdatasync, else fsync), in order
    files: tuple = ()


class LogDurability:
    """Flush, batched flush and close of a partition log (mixin)."""

    #: what :meth:`capture_flush` handed to a background sync still in flight
    _handed_over: Any = None

    def maybe_flush(self, now_ms):
        """Flush if the ``interval`` policy's flush.ms has passed (broker timer)."""
        if self.fsync != FSYNC_INTERVAL or not self._unflushed_records:
            return False
        if self._last_flush_ms is not None and now_ms - self._last_flush_ms < self.config.flush_ms:
            return False
        self.flush()
        self._last_flush_ms = now_ms
        return True

    def flush(self):
        """fsync what was written and move the recovery point to the log end."""
        self._write_out(sync=True)
        self._flushed()

    def has_unflushed(self):
        """Anything for :meth:`flush` to sync (written segments, a changed
        directory or side file)?"""
        return bool(self._dirty) or self._directory_dirty or self._side_files_unsaved()

    def _side_files_unsaved(self):
        return False

    def write_unsynced(self):
        """The first half of a batched flush (the storage's ``flush_all``):
        everything :meth:`flush` writes, without its syncs. The caller then
        syncs the whole file system once and calls :meth:`synced_by_caller`;
        nothing may be appended in between (both run in one reactor turn)."""
        self._write_out(sync=False)

    def synced_by_caller(self):
        """The second half: the caller's file-system sync covered it all."""
        for segment in self._dirty:
            segment.mark_synced()
        self._side_files_synced()
        self._flushed()

    def _side_files_synced(self):
        pass

    def capture_flush(self, files=False):
        """A background flush's first step (:mod:`pluglog.storage.background_flush`),
        on the reactor: write what :meth:`flush` syncs, without syncing, and
        hand it over: the log forgets it (its dirty segments, changed
        directory and unflushed count), so what changes from now on is the
        next flush's. The caller then syncs the file system, or with
        ``files`` the mark's ``files`` (any thread, :func:`sync_files`), and
        gives the returned mark back to :meth:`finish_flush`."""
        self._write_out(sync=False)
        mark = FlushMark(
            self._truncations,
            self.log_end_offset,
            [(segment, segment.size) for segment in self._dirty],
            self._directory_dirty,
            self._unflushed_records,
            self._side_files_token(),
            self._sync_targets() if files else (),
        )
        self._dirty = []
        self._directory_dirty = False
        self._unflushed_records = 0
        self._handed_over = mark
        return mark

    def finish_flush(self, mark, synced):
        """The last step, on the reactor, after the sync (``synced``) or
        without it (failed or abandoned: everything handed over is this
        log's to flush again). The recovery point moves to the log end of
        the capture only: appends since then are not covered; a truncation
        since then voids the mark (what it names may have been rewritten)."""
        if self._handed_over is mark:
            self._handed_over = None
        if self.closed:
            return
        if not synced or mark.truncations != self._truncations:
            self._take_back(mark)
            return
        for segment, size in mark.segments:
            # One appended to since is listed dirty again by that append,
            # its new data unsynced.
            if not segment.deleted and segment.size == size:
                segment.mark_synced()
        self._side_files_synced_since(mark.side_files)
        self.recovery_point = max(self.recovery_point, mark.end)

    def _sync_targets(self):
        """The files :meth:`flush` would sync now, after its writes: each
        dirty segment's, the side files', then the directory (last: it makes
        the side files' renames and new segments' names durable)."""
        targets = []
        for segment in self._dirty:
            if not segment.deleted:
                targets.extend(segment.sync_targets())
        targets.extend(self._side_file_targets())
        if self._directory_dirty and self._directory_path() is not None:
            targets.append((self._directory_path(), False))
        return tuple(targets)

    def _side_file_targets(self):
        return ()

    def _directory_path(self):
        return None

    def _take_back(self, mark):
        dirty = self._dirty
        for segment, _size in reversed(mark.segments):
            if not segment.deleted and segment not in dirty:
                dirty.insert(0, segment)
        self._directory_dirty = self._directory_dirty or mark.directory
        self._unflushed_records += mark.records
        if self._unflushed_records and self.on_unflushed is not None:
            self.on_unflushed(self)

    def _side_files_token(self):
        return None

    def _side_files_synced_since(self, token):
        pass

    def _write_out(self, sync):
        for segment in self._dirty:
            if not segment.deleted:
                if sync:
                    segment.flush()
                else:
                    segment.flush(sync=False)
        handed = self._handed_over
        if sync and handed is not None:
            # A flush while a background sync is in flight moves the recovery
            # point to the log end: what was handed over must be synced too
            # (a rolled segment is no longer listed dirty here).
            for segment, _size in handed.segments:
                if not segment.deleted and segment not in self._dirty:
                    segment.flush()
        # Side files (the leader-epoch checkpoint) before the directory sync
        # that makes their renames durable, and before the recovery point moves.
        self._save_side_files(sync)
        if sync and (self._directory_dirty or handed is not None and handed.directory):
            self._sync_directory()
            self._directory_dirty = False

    def _flushed(self):
        self._dirty = []
        self._directory_dirty = False
        self._unflushed_records = 0
        self.recovery_point = self.log_end_offset

    def _save_side_files(self, sync):
        pass

    def _sync_directory(self):
        pass

    def close(self):
        if self.closed:
            return
        self.flush()
        self._close_files(sync=True)

    def write_for_close(self):
        """The first half of a batched close (:mod:`pluglog.storage.batchsync`):
        write everything :meth:`close` syncs (segment data, index entries,
        side files) without syncing. The caller syncs the file system once,
        then calls :meth:`close_synced`, in the same reactor turn."""
        self._write_out(sync=False)
        for segment in self.segments:
            segment.write_for_close()

    def close_synced(self):
        """The second half: the caller's sync covered it; close without syncs."""
        self.synced_by_caller()
        self._close_files(sync=False)

    def _close_files(self, sync):
        for segment, call in list(self._pending_deletes.items()):
            if call.active():
                call.cancel()
            segment.delete_files()
        self._pending_deletes.clear()
        for segment in self.segments:
            if sync:
                segment.close()
            else:
                segment.close(sync=False)
        self.closed = True


def sync_files(targets):
    """Any thread: sync each ``(path, data_only)`` of a :class:`FlushMark`'s
    ``files`` by path (a descriptor of its own: the log's may be closed by
    the open-file budget meanwhile). OSError as the calls raise it;
    FileNotFoundError when a file went since the capture (a deleted segment
    or log)."""
    for path, data_only in targets:
        fsync_path(path, data_only)
