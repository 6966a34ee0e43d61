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
for a context per request. The context's ``request`` is what to read: for an
incremental fetch every partition in the session, at the offsets it last
sent. Its ``respond`` turns one answer's partitions into the response's and
updates the session's remembered per-partition state for what was sent; a
parked fetch calls it once, when it answers.

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

from pluglog.errors import (
    FETCH_SESSION_ID_NOT_FOUND,
    FETCH_SESSION_TOPIC_ID_ERROR,
    INVALID_FETCH_SESSION_EPOCH,
)

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
#: Idle sessions older than this give up their slot to any new session (Kafka's value).
EVICTION_MS = 120_000
_MAX_EPOCH = 0x7FFFFFFF


def next_epoch(epoch):
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


def _entry(want):
    """The session's copy of one request partition, with the remembered
    answer state (high watermark -1: the next answer includes it)."""
    return {
        "partition": want["partition"],
        "current_leader_epoch": want.get("current_leader_epoch", -1),
        "fetch_offset": want["fetch_offset"],
        "last_fetched_epoch": want.get("last_fetched_epoch", -1),
        "log_start_offset": want.get("log_start_offset", -1),
        "partition_max_bytes": want["partition_max_bytes"],
        "hw": -1,
        "start": -1,
        "lso": -1,
    }


def topic_key(version):
    """The request field naming a topic: its id from v13, else its name."""
    return "topic_id" if version >= 13 else "topic"


def _group(order, key="topic"):
    """Request ``topics`` entries from (topic, entry) pairs, in order."""
    topics = []
    last = None
    parts = None
    for name, entry in order:
        if name != last:
            parts = []
            topics.append({key: name, "partitions": parts})
            last = name
        parts.append(entry)
    return topics


def _remember(entry, answer):
    """Record what one answered partition told the client; True if the
    answer must list it (Kafka's CachedPartition.maybeUpdateResponseData)."""
    must = bool(answer["records"])
    hw = answer["high_watermark"]
    if hw != entry["hw"]:
        must = True
        entry["hw"] = hw
    start = answer["log_start_offset"]
    if start != entry["start"]:
        must = True
        entry["start"] = start
    lso = answer["last_stable_offset"]
    if lso != entry["lso"]:
        must = True
        entry["lso"] = lso
    if answer["error_code"]:
        # Re-sent once the error clears: the remembered watermark never matches.
        entry["hw"] = -1
        must = True
    return must


class FetchSession:
    """One session: its partitions (in fetch order) and what it last sent."""

    __slots__ = ("id", "privileged", "key", "epoch", "entries", "order", "topics", "last_used_ms")

    def __init__(self, session_id, privileged, order, now_ms, key="topic"):
        self.id = session_id
        self.privileged = privileged
        #: "topic_id" for a v13+ session (keyed by topic id), else "topic"
        self.key = key
        #: the epoch the next incremental request must carry
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.entries = {(name, entry["partition"]): entry for name, entry in order}
        self.order = order
        #: request ``topics`` over ``order``; replaced, never mutated, so a
        #: parked fetch keeps reading the partitions it was asked for
        self.topics = _group(order, key)
        self.last_used_ms = now_ms

    def __len__(self):
        return len(self.entries)

    def update(self, topics, forgotten):
        """Apply an incremental request: new and changed partitions, then the forgotten."""
        added = False
        key = self.key
        for topic in topics:
            name = topic[key]
            for want in topic["partitions"]:
                entry = self.entries.get((name, want["partition"]))
                if entry is None:
                    entry = _entry(want)
                    self.entries[(name, want["partition"])] = entry
                    self.order.append((name, entry))
                    added = True
                else:
                    entry["fetch_offset"] = want["fetch_offset"]
                    entry["last_fetched_epoch"] = want.get("last_fetched_epoch", -1)
                    entry["partition_max_bytes"] = want["partition_max_bytes"]
                    entry["current_leader_epoch"] = want.get("current_leader_epoch", -1)
                    entry["log_start_offset"] = want.get("log_start_offset", -1)
        removed = False
        for topic in forgotten:
            for index in topic["partitions"]:
                if self.entries.pop((topic[key], index), None) is not None:
                    removed = True
        if removed:
            self.order = [(n, e) for n, e in self.order if (n, e["partition"]) in self.entries]
        if added or removed:
            self.topics = _group(self.order, key)

    def rotate(self, served):
        """Move the partitions that just returned records to the end, so a
        response cut by its byte limit does not starve the later ones
        (Kafka's fairness rule for sessions)."""
        served_ids = {id(e) for e in served}
        self.order = [p for p in self.order if id(p[1]) not in served_ids] + [
            p for p in self.order if id(p[1]) in served_ids
        ]
        self.topics = _group(self.order, self.key)


class _Sessionless:
    """Epoch -1, or a v4-v6 request: answer every partition, no session."""

    def __init__(self, request):
        self.request = request

    def respond(self, topics, total):
        return 0, topics


class _Full:
    """Epoch 0: answer every partition, and open a session if there is room."""

    def __init__(self, cache, request, now_ms, key):
        self.cache = cache
        self.request = request
        self.now_ms = now_ms
        self.key = key

    def respond(self, topics, total):
        order = []
        entries = {}
        for want_topic, got_topic in zip(self.request["topics"], topics):
            name = want_topic[self.key]
            for want, answer in zip(want_topic["partitions"], got_topic["partitions"]):
                key = (name, want["partition"])
                entry = entries.get(key)
                if entry is None:
                    entry = entries[key] = _entry(want)
                    order.append((name, entry))
                _remember(entry, answer)
        privileged = self.request.get("replica_id", -1) >= 0
        session = self.cache.create(privileged, order, self.now_ms, self.key)
        return (0 if session is None else session.id), topics


class _Incremental:
    """A known session at the right epoch: only what changed goes back."""

    def __init__(self, session, request, max_bytes):
        self.session = session
        self.topics = session.topics
        self.request = dict(request, topics=session.topics)
        #: the answer's byte limit (the request's, capped by fetch.max.bytes)
        self.max_bytes = max_bytes

    def respond(self, topics, total):
        out = []
        served = []
        for want_topic, got_topic in zip(self.topics, topics):
            keep = []
            for entry, answer in zip(want_topic["partitions"], got_topic["partitions"]):
                if _remember(entry, answer):
                    keep.append(answer)
                    if answer["records"]:
                        served.append(entry)
            if keep:
                out.append(dict(got_topic, partitions=keep))
        if served and len(served) < len(self.session) and total * 2 >= self.max_bytes:
            # Near the response's byte limit: the partitions further on may
            # have been left out for lack of room.
            self.session.rotate(served)
        return self.session.id, out


class FetchSessionCache:
    """The broker's sessions by id, bounded by ``slots``."""

    def __init__(self, slots, fetch_max_bytes=0x7FFFFFFF, eviction_ms=EVICTION_MS, rng=None):
        self.slots = slots
        self.fetch_max_bytes = fetch_max_bytes
        self.eviction_ms = eviction_ms
        self.sessions = {}
        #: sessions opened and evicted since start (metrics read them)
        self.created = 0
        self.evicted = 0
        self._rng = rng or random.Random()

    def __len__(self):
        return len(self.sessions)

    def context(self, request, version, now_ms):
        """The request's fetch context, or a top-level error code for a bad id or epoch."""
        if version < 7:
            return _Sessionless(request)
        session_id = request.get("session_id", 0)
        epoch = request.get("session_epoch", FINAL_EPOCH)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id:
                self.sessions.pop(session_id, None)
            if epoch == FINAL_EPOCH or not self.slots:
                return _Sessionless(request)
            return _Full(self, request, now_ms, topic_key(version))
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
        max_bytes = request.get("max_bytes", 0x7FFFFFFF)
        if max_bytes <= 0:
            max_bytes = 0x7FFFFFFF
        return _Incremental(session, request, min(max_bytes, self.fetch_max_bytes))

    def create(self, privileged, order, now_ms, key="topic"):
        """A new session over ``order``, or None when no slot can be had."""
        if len(self.sessions) >= self.slots and not self._evict(privileged, len(order), now_ms):
            return None
        session_id = 0
        while session_id == 0 or session_id in self.sessions:
            session_id = self._rng.randint(1, _MAX_EPOCH)
        session = FetchSession(session_id, privileged, order, now_ms, key)
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
        del self.sessions[victim.id]
        self.evicted += 1
        return True
