"""FetchSessionClient: a follower's side of an incremental fetch session (KIP-227).

One per LeaderFetcher (Kafka's FetchSessionHandler). The first request is
a full one (session 0, epoch 0) listing every partition; when the leader
answers with a session id, later requests carry that id and the next epoch
and list only partitions that are new or whose fetch offset, log start,
max bytes or leader epoch changed, plus ``forgotten_topics_data`` for those
no longer fetched. The leader then answers only partitions with news, so an
idle follower of 10,000 partitions sends and receives almost nothing.

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
        #: (topic, index) -> the partition entry last sent (as a tuple)
        self.sent = {}
        self._pending = None

    def build(self, wanted):
        """``wanted``: (topic, index) -> request partition entry. Returns
        (session_id, epoch, topics, forgotten_topics_data) for the request."""
        new = {key: tuple(entry.values()) for key, entry in wanted.items()}
        if self.epoch == INITIAL_EPOCH:
            send = list(wanted)
            forgotten = []
        else:
            send = [key for key, value in new.items() if self.sent.get(key) != value]
            forgotten = [key for key in self.sent if key not in new]
        self._pending = new
        topics = {}
        for key in send:
            topics.setdefault(key[0], []).append(wanted[key])
        gone = {}
        for topic, index in forgotten:
            gone.setdefault(topic, []).append(index)
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
            self.epoch = INITIAL_EPOCH
            return False
        self.sent = self._pending or {}
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
        self.epoch = INITIAL_EPOCH
