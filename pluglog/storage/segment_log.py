"""The built-in partition log over Kafka segment files in a directory.

:class:`SegmentPartitionLog` is :class:`~pluglog.storage.log.BasePartitionLog`
(the segment list, append, read, retention, truncation, flushing) plus what
files add: scanning ``<data-dir>/<topic>-<partition>/`` at open, recovery
after an unclean shutdown, in-place compaction, and directory fsyncs.
:class:`ISegmentFilesLog` marks such logs for the broker's log cleaner,
which compacts them by path in worker processes.
"""

import os
from bisect import bisect_right

from twisted.logger import Logger
from zope.interface import Attribute, implementer

from pluglog.errors import KafkaStorageError
from pluglog.fileutil import fsync_directory
from pluglog.interfaces import (
    ICompactableLog,
    IDirectoryLog,
    IFlushableLog,
    IPartitionLog,
    IReplicatedLog,
    ITieredLog,
    ITransactionIndexLog,
)
from pluglog.storage.epochs import FILE_NAME as EPOCHS_FILE
from pluglog.storage.epochs import LeaderEpochCache
from pluglog.storage.filenames import DELETED_SUFFIX, LOG_SUFFIX, TMP_SUFFIX, parse_segment_file
from pluglog.storage.log import FSYNC_INTERVAL, BasePartitionLog
from pluglog.storage.segment import LogSegment
from pluglog.storage.swap import compact_inline, recover_swaps

_log = Logger()


class ISegmentFilesLog(IDirectoryLog):
    """Built-in only, not a plugin contract: a log of Kafka segment files
    that the broker's log cleaner compacts in worker processes by path
    (:mod:`pluglog.storage.cleaner`, :mod:`pluglog.storage.swap`)."""

    segments = Attribute("the LogSegment objects, oldest first, the active one last")


@implementer(
    IPartitionLog,
    IFlushableLog,
    IReplicatedLog,
    ICompactableLog,
    ISegmentFilesLog,
    ITransactionIndexLog,
    ITieredLog,
)
class SegmentPartitionLog(BasePartitionLog):
    """IPartitionLog over segment files in ``directory``.

    Opening recovers the log: with ``clean=True`` (the storage saw a clean
    shutdown marker) only the active segment's tail after its last index
    entry is scanned; otherwise every segment from the one holding
    ``recovery_point`` onward is CRC-checked, cut at the first torn or corrupt
    batch (later segments are then deleted) and re-indexed. Missing index
    files are rebuilt either way; corrupt ones when first loaded.
    """

    def __init__(
        self,
        directory,
        topic,
        partition,
        config,
        reactor=None,
        fsync=FSYNC_INTERVAL,
        recovery_point=0,
        log_start_offset=0,
        clean=True,
        open_segments=None,
        defer_sync=False,
    ):
        super().__init__(topic, partition, config, reactor, fsync)
        self.directory = directory
        #: recovery's syncs are left to the storage (one syncfs for every
        #: log of a dir at start-up): what they covered stays unflushed
        self._defer_sync = defer_sync
        self._epochs_unsynced = False
        #: leader-epoch file writes left unsynced (a background flush's token)
        self._epoch_writes = 0
        self.open_segments = open_segments
        self._first_dirty = 0  # compact()'s own; the broker's cleaner keeps a checkpoint
        try:
            os.makedirs(directory, exist_ok=True)
            bases = self._scan_directory()
        except OSError as exc:
            raise KafkaStorageError(f"cannot open log directory {directory}: {exc}") from exc
        if not bases:
            self._set_segments([self._new_segment(log_start_offset, -1)])
            self._directory_dirty = True
        else:
            self._set_segments([self._open_segment(base) for base in bases])
        rescanned_from = self._recover(recovery_point, clean)
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self._open_leader_epochs(rescanned_from)

    def _open_leader_epochs(self, rescanned_from):
        """Load the leader-epoch cache and make it agree with the recovered
        log (:mod:`pluglog.storage.epochs`); a repair is fsynced now (or,
        with ``defer_sync``, by the storage's flush), before the storage
        checkpoints this log's recovery point past it."""
        try:
            epochs = LeaderEpochCache(os.path.join(self.directory, EPOCHS_FILE), owned=True)
            if epochs.reconcile(self, rescanned_from):
                if self._defer_sync:
                    epochs.unsaved = True  # saved and synced by the storage's flush
                else:
                    epochs.save(sync=True)
        except OSError as exc:
            msg = f"cannot load the leader epochs of {self.directory}: {exc}"
            raise KafkaStorageError(msg) from exc
        #: the partition's leader-epoch cache, saved by this log's flushes
        self.leader_epochs = epochs

    def sync_side_files(self):
        """Save and fsync the leader-epoch checkpoint if it changed, or was
        written without a sync (a checkpoint's preparation): before a
        recovery point of this log is checkpointed without a flush first (a
        flush at append time runs before the partition assigns the epochs of
        the batches it wrote). OSError as the checkpoint writes raise it."""
        if self.leader_epochs.unsaved or self._epochs_unsynced:
            self.leader_epochs.save(sync=True)
            self._epochs_unsynced = False

    def _side_files_unsaved(self):
        return self.leader_epochs.unsaved or self._epochs_unsynced

    def _save_side_files(self, sync):
        epochs = self.leader_epochs
        if not epochs.unsaved and not (sync and self._epochs_unsynced):
            return
        try:
            if epochs.unsaved:
                epochs.save(sync=False)
            if sync:
                epochs.fsync()
            # Written but not synced (a batched flush whose syncfs may yet
            # fail): the flush log by log that then follows must fsync it.
            self._epochs_unsynced = not sync
            if not sync:
                self._epoch_writes += 1
        except OSError as exc:
            raise KafkaStorageError(f"cannot write {epochs.path}: {exc}") from exc
        self._directory_dirty = True  # the rename: durable with the directory sync

    def _side_files_synced(self):
        self._epochs_unsynced = False

    def _side_file_targets(self):
        # Written unsynced (by the capture's writes or an earlier batch).
        epochs = self.leader_epochs
        if self._epochs_unsynced and epochs.path is not None and epochs.found:
            return ((epochs.path, False),)
        return ()

    def _directory_path(self):
        return self.directory

    def _side_files_token(self):
        return self._epoch_writes

    def _side_files_synced_since(self, token):
        # Not written again since the capture: the sync covered the file.
        if token == self._epoch_writes:
            self._epochs_unsynced = False

    def append_aborted_txn(self, producer_id, first_offset, last_offset, last_stable_offset):
        """ITransactionIndexLog: into the ``.txnindex`` of the segment
        holding the marker."""
        segment = self.segments[max(0, bisect_right(self._bases, last_offset) - 1)]
        try:
            segment.txn_index.append((producer_id, first_offset, last_offset, last_stable_offset))
        except OSError as exc:
            raise KafkaStorageError(f"cannot write {segment.txn_index.path}: {exc}") from exc

    def aborted_txns(self):
        """ITransactionIndexLog: every segment's entries, oldest first."""
        out = []
        for segment in self.segments:
            out.extend(segment.txn_index.entries)
        return out

    def compact(self, now_ms):
        """ICompactableLog: one cleaner pass inline (the broker's log cleaner
        runs the same pass in a worker process instead)."""
        return compact_inline(self, now_ms)

    def _scan_directory(self):
        """Finish or undo an interrupted cleaner swap (:mod:`pluglog.storage.swap`),
        remove leftovers (``*.deleted``, ``*.tmp``, orphan indexes) and
        return the base offsets of the segments present."""
        recover_swaps(self.directory)
        names = os.listdir(self.directory)
        bases = set()
        for name in names:
            parsed = parse_segment_file(name)
            if parsed and parsed[1] == LOG_SUFFIX:
                bases.add(parsed[0])
        for name in names:
            parsed = parse_segment_file(name)
            if name.endswith((DELETED_SUFFIX, TMP_SUFFIX)) or parsed and parsed[0] not in bases:
                os.unlink(os.path.join(self.directory, name))
        return sorted(bases)

    def _open_segment(self, base_offset, created_ms=-1):
        config = self.config
        return LogSegment(
            self.directory,
            base_offset,
            config.index_interval_bytes,
            config.segment_index_bytes,
            created_ms,
            self.open_segments,
        )

    def _new_segment(self, base_offset, now_ms):
        return self._open_segment(base_offset, now_ms)

    def _recover(self, recovery_point, clean):
        for segment in self.segments:
            if segment.indexes_missing():
                segment.rebuild_indexes()
        if clean:
            # A clean stop leaves nothing to re-scan except the active
            # segment, the one written last: it is CRC-checked whole, so
            # damage found there is cut and logged exactly as after a crash
            # and the log end (the HW) never points past readable batches.
            active = self.segments[-1]
            cut = active.recover() if active.size else 0
            self.recovery_point = min(recovery_point, self.log_end_offset)
            rescanned_from = None
            if cut:
                rescanned_from = active.base_offset
                active.flush()
                _log.warn(
                    "recovered {topic}-{partition} at a clean start: cut {cut} torn or "
                    "corrupt byte(s) from the active segment at offset {base}, log end {end}",
                    topic=self.topic,
                    partition=self.partition,
                    cut=cut,
                    base=active.base_offset,
                    end=self.log_end_offset,
                )
            return rescanned_from
        start = max(0, bisect_right(self._bases, recovery_point) - 1)
        rescanned_from = self.segments[start].base_offset
        scanned = len(self.segments) - start
        cut_bytes = 0
        for i in range(start, len(self.segments)):
            cut = self.segments[i].recover()
            cut_bytes += cut
            if cut and i + 1 < len(self.segments):
                cut_bytes += sum(later.size for later in self.segments[i + 1 :])
                # Data after a damaged batch cannot be trusted to follow it.
                for later in self.segments[i + 1 :]:
                    later.mark_deleted()
                    later.delete_files()
                self._set_segments(self.segments[: i + 1])
                break
        for segment in self.segments[start:]:
            if self._defer_sync:
                segment.flush(sync=False)
                segment.mark_unsynced()
                self._dirty.append(segment)
            else:
                segment.flush()
        self._directory_dirty = True
        self.recovery_point = self.log_end_offset
        _log.info(
            "recovered {topic}-{partition} after an unclean shutdown: re-scanned {scanned} "
            "segment(s) from offset {start}, cut {cut} torn or corrupt byte(s), log end {end}",
            topic=self.topic,
            partition=self.partition,
            scanned=scanned,
            start=recovery_point,
            cut=cut_bytes,
            end=self.log_end_offset,
        )
        return rescanned_from

    def _sync_directory(self):
        try:
            fsync_directory(self.directory)
        except OSError as exc:
            raise KafkaStorageError(f"fsync of {self.directory} failed: {exc}") from exc
