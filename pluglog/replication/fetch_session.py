"""FetchSessionClient: a follower's side of an incremental fetch session (KIP-227).

One per LeaderFetcher (Kafka's FetchSessionHandler). The first request is
a full one (session 0, epoch 0) listing every partition; when the leader
answers with a session id, later requests carry that id and the next epoch
and list only partitions that are new or whose fetch offset, log start,
max bytes or leader epoch changed, plus ``forgotten_topics_data`` for those
no longer fetched. The leader then answers only partitions with news, so an
idle follower of 10,000 partitions sends and receives almost nothing.

The follower's own work is kept as small: the fetcher ``mark``s a partition
whenever its fetch state may have changed (an append, a truncation, a moved
log start, added, removed), and an incremental ``build`` looks only at the
marked ones (Kafka's Builder compares every partition on every fetch).
A full request still lists every partition.

A session error in the answer (unknown id: the leader restarted or evicted
it; wrong epoch) or a failed request starts over with a full fetch: epoch 0
with the old id, which also closes the old session on the leader.
"""

from pluglog.errors import FETCH_SESSION_ID_NOT_FOUND, NONE

INITIAL_EPOCH = 0
_MAX_EPOCH = 0x7FFFFFFF


class FetchSessionClient:
    """Which partitions a fetch lists, and the session id and epoch it carries."""

    def __init__(self):
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        #: (topic, index) -> the partition entry the leader's session holds (as a tuple)
        self.sent = {}
        #: partitions whose entry may differ from ``sent`` (or that came or went)
        self.changed = set()
        #: (full?, entries) the request in flight would make ``sent``
        self._pending = None
        self._taken = set()

    def mark(self, key):
        """``key``'s fetch state may have changed: the next build looks at it."""
        self.changed.add(key)

    def mark_all(self, keys):
        """Look at ``keys`` and everything in the session next time."""
        self.changed.update(keys)
        self.changed.update(self.sent)

    def build(self, keys, entry):
        """``keys``: the partitions fetched now (a set); ``entry(key)``: its
        request partition entry. Returns (session_id, epoch, topics,
        forgotten_topics_data) for the request."""
        taken, self.changed = self.changed, set()
        self._taken = taken
        topics = {}
        gone = {}
        if self.epoch == INITIAL_EPOCH:
            new = {}
            for key in keys:
                value = entry(key)
                new[key] = tuple(value.values())
                topics.setdefault(key[0], []).append(value)
            self._pending = (True, new)
        else:
            updates = {}
            sent = self.sent
            for key in taken:
                if key in keys:
                    value = entry(key)
                    as_sent = tuple(value.values())
                    if sent.get(key) != as_sent:
                        updates[key] = as_sent
                        topics.setdefault(key[0], []).append(value)
                elif key in sent:
                    updates[key] = None
                    gone.setdefault(key[0], []).append(key[1])
            self._pending = (False, updates)
        return (
            self.session_id,
            self.epoch,
            [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            [{"topic": t, "partitions": ps} for t, ps in gone.items()],
        )

    def handle_response(self, response):
        """Move the session on after an answer; False when it was a session
        error (the answer has no partitions and the next fetch is full)."""
        code = response.get("error_code", NONE)
        if code != NONE:
            if code == FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = 0
            self._restart()
            return False
        full, entries = self._pending or (False, {})
        self._pending = None
        if full:
            self.sent = entries
        else:
            for key, value in entries.items():
                if value is None:
                    self.sent.pop(key, None)
                else:
                    self.sent[key] = value
        session_id = response.get("session_id", 0)
        if session_id == 0:
            # No session (the leader's cache is full, or it closed ours): full again.
            self.session_id, self.epoch = 0, INITIAL_EPOCH
        elif self.epoch == INITIAL_EPOCH:
            self.session_id, self.epoch = session_id, 1
        else:
            self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1
        return True

    def request_failed(self):
        """The answer never came: the leader's epoch is unknown, start over."""
        self._restart()

    def _restart(self):
        # The next request is full; what it took stays marked all the same.
        self.epoch = INITIAL_EPOCH
        self.changed |= self._taken
        self._taken = set()
        self._pending = None
