"""Sparse offset and time indexes of a log segment.

File formats (big-endian, fixed-size entries, no header; the file length is
always a multiple of the entry size)::

    .index      u32 relative offset | u32 byte position in the .log      (8 bytes)
    .timeindex  i64 timestamp ms    | u32 relative offset               (12 bytes)

Relative offset = offset - segment base offset. An offset index entry
``(o, p)`` says the batch whose base offset is ``base + o`` starts at byte
``p``; a lookup returns the last entry at or below the target and the caller
scans forward from its position (at most ~index.interval.bytes). A time
index entry ``(t, o)`` says the largest timestamp among batches up to and
including offset ``base + o`` is ``t``.

Unlike Kafka (preallocated, memory-mapped files) these are append-only files
mirrored in memory as :mod:`array` columns: lookups are :func:`bisect` over
those columns. Appends only extend the columns; the entries not yet in the
file (those from :attr:`written` on) go out together in one ``os.write``
when :meth:`write_pending` runs: on :meth:`flush` (before the fsync), on
:meth:`close`, when the segment rolls, and after an append that leaves
:data:`WRITE_BATCH_BYTES` or more of entries pending in either file (best
effort, from ``LogSegment.append``), so the files lag memory by about a page
at most. A rewrite (truncation, rebuild) replaces the file with every entry.
Why: with the default index.interval.bytes nearly every produced batch adds
an offset index entry (and usually a time index one), and an ``os.write``
per file per batch was a large share of the Python-side cost of an append.
A segment may hold at most ``segment.index.bytes // entry size`` entries;
:attr:`is_full` makes the log roll.

Invariants: relative offsets strictly increase in both files; positions
never decrease; timestamps strictly increase (an entry is only added when the
max timestamp grows). :meth:`sanity_check` verifies them (and that positions
lie inside the log) when an index is loaded; a failed check means the caller
rebuilds the index from the log, which is always the source of truth.
The file is always a prefix of the in-memory entries, so it is a valid
(sparser) index at any moment. Indexes are fsynced only when a segment is
closed, never with the log's own flush (not even under ``--fsync always``):
after an unclean stop the segments from the recovery point on are re-indexed
from the log, and an older segment whose file lost its tail in a machine
crash gets the missing entries back from a header-only scan when it is
loaded (``LogSegment._extend_indexes``); a clean stop writes and fsyncs
everything in :meth:`close`.

Threading: used only from the reactor thread, through its LogSegment.
"""

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right

from pluglog.storage.openfiles import UNCOUNTED

OFFSET_ENTRY = struct.Struct(">II")
TIME_ENTRY = struct.Struct(">qI")
_NEED_SWAP = sys.byteorder == "little"
#: pending entries are written once this many bytes of them accumulate
WRITE_BATCH_BYTES = 4096


class IndexCorruptError(Exception):
    """An index file fails its sanity check and must be rebuilt."""


class _IndexFile:
    """An index file plus its in-memory columns (``offsets`` is in both kinds).

    ``written`` counts the entries already in the file; the columns past it
    are pending until :meth:`write_pending`.
    """

    #: one entry's layout; each kind of index sets its own
    entry: struct.Struct

    def __init__(self, path, base_offset, max_index_bytes, fds=UNCOUNTED):
        self.path = path
        #: opens and closes the descriptor, counted in the segment's budget
        self.fds = fds
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.entry.size)
        self.write_batch = max(1, WRITE_BATCH_BYTES // self.entry.size)
        self.written = 0
        self._fd = None

    def _open_fd(self):
        if self._fd is None:
            self._fd = self.fds.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def create(self):
        """Make sure the file exists (empty for a new segment); returns
        whether it is empty (then loading it would read nothing). The
        descriptor is not kept: a segment holds descriptors only while it is
        in use (their budget is storage/openfiles.py's)."""
        if self._fd is not None:
            return False
        fds = self.fds
        fd = fds.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            return os.fstat(fd).st_size == 0
        finally:
            fds.close(fd)

    def _read_file(self):
        # Through the segment's budget, as every segment file descriptor.
        fds = self.fds
        try:
            fd = fds.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise IndexCorruptError(f"{self.path} is missing") from None
        try:
            with open(fd, "rb", closefd=False) as handle:
                data = handle.read()
        finally:
            fds.close(fd)
        if len(data) % self.entry.size:
            raise IndexCorruptError(
                f"{self.path} has {len(data)} bytes, not a multiple of {self.entry.size}"
            )
        return data

    def _rewrite(self, data):
        """Replace the file's content atomically (tmp + rename) with ``data``,
        the encoding of every in-memory entry (so nothing is pending after)."""
        self._close_fd()
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, self.path)
        self.written = len(self.offsets)

    def _encode(self, start, stop):
        """The file bytes of entries ``[start, stop)``."""
        raise NotImplementedError

    @property
    def pending(self):
        """Entries in memory that are not in the file yet."""
        return len(self.offsets) - self.written

    @property
    def batch_due(self):
        """A page (:data:`WRITE_BATCH_BYTES`) or more of entries is pending."""
        return len(self.offsets) - self.written >= self.write_batch

    def write_pending(self):
        """Append the pending entries to the file in one ``os.write``.

        On an error the file is cut back to its last whole written entry
        (best effort) and the entries stay pending; the error propagates.
        """
        stop = len(self.offsets)
        start = self.written
        if stop <= start:
            return
        data = self._encode(start, stop)
        fd = self._open_fd()
        done = 0
        try:
            while done < len(data):
                n = os.write(fd, data[done:] if done else data)
                if n <= 0:
                    raise OSError(f"write to {self.path} wrote nothing")
                done += n
        except OSError:
            if done:
                try:
                    os.ftruncate(fd, start * self.entry.size)
                except OSError:
                    pass
            raise
        self.written = stop

    def __len__(self):
        return len(self.offsets)

    @property
    def is_full(self):
        return len(self.offsets) >= self.max_entries

    def flush(self):
        """Write the pending entries, then fsync the file."""
        self.write_pending()
        if self._fd is not None:
            os.fsync(self._fd)

    def _close_fd(self):
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self.fds.close(fd)

    def close(self, write=True):
        """Write the pending entries (no fsync; dropped with ``write=False``,
        for a file about to be deleted) and close the file."""
        try:
            if write:
                self.write_pending()
        finally:
            self._close_fd()

    def rename(self, path):
        os.replace(self.path, path)
        self.path = path


class OffsetIndex(_IndexFile):
    """Maps offsets to byte positions in the segment's .log file."""

    entry = OFFSET_ENTRY

    def __init__(self, path, base_offset, max_index_bytes, fds=UNCOUNTED):
        super().__init__(path, base_offset, max_index_bytes, fds)
        self.offsets = array("I")  # relative offsets
        self.positions = array("I")

    def load(self, log_size):
        """Read the file into memory; raise IndexCorruptError if it is unsound."""
        flat = array("I", self._read_file())
        if _NEED_SWAP:
            flat.byteswap()
        self.offsets = flat[0::2]
        self.positions = flat[1::2]
        self.written = len(self.offsets)
        self.sanity_check(log_size)

    def sanity_check(self, log_size):
        offsets, positions = self.offsets, self.positions
        for i in range(1, len(offsets)):
            if offsets[i] <= offsets[i - 1] or positions[i] < positions[i - 1]:
                raise IndexCorruptError(f"{self.path} entry {i} is out of order")
        if positions and positions[-1] >= max(log_size, 1):
            raise IndexCorruptError(f"{self.path} points past the end of the log")

    def append(self, offset, position):
        """Add an entry in memory (it reaches the file with :meth:`write_pending`)."""
        relative = offset - self.base_offset
        offsets = self.offsets
        if offsets and relative <= offsets[-1]:
            return
        offsets.append(relative)
        self.positions.append(position)

    def _encode(self, start, stop):
        flat = array("I", bytes(8 * (stop - start)))
        flat[0::2] = self.offsets[start:stop]
        flat[1::2] = self.positions[start:stop]
        if _NEED_SWAP:
            flat.byteswap()
        return flat.tobytes()

    def lookup(self, offset):
        """Return ``(offset, position)`` of the last entry at or below ``offset``,
        or ``(base_offset, 0)`` when there is none."""
        i = bisect_right(self.offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self.offsets[i], self.positions[i]

    def last_entry(self):
        if not self.offsets:
            return self.base_offset, 0
        return self.base_offset + self.offsets[-1], self.positions[-1]

    def truncate_to(self, offset):
        """Drop entries for offsets >= ``offset``."""
        keep = bisect_left(self.offsets, offset - self.base_offset)
        if keep < len(self.offsets):
            self.reset(self.offsets[:keep], self.positions[:keep])

    def reset(self, relative_offsets, positions):
        """Replace every entry (index rebuild or truncation)."""
        self.offsets = array("I", relative_offsets)
        self.positions = array("I", positions)
        self._rewrite(self._encode(0, len(self.offsets)))


class TimeIndex(_IndexFile):
    """Maps timestamps to the offsets where they were reached."""

    entry = TIME_ENTRY

    def __init__(self, path, base_offset, max_index_bytes, fds=UNCOUNTED):
        super().__init__(path, base_offset, max_index_bytes, fds)
        self.timestamps = array("q")
        self.offsets = array("I")  # relative offsets

    def load(self, next_relative_offset=None):
        data = self._read_file()
        self.timestamps = array("q")
        self.offsets = array("I")
        for timestamp, relative in TIME_ENTRY.iter_unpack(data):
            self.timestamps.append(timestamp)
            self.offsets.append(relative)
        self.written = len(self.offsets)
        self.sanity_check(next_relative_offset)

    def sanity_check(self, next_relative_offset=None):
        ts, offsets = self.timestamps, self.offsets
        for i in range(1, len(ts)):
            if ts[i] <= ts[i - 1] or offsets[i] < offsets[i - 1]:
                raise IndexCorruptError(f"{self.path} entry {i} is out of order")
        if next_relative_offset is not None and offsets and offsets[-1] >= next_relative_offset:
            raise IndexCorruptError(f"{self.path} points past the end of the log")

    @property
    def last_timestamp(self):
        return self.timestamps[-1] if self.timestamps else -1

    def maybe_append(self, timestamp, offset):
        """Add ``(timestamp, offset)`` in memory if the timestamp is a new maximum."""
        timestamps = self.timestamps
        if timestamp < 0 or (timestamps and timestamp <= timestamps[-1]):
            return
        relative = offset - self.base_offset
        offsets = self.offsets
        if offsets and relative < offsets[-1]:
            return
        timestamps.append(timestamp)
        offsets.append(relative)

    def _encode(self, start, stop):
        return b"".join(
            map(TIME_ENTRY.pack, self.timestamps[start:stop], self.offsets[start:stop])
        )

    def lookup_before(self, timestamp):
        """Return the offset of the last entry whose timestamp is < ``timestamp``
        (every batch up to it is older than ``timestamp``), or None."""
        i = bisect_left(self.timestamps, timestamp) - 1
        if i < 0:
            return None
        return self.base_offset + self.offsets[i]

    def truncate_to(self, offset):
        keep = bisect_left(self.offsets, offset - self.base_offset)
        if keep < len(self.offsets):
            self.reset(self.timestamps[:keep], self.offsets[:keep])

    def reset(self, timestamps, relative_offsets):
        self.timestamps = array("q", timestamps)
        self.offsets = array("I", relative_offsets)
        self._rewrite(self._encode(0, len(self.offsets)))
