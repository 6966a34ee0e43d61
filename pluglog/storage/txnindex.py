"""A segment's aborted-transaction index: Kafka's ``<base>.txnindex`` file.

One 34-byte entry per transaction aborted by a marker in this segment:
``version int16 (0), producer_id int64, first_offset int64, last_offset
int64, last_stable_offset int64`` (Kafka's TransactionIndex/AbortedTxn
layout), in marker order. The file exists only once a segment has an
entry. It goes with its segment: renamed and unlinked with it by
retention, truncated with it, carried into the cleaned segment by the log
cleaner (:mod:`pluglog.storage.cleaner`, :mod:`pluglog.storage.swap`).

Appends are written at once and fsynced with the segment's flush; a torn
trailing entry (a crash mid-write) is ignored on load. Reactor thread,
except :func:`read_entries`, which the cleaner may call anywhere.
"""

import os
import struct

from pluglog.fileutil import atomic_write
from pluglog.storage.openfiles import UNCOUNTED
from pluglog.storage.records import CONTROL_MASK, parse_header

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size


def read_entries(path):
    """``[(producer_id, first, last, last_stable), ...]`` of a txnindex file
    (empty when it does not exist)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return []
    whole = len(data) - len(data) % ENTRY_SIZE
    return [ENTRY.unpack_from(data, pos)[1:] for pos in range(0, whole, ENTRY_SIZE)]


def encode(entries):
    return b"".join(ENTRY.pack(0, *entry) for entry in entries)


def carry_entries(sources, path):
    """Write the entries of the ``sources`` files, in order, to ``path``
    (fsynced); nothing is written when they have none. The cleaner's copy
    of a group's index into its cleaned segment."""
    entries = [e for source in sources for e in read_entries(source)]
    if not entries:
        return
    with open(path, "wb") as handle:
        handle.write(encode(entries))
        handle.flush()
        os.fsync(handle.fileno())


_TRANSACTIONAL = 0x10


def aborted_index(aborted):
    """``{producer_id: [(first, last)]}`` of ``(producer_id, first, last)`` tuples."""
    by_pid = {}
    for pid, first, last in aborted:
        by_pid.setdefault(pid, []).append((first, last))
    return by_pid


def is_aborted(batch, aborted):
    """Whether ``batch`` is data of an aborted transaction (Kafka's cleaner
    drops those records and never lets them shadow a committed key)."""
    if not aborted:
        return False
    header = parse_header(batch)
    if not header.attributes & _TRANSACTIONAL or header.attributes & CONTROL_MASK:
        return False
    spans = aborted.get(header.producer_id, ())
    return any(first <= header.base_offset <= last for first, last in spans)


class TxnIndex:
    """The ``.txnindex`` file of one segment."""

    __slots__ = ("path", "fds", "_entries", "_fd", "_unsynced")

    def __init__(self, path, fds=UNCOUNTED):
        self.path = path
        #: opens and closes the descriptor, counted in the segment's budget
        self.fds = fds
        self._entries = None
        self._fd = None
        self._unsynced = False

    @property
    def entries(self):
        if self._entries is None:
            self._entries = read_entries(self.path)
        return self._entries

    def append(self, entry):
        """Add ``(producer_id, first, last, last_stable)`` (a newer marker)."""
        entries = self.entries
        if entries and entry[2] <= entries[-1][2]:
            return  # already there (a reload or a retried marker)
        if self._fd is None:
            self._fd = self.fds.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            # Drop a torn trailing entry before appending after it.
            os.ftruncate(self._fd, len(entries) * ENTRY_SIZE)
        os.write(self._fd, ENTRY.pack(0, *entry))
        entries.append(tuple(entry))
        self._unsynced = True

    def truncate_to(self, offset):
        """Forget transactions whose marker is at or after ``offset``."""
        entries = self.entries
        keep = [e for e in entries if e[2] < offset]
        if len(keep) == len(entries):
            return
        self._close_fd()
        self._entries = keep
        if keep:
            atomic_write(self.path, encode(keep))
        else:
            self.delete()

    @property
    def unsynced(self):
        """Entries written that :meth:`flush` would fsync."""
        return self._unsynced and self._fd is not None

    def mark_synced(self):
        self._unsynced = False

    def flush(self):
        if self.unsynced:
            os.fsync(self._fd)
        self._unsynced = False

    def _close_fd(self):
        if self._fd is not None:
            self.flush()
            fd, self._fd = self._fd, None
            self.fds.close(fd)

    def close(self):
        self._close_fd()

    def rename(self, path):
        self._close_fd()
        if os.path.exists(self.path):
            os.replace(self.path, path)
        self.path = path

    def delete(self):
        self._close_fd()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
