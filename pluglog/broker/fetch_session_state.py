"""One incremental fetch session's state (KIP-227): its partitions, what it
last sent each, and its dirty set.

pluglog.broker.fetch_sessions owns the cache and the per-request contexts;
this module owns a :class:`FetchSession`: the partition entries in fetch
order, the remembered answer state per partition (Kafka's CachedPartition),
the dirty set the broker's Partitions feed (``mark``) and the parked fetches
waiting on it, and the :class:`FollowerClock` a follower's omitted
partitions count their fetches by.
"""

INITIAL_EPOCH = 0
_MAX_EPOCH = 0x7FFFFFFF


def next_epoch(epoch):
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


def new_entry(want):
    """The session's copy of one request partition, with the remembered
    answer state (high watermark -1: the next answer includes it), its
    place in the session's order, the Partition it watches, and the empty
    answer a read with a small byte limit gives until the partition changes
    (``empty_until`` -1: none; pluglog.broker.fetch_sessions, ``remember_empty``)."""
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
        "pos": 0,
        "part": None,
        "empty_until": -1,
        "empty_answer": None,
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


def remember(entry, answer):
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
    if answer.get("diverging_epoch") or answer.get("preferred_read_replica", -1) >= 0:
        must = True  # KIP-320 / KIP-392: the fetcher must act on it
    return must


class FollowerClock:
    """When a follower's session last fetched (its first pass). Kafka
    updates a follower's fetch state for every partition of its session on
    each fetch, the omitted ones at their cached offset; here a caught-up
    partition the session does not read points its RemoteReplica at this
    clock instead (pluglog.broker.remote_replica.RemoteReplica), so the ISR lag
    check sees it fetched at each of the session's fetches."""

    __slots__ = ("fetch_ms",)

    def __init__(self):
        self.fetch_ms = -1


class FetchSession:
    """One session: its partitions (in fetch order), what it last sent, and
    which partitions need reading on its next fetch."""

    __slots__ = (
        "id",
        "privileged",
        "replica_id",
        "key",
        "epoch",
        "entries",
        "order",
        "topics",
        "last_used_ms",
        "lookup",
        "dirty",
        "seq",
        "waiters",
        "clock",
        "swept_ms",
        "closed",
        "read_params",
    )

    def __init__(
        self, session_id, privileged, order, now_ms, key="topic", lookup=None, replica_id=-1
    ):
        self.id = session_id
        self.privileged = privileged
        self.replica_id = replica_id
        #: "topic_id" for a v13+ session (keyed by topic id), else "topic"
        self.key = key
        #: the epoch the next incremental request must carry
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.entries = {(name, entry["partition"]): entry for name, entry in order}
        self.order = order
        #: request ``topics`` over ``order``; replaced, never mutated, so a
        #: parked fetch keeps reading the partitions it was asked for
        self.topics = _group(order, key)
        for pos, (_name, entry) in enumerate(order):
            entry["pos"] = pos
        self.last_used_ms = now_ms
        #: ``lookup(key, name, index)``: the broker's Partition, or None
        self.lookup = lookup
        #: key -> mark number: partitions the next fetch reads (changed since
        #: their last answer, or that answer was not the end of the story)
        self.dirty = {}
        self.seq = 0
        #: parked fetches of this session, called on every mark
        self.waiters = []
        self.clock = FollowerClock()
        self.swept_ms = now_ms
        self.closed = False
        #: what, besides the entries, decides a read (see :meth:`forget_empty`)
        self.read_params = None

    def __len__(self):
        return len(self.entries)

    # -- the dirty set ------------------------------------------------------------

    def mark(self, key):
        """The partition ``key`` changed (called by the Partition it watches)."""
        entry = self.entries.get(key)
        if entry is not None:
            entry["empty_until"] = -1
            self.seq += 1
            self.dirty[key] = self.seq
            if self.waiters:
                for wake in list(self.waiters):
                    wake()

    def mark_all(self):
        self.seq += 1
        self.dirty = dict.fromkeys(self.entries, self.seq)
        for entry in self.entries.values():
            entry["empty_until"] = -1

    def forget_empty(self, read_params):
        """Forget every entry's remembered empty answer: the request's
        parameters that decide a read besides the entry (``read_params``:
        the version and isolation level) changed."""
        self.read_params = read_params
        for entry in self.entries.values():
            entry["empty_until"] = -1

    def topics_for(self, keys):
        """Request ``topics`` over ``keys`` (a subset of the entries), in session order."""
        entries = self.entries
        if len(keys) == len(entries):
            return self.topics
        ordered = sorted(keys, key=lambda k: entries[k]["pos"])
        return _group([(k[0], entries[k]) for k in ordered], self.key)

    def settle(self, key, entry, answer, seen):
        """After ``entry`` was answered with ``answer`` from a read that saw
        mark ``seen`` (None: not marked): watch its Partition, and keep it
        dirty unless the client has all there is and nothing changed since."""
        if self.entries.get(key) is not entry:
            return  # forgotten meanwhile (a second fetch of the session)
        lookup = self.lookup
        part = None if lookup is None else lookup(self.key, key[0], key[1])
        old = entry["part"]
        if old is not part:
            if old is not None:
                old.fetch_sessions.pop(self, None)
            entry["part"] = part
            if part is not None and not self.closed:
                part.fetch_sessions[self] = key
        if self._settled(entry, answer, part):
            if seen is not None and self.dirty.get(key) == seen:
                del self.dirty[key]
        elif key not in self.dirty:
            self.seq += 1
            self.dirty[key] = self.seq

    def _settled(self, entry, answer, part):
        """The client is at the end of what it may read and the answer was
        plain: until the partition changes, reading it again answers the same."""
        if (
            part is None
            or answer["error_code"]
            or answer.get("diverging_epoch")
            or answer.get("preferred_read_replica", -1) >= 0
        ):
            return False
        offset = entry["fetch_offset"]
        if self.replica_id >= 0:
            # A follower: at the log end, and in the ISR (out of it, every
            # fetch must reach update_follower, which asks to add it back).
            return offset >= part.log.log_end_offset and self.replica_id in part.isr
        # A consumer reads below the high watermark (read_committed: the LSO,
        # never above it; one below the HW stays dirty, read each time).
        return offset >= answer["high_watermark"]

    def close(self):
        """Out of the cache: stop watching its partitions."""
        self.closed = True
        for entry in self.entries.values():
            part = entry["part"]
            if part is not None:
                part.fetch_sessions.pop(self, None)
                entry["part"] = None
        self.dirty = {}

    def _forget(self, key):
        entry = self.entries.pop(key, None)
        if entry is None:
            return False
        self.dirty.pop(key, None)
        part = entry["part"]
        if part is not None:
            part.fetch_sessions.pop(self, None)
            if self.replica_id >= 0:
                # No longer fetched through this session: its lag counts from now.
                part.follower_left_session(self.replica_id, self.clock)
        return True

    # -- requests -------------------------------------------------------------------

    def update(self, topics, forgotten):
        """Apply an incremental request: new and changed partitions, then the forgotten."""
        added = False
        key = self.key
        for topic in topics:
            name = topic[key]
            for want in topic["partitions"]:
                index = want["partition"]
                entry = self.entries.get((name, index))
                if entry is None:
                    entry = new_entry(want)
                    entry["pos"] = len(self.order)
                    self.entries[(name, index)] = entry
                    self.order.append((name, entry))
                    added = True
                else:
                    entry["fetch_offset"] = want["fetch_offset"]
                    entry["last_fetched_epoch"] = want.get("last_fetched_epoch", -1)
                    entry["partition_max_bytes"] = want["partition_max_bytes"]
                    entry["current_leader_epoch"] = want.get("current_leader_epoch", -1)
                    entry["log_start_offset"] = want.get("log_start_offset", -1)
                    entry["empty_until"] = -1
                self.seq += 1
                self.dirty[(name, index)] = self.seq
        removed = False
        for topic in forgotten:
            for index in topic["partitions"]:
                if self._forget((topic[key], index)):
                    removed = True
        if removed:
            self.order = [(n, e) for n, e in self.order if (n, e["partition"]) in self.entries]
            for pos, (_name, entry) in enumerate(self.order):
                entry["pos"] = pos
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
        for pos, (_name, entry) in enumerate(self.order):
            entry["pos"] = pos
        self.topics = _group(self.order, self.key)
