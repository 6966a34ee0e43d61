"""One log segment: a .log file of record batches plus its two sparse indexes.

Files (see :mod:`pluglog.storage.filenames`, :mod:`pluglog.storage.index`):
``<base>.log`` holds magic-2 batches back to back, byte-identical to what the
producer sent except baseOffset (bytes 0-7) and partitionLeaderEpoch (bytes
12-15), which the broker patches (both outside the CRC); ``<base>.index`` and
``<base>.timeindex`` hold one entry per ``index.interval.bytes`` of log.

Appends go to the end of the file with one ``os.pwritev`` of the patched
16-byte header prefixes and memoryview slices of the producer's buffers, so
batch bodies are never copied in Python. Reads (the
:mod:`pluglog.storage.segment_read` mixin) return a
:class:`~pluglog.storage.results.FileRange` that fetch sends with
``os.sendfile``, located without decoding a record (the walks over the
file are :mod:`pluglog.storage.logscan`). Descriptors are opened on use
and counted in the broker's budget (:mod:`pluglog.storage.openfiles`).

Threading: every method runs on the reactor thread (or one caller thread);
nothing blocks except page-cache I/O and, when the fsync policy asks,
:meth:`flush`.

Invariants:

* ``size`` equals the .log file length; the file holds only whole batches
  (a torn tail is cut by :meth:`recover` before the segment is used);
* base offsets strictly increase and every offset in the file is in
  ``[base_offset, base_offset + 2**32)``;
* index entries point at batch starts; indexes may lag the log (they are
  rebuilt from it) but never point past it. The index files may also lag the
  in-memory indexes (entries are written in batches, see
  :mod:`pluglog.storage.index`); :meth:`close` writes them out.

Old segments are cheap to open: indexes, the next offset and the largest
timestamp are loaded the first time something needs them.
"""

import os
import stat

from pluglog.errors import KafkaStorageError
from pluglog.fileutil import unlink_files, write_pieces
from pluglog.storage.filenames import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_path,
)
from pluglog.storage.index import IndexCorruptError, OffsetIndex, TimeIndex
from pluglog.storage.logscan import (
    extend_indexes,
    index_entries,
    iter_headers,
    scan_file,
)
from pluglog.storage.openfiles import UNCOUNTED
from pluglog.storage.records import HEADER_SIZE, parse_header
from pluglog.storage.segment_read import SegmentReads
from pluglog.storage.txnindex import TxnIndex

#: relative offsets are u32 in the index; Kafka keeps them within int32
MAX_RELATIVE_OFFSET = 2**31 - 1


class LogSegment(SegmentReads):
    """A segment file pair; see the module docstring for the contract (reads:
    :class:`~pluglog.storage.segment_read.SegmentReads`)."""

    def __init__(
        self,
        directory,
        base_offset,
        index_interval_bytes,
        max_index_bytes,
        created_ms=-1,
        open_segments=None,
    ):
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.log_path = segment_path(directory, base_offset, LOG_SUFFIX)
        # Descriptors are opened on first use, through ``fds``, which counts
        # them in the OpenSegments budget (storage/openfiles.py); the budget
        # may close them (release_files) and _file() reopens the .log.
        self._fd = None
        self._open_segments = open_segments
        self.fds = fds = UNCOUNTED if open_segments is None else open_segments.descriptors(self)
        self._closed = False
        self._unsynced = False
        try:
            try:
                st = os.stat(self.log_path)
                if not stat.S_ISREG(st.st_mode):
                    raise OSError(f"{self.log_path} is not a regular file")
                self.size = st.st_size
            except FileNotFoundError:
                self._fd = fds.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
                self.size = 0
        except OSError as exc:
            raise KafkaStorageError(f"cannot open {self.log_path}: {exc}") from exc
        index_path = segment_path(directory, base_offset, INDEX_SUFFIX)
        time_path = segment_path(directory, base_offset, TIME_INDEX_SUFFIX)
        self.index = OffsetIndex(index_path, base_offset, max_index_bytes, fds)
        self.time_index = TimeIndex(time_path, base_offset, max_index_bytes, fds)
        #: aborted transactions whose marker is here (created on first entry)
        self.txn_index = TxnIndex(segment_path(directory, base_offset, TXN_INDEX_SUFFIX), fds)
        self._indexes_loaded = False
        #: the last batch a read found (pluglog.storage.segment_read)
        self._found = None
        self.bytes_since_index = 0
        if self.size == 0:
            self._next_offset = base_offset
            self._max_timestamp = -1
            self._offset_of_max_timestamp = base_offset
            self._first_timestamp = None
        else:
            self._next_offset = None  # unknown until _load_tail()
            self._max_timestamp = None
            self._offset_of_max_timestamp = None
            self._first_timestamp = None
        self.deleted = False
        if self.size == 0:
            # Create both index files now so that a missing one on reopen
            # really means damage (and triggers a rebuild). Found empty, as
            # the empty log's, they are loaded as they are: a new partition's
            # first append then opens and reads neither (30,000 opens when a
            # follower's 10,000 new partitions got their first data,
            # bench/RESULTS.md, session 14).
            empty = self.index.create()
            self._indexes_loaded = self.time_index.create() and empty

    def _file(self):
        """The .log descriptor, reopened if the LRU closed it; marks this
        segment most recently used."""
        fd = self._fd
        if fd is None:
            if self._closed:
                raise KafkaStorageError(f"{self.log_path} is closed")
            try:
                # Counted (and made most recent) by the budget as it opens.
                fd = self._fd = self.fds.open(self.log_path, os.O_RDWR)
            except OSError as exc:
                raise KafkaStorageError(f"cannot open {self.log_path}: {exc}") from exc
        elif self._open_segments is not None:
            self._open_segments.touch(self)
        return fd

    def release_files(self):
        """Close every descriptor (the budget's eviction); the next use
        reopens. Pending index entries are written first and a transaction
        index is fsynced if it has to be (best effort: on an error the
        entries stay pending and the next write retries)."""
        # The .log first: writing pending index entries may open an index
        # file, which then takes the freed place within the budget.
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self.fds.close(fd)
        for holder in (self.index, self.time_index):
            try:
                holder.close(write=not self.deleted)
            except OSError:
                pass
        try:
            self.txn_index.close()
        except OSError:
            pass

    def fileno(self):
        return self._file()

    def __repr__(self):
        return f"<LogSegment {self.log_path} size={self.size}>"

    # -- lazily loaded state ------------------------------------------------

    def indexes_missing(self):
        return not (os.path.exists(self.index.path) and os.path.exists(self.time_index.path))

    def _ensure_indexes(self):
        if self._indexes_loaded:
            return
        try:
            self.index.load(self.size)
            self.time_index.load()
        except IndexCorruptError:
            self.rebuild_indexes()
        else:
            self._extend_indexes()
        self._indexes_loaded = True

    def _extend_indexes(self):
        """Put back index entries a crash took from the files' tails.

        Index files are not fsynced when the log is (see :meth:`flush`), so
        after a machine crash one may hold only a prefix of its entries even
        below the recovery point: still a valid, sparser index, which
        :func:`~pluglog.storage.logscan.extend_indexes` completes with a
        header-only scan (one or two headers when the file is whole)."""
        if extend_indexes(
            self._file, self.size, self.index, self.time_index, self.index_interval_bytes
        ):
            self.write_indexes()

    def _load_tail(self):
        """Find the next offset and max timestamp: the last index entry, then
        a short CRC-checked scan of the batches after it."""
        self._ensure_indexes()
        _, position = self.index.last_entry()
        max_ts = self.time_index.last_timestamp
        offset_of_max = (
            self.base_offset + self.time_index.offsets[-1] if self.time_index.offsets else None
        )
        entries, stop = self._scan(position, self.size, check_crc=True)
        if stop < self.size:
            # Only reachable if a cleanly closed segment was damaged behind our
            # back; fall back to a full recovery of this segment.
            self.recover()
            return
        next_offset = self.base_offset
        if entries:
            next_offset = entries[-1][1].next_offset
        for _, header in entries:
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max = header.max_timestamp, header.last_offset
        self.bytes_since_index = self.size - position
        self._next_offset = next_offset
        self._max_timestamp = max_ts
        self._offset_of_max_timestamp = offset_of_max if offset_of_max is not None else -1

    @property
    def next_offset(self):
        """Offset after the last batch of this segment."""
        if self._next_offset is None:
            self._load_tail()
        return self._next_offset

    @property
    def largest_timestamp(self):
        if self._max_timestamp is None:
            self._load_tail()
        return self._max_timestamp

    @property
    def first_batch_timestamp(self):
        """Max timestamp of the first batch (segment.ms rolls are measured from it)."""
        if self._first_timestamp is None and self.size >= HEADER_SIZE:
            self._first_timestamp = parse_header(
                os.pread(self._file(), HEADER_SIZE, 0)
            ).max_timestamp
        return -1 if self._first_timestamp is None else self._first_timestamp

    def index_full(self):
        if not self._indexes_loaded:
            self._ensure_indexes()
        index, time_index = self.index, self.time_index
        return (
            len(index.offsets) >= index.max_entries
            or len(time_index.offsets) >= time_index.max_entries
        )

    # -- scanning -----------------------------------------------------------

    def _iter_headers(self, position, end):
        """Yield ``(position, header)`` of batches in [position, end), headers only."""
        return iter_headers(self._file, position, end)

    def _scan(self, position, end, check_crc, next_offset=None):
        """Return ``(entries, stop)`` for the valid batches from ``position``;
        ``stop`` is where the first torn/corrupt batch (or ``end``) begins."""
        return scan_file(self._file, position, end, check_crc, next_offset)

    def rebuild_indexes(self, check_crc=False):
        """Rebuild both indexes from the log; return where the valid batches end."""
        self._found = None  # the file may be cut after this
        entries, stop = self._scan(0, self.size, check_crc, self.base_offset)
        offsets, positions, times, time_offsets, since, max_ts, offset_of_max = index_entries(
            entries, self.base_offset, self.index_interval_bytes
        )
        self.index.reset(offsets, positions)
        self.time_index.reset(times, time_offsets)
        self._indexes_loaded = True
        self.bytes_since_index = since
        self._next_offset = entries[-1][1].next_offset if entries else self.base_offset
        self._max_timestamp = max_ts
        self._offset_of_max_timestamp = offset_of_max
        return stop

    def recover(self):
        """CRC-check every batch, cut the log at the first bad or torn one and
        rebuild the indexes. Returns the number of bytes cut."""
        stop = self.rebuild_indexes(check_crc=True)
        cut = self.size - stop
        if cut:
            self._truncate_file(stop)
        return cut

    def _truncate_file(self, position):
        self._found = None
        os.ftruncate(self._file(), position)
        self._unsynced = True
        self.size = position
        self._first_timestamp = None

    # -- append / read ------------------------------------------------------

    def append(self, prepared, written=None):
        """Write a :class:`~pluglog.storage.records.PreparedAppend` at the end;
        call ``written()`` (if given) once the bytes are in the file, before
        the index bookkeeping.

        Index entries are only added in memory; they reach the index files
        in page-sized writes, on roll, flush and close (see
        :mod:`pluglog.storage.index`).
        """
        if not self._indexes_loaded:
            self._ensure_indexes()
        if self._next_offset is None or self._max_timestamp is None:
            self._load_tail()
        fd = self._file()
        position = self.size
        self._unsynced = True
        try:
            end = write_pieces(fd, prepared.pieces, position, prepared.size_bytes)
        except OSError as exc:
            try:
                os.ftruncate(fd, position)
            except OSError:
                pass
            raise KafkaStorageError(f"append to {self.log_path} failed: {exc}") from exc
        if written is not None:
            self.size = end
            self._next_offset = prepared.last_offset + 1
            written()
        interval = self.index_interval_bytes
        since = self.bytes_since_index
        max_ts, offset_of_max = self._max_timestamp, self._offset_of_max_timestamp
        index = None
        for base, last, size, batch_max in prepared.batches:
            if since > interval:
                index = self.index
                index.append(base, position)
                self.time_index.maybe_append(max_ts, offset_of_max)
                since = 0
            since += size
            position += size
            if batch_max > max_ts:
                max_ts, offset_of_max = batch_max, last
        self.size = end
        self.bytes_since_index = since
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, offset_of_max
        self._next_offset = prepared.last_offset + 1
        if index is not None and (index.batch_due or self.time_index.batch_due):
            try:
                self.write_indexes()
            except KafkaStorageError:
                # Best effort: the batch is stored and accounted for, so this
                # append must not fail. The entries stay pending (the files
                # still hold a valid prefix); flush, roll or close retries the
                # write and reports the error.
                pass

    def write_indexes(self):
        """Write the pending index entries out (no fsync)."""
        try:
            self.index.write_pending()
            self.time_index.write_pending()
        except OSError as exc:
            raise KafkaStorageError(
                f"writing the indexes of {self.log_path} failed: {exc}"
            ) from exc

    def truncate_to(self, offset):
        """Drop the batch containing ``offset`` and everything after it."""
        position, header = self._locate(offset)
        if header is None:
            return 0
        cut = self.size - position
        self._truncate_file(position)
        self.index.truncate_to(header.base_offset)
        self.time_index.truncate_to(header.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        self._next_offset = None
        self._load_tail()
        return cut

    # -- lifecycle ----------------------------------------------------------

    def on_roll(self):
        """Record the final max timestamp so a reopen finds it in the time
        index, and write the pending index entries (this segment is done)."""
        self._ensure_indexes()
        if self._max_timestamp is not None and self._max_timestamp >= 0:
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
        self.write_indexes()

    def mark_unsynced(self):
        """Its data must be synced before a recovery point passes it (a
        recovered segment whose sync the storage batches)."""
        self._unsynced = True

    def mark_synced(self):
        """A caller's file-system sync (``syncfs``) covered this segment."""
        self._unsynced = False
        self.txn_index.mark_synced()

    def flush(self, indexes=False, sync=True):
        """fdatasync the log and the transaction index, and write the pending
        offset and time index entries out; with ``indexes`` fsync those two
        files as well (at close).

        The offset and time indexes are derived from the log and are not
        fsynced on a flush: a lost tail is put back by
        :meth:`_extend_indexes` and a damaged file is rebuilt, so fsyncing
        them would only triple the cost of ``--fsync always`` (three syncs
        per append instead of one). The transaction index is fsynced: a
        lost entry would let a read_committed consumer see an aborted
        transaction, and it only changes on aborts. ``sync=False`` only
        writes (a batched flush: the caller syncs the file system, then
        calls :meth:`mark_synced`)."""
        try:
            if sync and self._log_unsynced:
                # fsync covers the file's pages whichever descriptor wrote them.
                os.fdatasync(self._file())
                self._unsynced = False
            if indexes:
                self.index.flush()
                self.time_index.flush()
            else:
                self.write_indexes()
            if sync:
                self.txn_index.flush()
        except OSError as exc:
            raise KafkaStorageError(f"fsync of {self.log_path} failed: {exc}") from exc

    @property
    def _log_unsynced(self):
        # Written since its last sync, or open (a write through it may be
        # unsynced): what :meth:`flush` fdatasyncs.
        return self._unsynced or self._fd is not None

    def sync_targets(self):
        """What :meth:`flush` would sync now, as ``(path, data_only)``s, for
        a sync by path in a thread (:func:`pluglog.storage.log_durability.sync_files`):
        the .log (fdatasync) and an unsynced transaction index (fsync)."""
        targets = []
        if self._log_unsynced:
            targets.append((self.log_path, True))
        if self.txn_index.unsynced:
            targets.append((self.txn_index.path, False))
        return targets

    def write_for_close(self):
        """What :meth:`close` writes, without its syncs (a batched close:
        the caller syncs the file system, then calls ``close(sync=False)``)."""
        if not self._closed and not self.deleted and self._indexes_loaded:
            self.on_roll()

    def close(self, sync=True):
        """Write the final index entries and fsync the files (``sync=False``:
        :meth:`write_for_close` wrote them and a file-system sync covered
        them), then close the descriptors."""
        if self._closed:
            return
        if sync and not self.deleted and self._indexes_loaded:
            self.on_roll()
            self.flush(indexes=True)
        try:
            self.index.close(write=not self.deleted)
            self.time_index.close(write=not self.deleted)
            self.txn_index.close()
        finally:
            self._closed = True
            if self._fd is not None:
                fd, self._fd = self._fd, None
                self.fds.close(fd)
            if self._open_segments is not None:
                self._open_segments.forget(self)

    def mark_deleted(self):
        """Rename the files to ``*.deleted``; readers holding ranges keep working."""
        self.deleted = True
        for holder in (self.index, self.time_index):
            holder.close(write=False)
            if os.path.exists(holder.path):
                holder.rename(holder.path + DELETED_SUFFIX)
        self.txn_index.rename(self.txn_index.path + DELETED_SUFFIX)
        os.replace(self.log_path, self.log_path + DELETED_SUFFIX)
        self.log_path += DELETED_SUFFIX

    def delete_files(self, unlink=None):
        """Close the descriptors and unlink the ``*.deleted`` files, through
        ``unlink(paths)`` if given (the log runs it in a thread)."""
        self.close()
        (unlink or unlink_files)(
            (self.log_path, self.index.path, self.time_index.path, self.txn_index.path)
        )
