"""The leader-epoch cache of one partition and its ``leader-epoch-checkpoint`` file.

Each entry ``(epoch, start_offset)`` says that the leader of ``epoch`` wrote
its first batch at ``start_offset`` (Kafka's LeaderEpochFileCache, KIP-101).
A leader adds ``(epoch, log end offset)`` when it takes over; a follower adds
an entry whenever a replicated batch carries a newer partitionLeaderEpoch.
OffsetForLeaderEpoch answers from it, and a follower truncates its log to the
leader's end offset of the follower's latest epoch, so a failover never leaves
divergent logs.

File format (Kafka's): a version line ``0``, a count line, then one
``epoch start_offset`` line per entry, oldest first. It is rewritten
atomically on every change; changes happen on leadership changes and
truncation, never per produce request. With ``path=None`` (memory storage)
the cache lives in memory only. Runs on the reactor thread.
"""

import os
from bisect import bisect_right

from pluglog.fileutil import atomic_write
from pluglog.interfaces import IDirectoryLog

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED = -1


class LeaderEpochCache:
    """Sorted ``(epoch, start_offset)`` entries of one partition."""

    def __init__(self, path=None):
        self.path = path
        self.entries = []
        if path is not None and os.path.exists(path):
            self.entries = _read(path)

    @classmethod
    def for_log(cls, log):
        if IDirectoryLog.providedBy(log):
            return cls(os.path.join(log.directory, FILE_NAME))
        return cls(None)

    def latest_epoch(self):
        return self.entries[-1][0] if self.entries else UNDEFINED

    def assign(self, epoch, start_offset):
        """Record that ``epoch`` starts at ``start_offset`` (no-op if known)."""
        if self.entries and epoch <= self.entries[-1][0]:
            return
        # A newer epoch starting at or before an older one's start supersedes it.
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        self._save()

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
        """Forget epochs that start at or after ``end_offset`` (log truncated there)."""
        kept = [entry for entry in self.entries if entry[1] < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def truncate_from_start(self, start_offset):
        """Log start moved to ``start_offset``: older entries collapse into one."""
        older = [entry for entry in self.entries if entry[1] <= start_offset]
        if len(older) > 1 or older and older[-1][1] < start_offset:
            kept = [(older[-1][0], start_offset)] + self.entries[len(older) :]
            self.entries = kept
            self._save()

    def _save(self):
        if self.path is None:
            return
        lines = ["0", str(len(self.entries))]
        lines += [f"{epoch} {offset}" for epoch, offset in self.entries]
        atomic_write(self.path, ("\n".join(lines) + "\n").encode())


def _read(path):
    with open(path, encoding="ascii") as handle:
        lines = handle.read().split("\n")
    try:
        count = int(lines[1])
        entries = [tuple(int(x) for x in line.split()) for line in lines[2 : 2 + count]]
    except (IndexError, ValueError):
        # A damaged checkpoint only costs a wider truncation check: start empty.
        return []
    return sorted(e for e in entries if len(e) == 2)
