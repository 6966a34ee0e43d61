"""OpenSegments: a least-recently-used cap on segments holding file descriptors.

Kafka keeps every segment's files open; with 10,000 partitions and three
descriptors a segment that exhausts a 20,000 descriptor limit before a single
client connects. pluglog opens a segment's files when it is used (append,
read, scan, flush) and this cache closes those of the least recently used
segment once more than ``capacity`` segments hold descriptors, so open
descriptors scale with the partitions in use, not with all partitions.

A closed segment reopens transparently on its next use (its ``.log`` by path;
fetch's file ranges call ``fileno()`` at send time and ``os.dup`` it when
they have to wait, so an eviction never pulls a descriptor from under a
send). Durability is unaffected: fsync acts on the file, whichever
descriptor wrote its pages.

``capacity`` is the broker's ``log.max.open.segments``; 0 (the default)
sizes it from the process's soft descriptor limit: a sixth of it, so at
most half the descriptors (three per segment) go to segment files and the
rest stay for connections. The broker raises that soft limit to the hard
one at start (:func:`raise_descriptor_limit`).
"""

import resource
from collections import OrderedDict

#: Bounds for the automatic capacity.
MIN_AUTO = 64
MAX_AUTO = 100_000


def raise_descriptor_limit():
    """Raise the soft descriptor limit to the hard one, as the JVM does for
    Kafka (``-XX:+MaxFDLimit``, on by default) and Go's runtime does: the
    soft limit is often 1,024, which would cap the segments kept open at
    170 and make a consumer of a few hundred partitions reopen files on
    every fetch, while the hard limit is what the operator allowed.
    Returns ``(before, after)``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft, soft  # a sandbox may refuse; the soft limit stays
        return soft, hard
    return soft, soft


def auto_capacity():
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return MAX_AUTO
    return max(MIN_AUTO, min(MAX_AUTO, soft // 6))


class OpenSegments:
    """Segments with open descriptors, least recently used first."""

    def __init__(self, capacity=0):
        self.capacity = capacity if capacity > 0 else auto_capacity()
        self._open = OrderedDict()
        self.evictions = 0

    def __len__(self):
        return len(self._open)

    def touch(self, segment):
        """``segment`` is using its descriptors now; close the oldest over the cap."""
        held = self._open
        if segment in held:
            held.move_to_end(segment)
            return
        held[segment] = None
        while len(held) > self.capacity:
            victim, _ = held.popitem(last=False)
            self.evictions += 1
            victim.release_files()

    def forget(self, segment):
        """``segment`` closed its descriptors itself."""
        self._open.pop(segment, None)
