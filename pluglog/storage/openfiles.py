"""OpenSegments: a least-recently-used budget of descriptors held by segment files.

Kafka keeps every segment's files open; with 10,000 partitions and three
descriptors a segment that exhausts a 20,000 descriptor limit before a single
client connects. pluglog opens a segment's files when it is used (append,
read, scan, flush) and this cache closes those of the least recently used
segments once the segment files together hold more than ``budget``
descriptors, so open descriptors scale with the partitions in use, not with
all partitions.

The budget counts descriptors actually held, not segments: every open and
close of a segment's ``.log``, ``.index``, ``.timeindex`` and ``.txnindex``
goes through its :class:`Descriptors`, which reports it here. A segment a
consumer reads holds one descriptor (its ``.log``); only segments being
written hold their index files too. (Counting three per segment, as this
cache first did, kept 3,333 segments open for 3,344 descriptors under a
20,000 limit, and a consumer cycling through 10,000 partitions then opened
one file and closed another on every read: bench/RESULTS.md.)

A closed segment reopens transparently on its next use (its ``.log`` by path;
fetch's file ranges call ``fileno()`` each time they send, also when queued
behind a slow socket, so an eviction never pulls a descriptor from under a
send, and queued answers hold no descriptors of their own). Durability is
unaffected: fsync acts on the file, whichever descriptor wrote its pages
(a ``.txnindex`` is fsynced before its descriptor is closed).

The budget (:func:`descriptor_budget`): the broker's ``log.max.open.files``;
else three descriptors per segment of ``log.max.open.segments`` (the older
key, whose bound on descriptors it keeps); else (both 0, the default) the
process's soft descriptor limit less a reserve for sockets and everything
else (a quarter of it, at least :data:`RESERVE_MIN`). The broker raises
that soft limit to the hard one at start (:func:`raise_descriptor_limit`).
Should an open still fail with EMFILE/ENFILE (connections used more than
the reserve), the oldest half of the held descriptors is closed and the
open retried once, rather than failing the read or append.
"""

import errno
import os
import resource
from collections import OrderedDict

#: Bounds for the automatic budget (descriptors).
MIN_AUTO = 64
MAX_AUTO = 300_000
#: What the automatic budget leaves for sockets, checkpoints, children's
#: pipes and the rest: a quarter of the limit, at least this.
RESERVE_MIN = 512
#: Descriptors a segment holds with its .log, .index and .timeindex open:
#: what ``log.max.open.segments`` is converted at.
PER_SEGMENT = 3

_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE)


def raise_descriptor_limit():
    """Raise the soft descriptor limit to the hard one, as the JVM does for
    Kafka (``-XX:+MaxFDLimit``, on by default) and Go's runtime does: the
    soft limit is often 1,024, which would leave segment files 512
    descriptors and make a consumer of a few hundred partitions reopen files
    on every fetch, while the hard limit is what the operator allowed.
    Returns ``(before, after)``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft, soft  # a sandbox may refuse; the soft limit stays
        return soft, hard
    return soft, soft


def auto_budget():
    """The soft descriptor limit less the reserve, within the bounds."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return MAX_AUTO
    reserve = max(RESERVE_MIN, soft // 4)
    return max(MIN_AUTO, min(MAX_AUTO, soft - reserve))


def descriptor_budget(max_open_files=0, max_open_segments=0):
    """The budget from the two settings (see the module docstring)."""
    if max_open_files > 0:
        return max_open_files
    if max_open_segments > 0:
        return PER_SEGMENT * max_open_segments
    return auto_budget()


class Descriptors:
    """One segment's descriptors: opened and closed here, counted by the cache."""

    __slots__ = ("cache", "owner")

    def __init__(self, cache, owner):
        self.cache = cache
        self.owner = owner

    def open(self, path, flags, mode=0o644):
        return self.cache.open(self.owner, path, flags, mode)

    def close(self, fd):
        try:
            os.close(fd)
        finally:
            self.cache.closed(self.owner)


class _Uncounted:
    """Descriptors of a segment outside any cache (tools, tests)."""

    __slots__ = ()

    @staticmethod
    def open(path, flags, mode=0o644):
        return os.open(path, flags, mode)

    @staticmethod
    def close(fd):
        os.close(fd)


UNCOUNTED = _Uncounted()


class OpenSegments:
    """Segments holding descriptors, least recently used first, with the
    descriptors each holds; ``held`` is their sum, kept at or under
    ``budget`` (a segment being used is never closed, so one segment alone
    may exceed a budget smaller than its own files)."""

    def __init__(self, budget=0, max_open_segments=0):
        self.budget = descriptor_budget(budget, max_open_segments)
        self._open = OrderedDict()  # segment -> descriptors it holds
        self.held = 0
        self.evictions = 0
        #: opens that failed with EMFILE/ENFILE and were retried after closing half
        self.out_of_descriptors = 0
        self._evicting = False

    def __len__(self):
        return len(self._open)

    def descriptors(self, segment):
        """The :class:`Descriptors` through which ``segment`` opens its files."""
        return Descriptors(self, segment)

    def touch(self, segment):
        """``segment`` is using its descriptors now: it is the most recent."""
        if segment in self._open:
            self._open.move_to_end(segment)

    def open(self, segment, path, flags, mode=0o644):
        """``os.open`` for ``segment``, counted; on EMFILE/ENFILE close the
        oldest half of the held descriptors and try once more. Room is made
        before the open, so the descriptors held never exceed the budget,
        not even for the moment between an open and an eviction."""
        if self.held >= self.budget and not self._evicting:
            self._evict(self.budget - 1, keep=segment)
        try:
            fd = os.open(path, flags, mode)
        except OSError as exc:
            if exc.errno not in _OUT_OF_FDS or not self._open:
                raise
            self.out_of_descriptors += 1
            self._evict(self.held // 2, keep=segment)
            fd = os.open(path, flags, mode)
        self.opened(segment)
        return fd

    def opened(self, segment):
        """``segment`` opened one more descriptor: count it, make the segment
        the most recent and close the oldest others' over the budget."""
        held = self._open
        held[segment] = held.get(segment, 0) + 1
        self.held += 1
        if self._evicting:
            return  # a victim writing its pending index entries as it closes
        held.move_to_end(segment)
        if self.held > self.budget:
            self._evict(self.budget, keep=segment)

    def closed(self, segment):
        """``segment`` closed one of its descriptors."""
        count = self._open.get(segment)
        if count is None:
            return
        self.held -= 1
        if count > 1:
            self._open[segment] = count - 1
        else:
            del self._open[segment]

    def _evict(self, target, keep):
        """Close the least recently used segments' files (never ``keep``'s)
        until at most ``target`` descriptors are held."""
        held = self._open
        # A victim's pending index entries may need an open (even one that
        # meets EMFILE and evicts in turn): the flag covers the nesting.
        evicting, self._evicting = self._evicting, True
        try:
            while self.held > target and held:
                victim = next(iter(held))
                if victim is keep:
                    if len(held) == 1:
                        break
                    held.move_to_end(keep)
                    continue
                self.evictions += 1
                try:
                    victim.release_files()
                finally:
                    # Whatever it failed to close is no longer ours to count.
                    self.held -= held.pop(victim, 0)
        finally:
            self._evicting = evicting

    def forget(self, segment):
        """``segment`` closed its descriptors itself (close, delete)."""
        self.held -= self._open.pop(segment, 0)
