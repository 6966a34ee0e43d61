"""The leader-epoch cache of one partition and its ``leader-epoch-checkpoint`` file.

Each entry ``(epoch, start_offset)`` says that the leader of ``epoch`` wrote
its first batch at ``start_offset`` (Kafka's LeaderEpochFileCache, KIP-101).
A leader adds ``(epoch, log end offset)`` when it takes over; a follower adds
an entry whenever a replicated batch carries a newer partitionLeaderEpoch.
OffsetForLeaderEpoch answers from it, and a follower truncates its log to the
leader's end offset of the follower's latest epoch, so a failover never leaves
divergent logs.

File format (Kafka's): a version line ``0``, a count line, then one
``epoch start_offset`` line per entry, oldest first.

Durability. A cache owned by a segment log (``owned=True``, see
:class:`~pluglog.storage.segment_log.SegmentPartitionLog`) does not write
its file when an epoch is added: it is marked unsaved, and the log writes
and syncs it in its next flush, before the flush moves the recovery point
(or in the one ``syncfs`` of a batched checkpoint flush). A new epoch on
each of 10,000 partitions (a leadership change) cost two fsyncs each on the
event loop before (bench/RESULTS.md). This is safe because the file is a
cache of what the log's batch headers say, rebuilt from them at open
(:meth:`LeaderEpochCache.reconcile`):

* batches below the persisted recovery point were flushed, and every
  flush saved the entries of the batches it covered first, so the file
  holds their epochs;
* batches from the recovery point on are re-scanned after an unclean stop,
  and their headers' epochs assigned again (as Kafka's log recovery does);
* a damaged file (an OS crash mid-write), or one missing after an unclean
  stop, is rebuilt from every batch header of the log;
* entries past the recovered log end are dropped.

Truncations still rewrite the file and fsync it at once: they are rare
(divergent logs after a failover), and a stale entry kept past a truncation
could name an epoch for batches a newer leader wrote. An entry a leader
adds for an epoch in which it wrote nothing yet is the one thing a crash
can lose; with ZooKeeper a broker back from a crash leads only after the
controller gives it a newer epoch (a re-registration is handled as a failure
and a return), which is added then. Caches of other logs (a plugin's
directory log) write and fsync on every change, as before. With
``path=None`` (memory storage) the cache lives in memory only. Runs on the
reactor thread.
"""

import os
from bisect import bisect_right

from twisted.logger import Logger

from pluglog.fileutil import atomic_write, fsync_path
from pluglog.interfaces import IDirectoryLog

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED = -1
_log = Logger()


class LeaderEpochCache:
    """Sorted ``(epoch, start_offset)`` entries of one partition."""

    def __init__(self, path=None, owned=False):
        self.path = path
        #: saved by the owning log's flush rather than on each change
        self.owned = owned
        #: entries changed since the file was last written (owned caches)
        self.unsaved = False
        #: the file existed but could not be parsed
        self.damaged = False
        #: the file existed when the cache was opened
        self.found = False
        self.entries = []
        if path is not None and os.path.exists(path):
            self.found = True
            self.entries, self.damaged = _read(path)

    @classmethod
    def for_log(cls, log):
        """The log's own cache when it keeps one, else one over a file in
        the log's directory (if it has one), else an in-memory cache."""
        own = getattr(log, "leader_epochs", None)
        if own is not None:
            return own
        if IDirectoryLog.providedBy(log):
            return cls(os.path.join(log.directory, FILE_NAME))
        return cls(None)

    def latest_epoch(self):
        return self.entries[-1][0] if self.entries else UNDEFINED

    def assign(self, epoch, start_offset):
        """Record that ``epoch`` starts at ``start_offset`` (no-op if known)."""
        if self._add(epoch, start_offset):
            self._changed()

    def _add(self, epoch, start_offset):
        if self.entries and epoch <= self.entries[-1][0]:
            return False
        # A newer epoch starting at or before an older one's start supersedes it.
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        return True

    def end_offset_for(self, epoch, log_end_offset):
        """Kafka's ``endOffsetFor``: ``(largest epoch <= epoch, its end offset)``.

        The end offset of the latest epoch is the log end; of an older one,
        the start of the next epoch. An epoch older than every entry gives
        ``(UNDEFINED, UNDEFINED)``."""
        if not self.entries:
            return UNDEFINED, UNDEFINED
        if epoch >= self.entries[-1][0]:
            return self.entries[-1][0], log_end_offset
        index = bisect_right([e for e, _ in self.entries], epoch)
        if index == 0:
            return UNDEFINED, UNDEFINED
        return self.entries[index - 1][0], self.entries[index][1]

    def epoch_for_offset(self, offset):
        """Kafka's ``epochForOffset``: the epoch ``offset`` was written in
        (the last entry starting at or before it), or None when ``offset``
        is before every entry."""
        found = None
        for epoch, start in self.entries:
            if start > offset:
                break
            found = epoch
        return found

    def truncate_from_end(self, end_offset):
        """Forget epochs that start at or after ``end_offset`` (log truncated
        there); written and fsynced at once (see the module docstring)."""
        kept = [entry for entry in self.entries if entry[1] < end_offset]
        if kept != self.entries:
            self.entries = kept
            self.save(sync=True)

    def truncate_from_start(self, start_offset):
        """Log start moved to ``start_offset``: older entries collapse into one."""
        older = [entry for entry in self.entries if entry[1] <= start_offset]
        if len(older) > 1 or older and older[-1][1] < start_offset:
            kept = [(older[-1][0], start_offset)] + self.entries[len(older) :]
            self.entries = kept
            self._changed()

    def reconcile(self, log, rescanned_from):
        """Make the entries agree with ``log`` at open (an owned cache).

        ``rescanned_from``: the offset from which an unclean open re-scanned
        the log (None after a clean stop). Returns True when the entries
        changed (the caller saves them, durably, before the log's recovery
        point is checkpointed past them)."""
        before = list(self.entries)
        has_data = log.log_end_offset > log.log_start_offset
        start = None
        if has_data and (self.damaged or not self.found and rescanned_from is not None):
            # Nothing of the file can be trusted (or there is none): every header.
            self.entries = []
            start = log.log_start_offset
            _log.warn(
                "{path}: {what}; rebuilding it from the log's batch headers",
                path=self.path,
                what="damaged" if self.damaged else "missing after an unclean shutdown",
            )
        elif rescanned_from is not None:
            start = rescanned_from
        if start is not None:
            for header in log.batch_headers(start):
                epoch = header.partition_leader_epoch
                if epoch >= 0 and epoch > self.latest_epoch():
                    self._add(epoch, header.base_offset)
        self.damaged = False
        # Entries past the recovered end name batches a crash took away.
        self.entries = [entry for entry in self.entries if entry[1] < log.log_end_offset]
        return self.entries != before

    def _changed(self):
        if self.owned:
            self.unsaved = True
        else:
            self.save(sync=True)

    def save(self, sync):
        """Write the file (atomically); ``sync``: and fsync it and its
        directory. Without, the owning log's flush syncs it (``synced``)."""
        if self.path is None:
            return
        lines = ["0", str(len(self.entries))]
        lines += [f"{epoch} {offset}" for epoch, offset in self.entries]
        atomic_write(self.path, ("\n".join(lines) + "\n").encode(), sync)
        self.unsaved = False
        self.found = True

    def fsync(self):
        """fsync the file written by ``save(sync=False)`` (its rename is
        made durable by the caller's directory fsync)."""
        if self.path is None or not self.found:
            return
        fsync_path(self.path)


def _read(path):
    """``(entries, damaged)`` of a checkpoint file."""
    with open(path, encoding="ascii", errors="replace") as handle:
        lines = handle.read().split("\n")
    try:
        if int(lines[0]) != 0:
            raise ValueError(f"version {lines[0]!r}")
        count = int(lines[1])
        entries = [tuple(int(x) for x in line.split()) for line in lines[2 : 2 + count]]
        if len(entries) != count or any(len(e) != 2 for e in entries):
            raise ValueError("short")
    except (IndexError, ValueError):
        return [], True
    return sorted(entries), False
