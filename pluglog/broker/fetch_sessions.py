"""Incremental fetch sessions (KIP-227): the broker's session cache.

A Fetch (v7+) with ``session_id`` 0 and ``session_epoch`` 0 asks for a new
session: the answer lists every requested partition, as a sessionless fetch
does, and carries the new session's id when the cache had room. Later
requests name that id and the next epoch (1, 2, ...), send only partitions
that are new or changed (fetch offset, max bytes, leader epoch, log start)
and list in ``forgotten_topics_data`` those to drop; their answers list only
partitions with records, a changed high watermark, log start offset or last
stable offset, or an error. Epoch -1 is a full sessionless fetch (and closes
the session named, if any); epoch 0 with an id closes that session and opens
a new one. A wrong id answers FETCH_SESSION_ID_NOT_FOUND, a wrong epoch
INVALID_FETCH_SESSION_EPOCH, with no partitions.

From v13 topics are named by id (KIP-516) and a session is keyed by topic
id, as Kafka's: a topic deleted and created again under the same name is
another topic, and the session's partitions of the old one answer
UNKNOWN_TOPIC_ID until the client forgets them. A session opened by id and
continued by name (or the reverse) answers FETCH_SESSION_TOPIC_ID_ERROR.

The handler (pluglog.server.handlers.fetch) asks :meth:`FetchSessionCache.context`
for a context per request. The context's ``request`` is what to read, and
its ``respond`` turns one answer's partitions into the response's and
updates the session's remembered per-partition state for what was sent; a
parked fetch calls it once, when it answers.

An incremental fetch reads only the session's *dirty* partitions, where
Kafka's broker reads all of them: each Partition knows the sessions that
hold it (``Partition.fetch_sessions``) and marks them on every change a
fetch can see (append, high watermark, log start, leadership or epoch,
ISR, going offline or deleted). A partition listed in the request is
dirty; after an answer it stays dirty unless the client is at the end of
what it may read (a consumer at the high watermark, a follower at the log
end and in the ISR) with a plain answer (no error, divergence or preferred
replica), so a byte-limited, throttled or failing partition is read again
each time. A parked fetch waits on its session (``waiters``), woken by any
mark. Marks are numbered, so a change made while a fetch is parked or in
flight is never cleared by its answer. A follower's caught-up partitions
the session does not read count as fetched at each session fetch
(:class:`FollowerClock`). Every ``SWEEP_MS`` a session reads everything.

Kafka's cache (FetchSession.scala) simplified: at most
``max.incremental.fetch.session.cache.slots`` sessions; when full, a new
session takes the slot of the session idle longest if that one was idle
over two minutes, else of the smallest session it outranks (a follower's
session outranks a consumer's, then more partitions outrank fewer; a
consumer's session never evicts a follower's), else it is not created
(the answer says session id 0 and the client keeps fetching in full).
Finding the victim walks the cache, which happens only when it is full.
"""

import random

from pluglog.broker.fetch_session_state import (
    _MAX_EPOCH,
    INITIAL_EPOCH,
    FetchSession,
    FollowerClock,
    new_entry,
    next_epoch,
    remember,
    topic_key,
)
from pluglog.errors import (
    FETCH_SESSION_ID_NOT_FOUND,
    FETCH_SESSION_TOPIC_ID_ERROR,
    INVALID_FETCH_SESSION_EPOCH,
)

FINAL_EPOCH = -1
#: Idle sessions older than this give up their slot to any new session (Kafka's value).
EVICTION_MS = 120_000
#: A session reads all its partitions at least this often, whatever its
#: dirty set says (a bound on the cost of a state change no hook reported).
SWEEP_MS = 10_000


class _Sessionless:
    """Epoch -1, or a v4-v6 request: answer every partition, no session."""

    session_waits = False
    clock = None
    memo = None

    def __init__(self, request):
        self.request = request

    def reread(self):
        return self.request

    def respond(self, topics, total):
        return 0, topics


class _Full:
    """Epoch 0: answer every partition, and open a session if there is room.

    A consumer's empty answers made by a byte limit are kept by request
    partition (``remember_empty``) and handed to the new session's entries
    with the answer: the read and the answer are in the same reactor turn,
    so nothing changed between the read and the entry watching its
    Partition."""

    session_waits = False
    #: the request's partitions are not session entries
    skips = False

    def __init__(self, cache, request, now_ms, key, read_params=None):
        self.cache = cache
        self.request = request
        self.now_ms = now_ms
        self.key = key
        self.read_params = read_params
        self.replica_id = request.get("replica_id", -1)
        #: id(request partition) -> (limit, answer) of the reads that made one
        self.empties = {}
        #: handed to the session: the first pass's follower updates point at it
        self.clock = FollowerClock() if self.replica_id >= 0 else None

    def reread(self):
        return self.request

    @property
    def memo(self):
        """What the reads tell their empty answers (a consumer's only); a
        property, not an attribute: a context referring to itself would
        live until a garbage collection, with its request."""
        return self if self.replica_id < 0 else None

    def remember_empty(self, want, part, until, answer):
        self.empties[id(want)] = (until, answer)

    def respond(self, topics, total):
        order = []
        entries = {}
        answers = {}
        firsts = {}
        for want_topic, got_topic in zip(self.request["topics"], topics):
            name = want_topic[self.key]
            for want, answer in zip(want_topic["partitions"], got_topic["partitions"]):
                key = (name, want["partition"])
                entry = entries.get(key)
                if entry is None:
                    entry = entries[key] = new_entry(want)
                    order.append((name, entry))
                    firsts[key] = want
                remember(entry, answer)
                answers[key] = answer
        session = self.cache.create(
            self.replica_id >= 0, order, self.now_ms, self.key, self.replica_id, self.clock
        )
        if session is None:
            return 0, topics
        session.read_params = self.read_params
        empties = self.empties
        for key, entry in entries.items():
            answer = answers[key]
            session.settle(key, entry, answer, None)
            empty = empties.get(id(firsts[key])) if empties else None
            # Made by this answer's read (not an earlier pass's), of this
            # entry's only request partition, and the entry watches it now.
            if empty is not None and empty[1] is answer and entry["part"] is not None:
                entry["empty_until"], entry["empty_answer"] = empty
        return session.id, topics


class _Incremental:
    """A known session at the right epoch: only what changed goes back.

    Each pass (the first, a parked fetch's re-reads, its answer) reads the
    session's dirty partitions as they are at that moment (``reread``)."""

    session_waits = True
    #: the request's partitions are the session's entries
    skips = True

    def __init__(self, session, request, max_bytes):
        self.session = session
        self.base = request
        #: the answer's byte limit (the request's, capped by fetch.max.bytes)
        self.max_bytes = max_bytes
        self.clock = session.clock if session.replica_id >= 0 else None
        self.request = self.reread()

    def reread(self):
        """The request over the partitions to read now: the dirty ones."""
        self.seen = dict(self.session.dirty)
        self.topics = self.session.topics_for(self.seen)
        return dict(self.base, topics=self.topics)

    @property
    def memo(self):
        """As :attr:`_Full.memo`, a follower's too (the handler makes and
        uses those only where the follower state allows it)."""
        return self

    @staticmethod
    def remember_empty(entry, part, until, answer):
        """Remember in a consumer's session ``entry`` that, until its
        partition changes, a read with a byte limit of at most ``until``
        answers ``answer``; pluglog.server.handlers.fetch._read_all then
        gives it without reading.

        A fetch near its response's byte limit leaves a few hundred bytes
        for every partition after the ones that filled it; each of those
        reads returns nothing (its first batch does not fit:
        ``ReadResult.needs``), and every later fetch of the session read
        them again the same way until their turn came (a consumer of
        10,000 partitions made 35,136 partition visits in the 5 fetches of
        1M records, bench/RESULTS.md). With the same offset and nothing
        changed, a read with a limit of at most ``until`` answers the same.
        The entry forgets it on every change its Partition reports
        (``FetchSession.mark``), a change of the entry by the client, the
        session's periodic sweep and a change of the request's version or
        isolation level (``FetchSession.forget_empty``); it is made only
        while the entry watches this Partition, so no change goes unseen,
        and only used after another partition returned records (else the
        read returns one whole batch whatever the limit: KIP-74)."""
        if entry["part"] is part:
            entry["empty_until"] = until
            entry["empty_answer"] = answer

    def respond(self, topics, total):
        session = self.session
        key = session.key
        seen = self.seen
        out = []
        served = []
        for want_topic, got_topic in zip(self.topics, topics):
            name = want_topic[key]
            keep = []
            for entry, answer in zip(want_topic["partitions"], got_topic["partitions"]):
                if remember(entry, answer):
                    keep.append(answer)
                    if answer["records"]:
                        served.append(entry)
                elif answer is entry["empty_answer"] and entry["empty_until"] >= 0:
                    # Unchanged since the read that made it: still unread
                    # records, the same Partition watched, the entry dirty.
                    continue
                index = entry["partition"]
                session.settle((name, index), entry, answer, seen.get((name, index)))
            if keep:
                out.append(dict(got_topic, partitions=keep))
        if served and len(served) < len(session) and total * 2 >= self.max_bytes:
            # Near the response's byte limit: the partitions further on may
            # have been left out for lack of room.
            session.rotate(served)
        return session.id, out


class FetchSessionCache:
    """The broker's sessions by id, bounded by ``slots``.

    ``lookup(key, name, index)`` finds the broker's Partition for a session
    entry (``key`` is the session's topic field); without it every fetch
    reads every partition of its session."""

    def __init__(
        self, slots, fetch_max_bytes=0x7FFFFFFF, eviction_ms=EVICTION_MS, rng=None, lookup=None
    ):
        self.slots = slots
        self.fetch_max_bytes = fetch_max_bytes
        self.eviction_ms = eviction_ms
        self.lookup = lookup
        self.sessions = {}
        #: sessions opened and evicted since start (metrics read them)
        self.created = 0
        self.evicted = 0
        self._rng = rng or random.Random()

    def __len__(self):
        return len(self.sessions)

    def parked(self):
        """The fetches parked on a session (the purgatory metric counts them)."""
        return [wake for session in self.sessions.values() for wake in session.waiters]

    def _close(self, session_id):
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.close()

    def context(self, request, version, now_ms):
        """The request's fetch context, or a top-level error code for a bad id or epoch."""
        if version < 7:
            return _Sessionless(request)
        session_id = request.get("session_id", 0)
        epoch = request.get("session_epoch", FINAL_EPOCH)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id:
                self._close(session_id)
            if epoch == FINAL_EPOCH or not self.slots:
                return _Sessionless(request)
            read_params = (version, request.get("isolation_level", 0))
            return _Full(self, request, now_ms, topic_key(version), read_params)
        session = self.sessions.get(session_id)
        if session is None:
            return FETCH_SESSION_ID_NOT_FOUND
        if epoch != session.epoch:
            return INVALID_FETCH_SESSION_EPOCH
        if session.key != topic_key(version):
            return FETCH_SESSION_TOPIC_ID_ERROR
        session.update(request["topics"], request.get("forgotten_topics_data", ()))
        session.epoch = next_epoch(epoch)
        session.last_used_ms = now_ms
        read_params = (version, request.get("isolation_level", 0))
        if read_params != session.read_params:
            session.forget_empty(read_params)
        if session.lookup is None or now_ms - session.swept_ms >= SWEEP_MS:
            # Without partitions to watch, or now and then as a safety net
            # for a change no hook reported: read every partition.
            session.mark_all()
            session.swept_ms = now_ms
        max_bytes = request.get("max_bytes", 0x7FFFFFFF)
        if max_bytes <= 0:
            max_bytes = 0x7FFFFFFF
        return _Incremental(session, request, min(max_bytes, self.fetch_max_bytes))

    def create(self, privileged, order, now_ms, key="topic", replica_id=-1, clock=None):
        """A new session over ``order``, or None when no slot can be had."""
        if len(self.sessions) >= self.slots and not self._evict(privileged, len(order), now_ms):
            return None
        session_id = 0
        while session_id == 0 or session_id in self.sessions:
            session_id = self._rng.randint(1, _MAX_EPOCH)
        session = FetchSession(session_id, privileged, order, now_ms, key, self.lookup, replica_id)
        if clock is not None:
            session.clock = clock
        self.sessions[session_id] = session
        self.created += 1
        return session

    def _evict(self, privileged, size, now_ms):
        if not self.sessions:
            return False
        idle = min(self.sessions.values(), key=lambda s: s.last_used_ms)
        victim = None
        if now_ms - idle.last_used_ms > self.eviction_ms:
            victim = idle
        else:
            rank = (privileged, size)
            lowest = min(self.sessions.values(), key=lambda s: (s.privileged, len(s), s.id))
            if (lowest.privileged, len(lowest)) < rank and (privileged or not lowest.privileged):
                victim = lowest
        if victim is None:
            return False
        self._close(victim.id)
        self.evicted += 1
        return True
