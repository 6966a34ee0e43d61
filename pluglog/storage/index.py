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
those columns, appends are one small ``os.write``. A segment may hold at most
``segment.index.bytes // entry size`` entries; :attr:`is_full` makes the log
roll.

Invariants: relative offsets strictly increase in both files; positions
never decrease; timestamps strictly increase (an entry is only added when the
max timestamp grows). :meth:`sanity_check` verifies them (and that positions
lie inside the log) when an index is loaded; a failed check means the caller
rebuilds the index from the log, which is always the source of truth.
Indexes are not fsynced on append: after an unclean stop they are rebuilt.

Threading: used only from the reactor thread, through its LogSegment.
"""

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right

OFFSET_ENTRY = struct.Struct(">II")
TIME_ENTRY = struct.Struct(">qI")
_NEED_SWAP = sys.byteorder == "little"


class IndexCorruptError(Exception):
    """An index file fails its sanity check and must be rebuilt."""


class _IndexFile:
    entry = None

    def __init__(self, path, base_offset, max_index_bytes):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.entry.size)
        self._fd = None

    def _open_fd(self):
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def create(self):
        """Make sure the file exists (empty for a new segment)."""
        self._open_fd()

    def _read_file(self):
        try:
            with open(self.path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            raise IndexCorruptError(f"{self.path} is missing") from None
        if len(data) % self.entry.size:
            raise IndexCorruptError(
                f"{self.path} has {len(data)} bytes, not a multiple of {self.entry.size}"
            )
        return data

    def _rewrite(self, data):
        """Replace the file's content atomically (tmp + rename)."""
        self.close()
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, self.path)

    def __len__(self):
        return len(self._relative_offsets())

    @property
    def is_full(self):
        return len(self) >= self.max_entries

    def flush(self):
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename(self, path):
        os.replace(self.path, path)
        self.path = path


class OffsetIndex(_IndexFile):
    """Maps offsets to byte positions in the segment's .log file."""

    entry = OFFSET_ENTRY

    def __init__(self, path, base_offset, max_index_bytes):
        super().__init__(path, base_offset, max_index_bytes)
        self.offsets = array("I")  # relative offsets
        self.positions = array("I")

    def _relative_offsets(self):
        return self.offsets

    def load(self, log_size):
        """Read the file into memory; raise IndexCorruptError if it is unsound."""
        flat = array("I", self._read_file())
        if _NEED_SWAP:
            flat.byteswap()
        self.offsets = flat[0::2]
        self.positions = flat[1::2]
        self.sanity_check(log_size)

    def sanity_check(self, log_size):
        offsets, positions = self.offsets, self.positions
        for i in range(1, len(offsets)):
            if offsets[i] <= offsets[i - 1] or positions[i] < positions[i - 1]:
                raise IndexCorruptError(f"{self.path} entry {i} is out of order")
        if positions and positions[-1] >= max(log_size, 1):
            raise IndexCorruptError(f"{self.path} points past the end of the log")

    def append(self, offset, position):
        relative = offset - self.base_offset
        if self.offsets and relative <= self.offsets[-1]:
            return
        os.write(self._open_fd(), OFFSET_ENTRY.pack(relative, position))
        self.offsets.append(relative)
        self.positions.append(position)

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
        flat = array("I", bytes(8 * len(self.offsets)))
        flat[0::2] = self.offsets
        flat[1::2] = self.positions
        if _NEED_SWAP:
            flat.byteswap()
        self._rewrite(flat.tobytes())


class TimeIndex(_IndexFile):
    """Maps timestamps to the offsets where they were reached."""

    entry = TIME_ENTRY

    def __init__(self, path, base_offset, max_index_bytes):
        super().__init__(path, base_offset, max_index_bytes)
        self.timestamps = array("q")
        self.offsets = array("I")  # relative offsets

    def _relative_offsets(self):
        return self.offsets

    def load(self, next_relative_offset=None):
        data = self._read_file()
        self.timestamps = array("q")
        self.offsets = array("I")
        for timestamp, relative in TIME_ENTRY.iter_unpack(data):
            self.timestamps.append(timestamp)
            self.offsets.append(relative)
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
        """Add ``(timestamp, offset)`` if the timestamp is a new maximum."""
        if timestamp < 0 or (self.timestamps and timestamp <= self.timestamps[-1]):
            return
        relative = offset - self.base_offset
        if self.offsets and relative < self.offsets[-1]:
            return
        os.write(self._open_fd(), TIME_ENTRY.pack(timestamp, relative))
        self.timestamps.append(timestamp)
        self.offsets.append(relative)

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
        data = b"".join(TIME_ENTRY.pack(t, o) for t, o in zip(self.timestamps, self.offsets))
        self._rewrite(data)
