"""LeaderFetcher: a follower's replication loop for the partitions one leader leads.

``num.replica.fetchers`` fetchers per leader broker, one connection and
fetch session each (Kafka's ReplicaFetcherThread, on the reactor instead of
a thread). For each
partition handed to it, it first truncates the local log where it diverges
from the leader's (OffsetForLeaderEpoch with the follower's latest epoch,
then truncation to the smaller of the two end offsets for that epoch, as
KIP-101/KIP-279 do), then fetches in a loop with ``replica_id`` = this
broker's id and the partition's current leader epoch, appending what comes
back unchanged (offsets and leader epochs kept) and following the leader's
high watermark. Fetches use an incremental fetch session (KIP-227,
replication/fetch_session.py): after the first, only partitions whose
offsets changed are listed, and only those with news come back. The
fetcher's own work per fetch follows the partitions that changed too: it
keeps which partitions await truncation and which are fetched, and marks a
partition in the session when its fetch state may have moved (here, or
through ``Partition._wake`` on a truncation or a moved log start, as the
fetcher sits in the partition's ``fetch_sessions``); every RECHECK_MS, and
while a replication throttle is set, it looks at all of them. The leader
parks a caught-up fetch for
``replica.fetch.wait.max.ms``; its next append answers it at once, so the
loop costs nothing while idle and reacts within a round trip under load.

Errors back off for ``replica.fetch.backoff.ms``: a connection failure
reconnects (to the leader's current address from the coordinator), a
fenced or unknown epoch waits for the coordinator's newer state, which
re-adds the partition.
"""

from twisted.internet import defer, task
from twisted.logger import Logger

from pluglog import protocol as codec
from pluglog.errors import (
    FENCED_LEADER_EPOCH,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_OR_PARTITION,
    KafkaError,
)
from pluglog.replication import peer
from pluglog.replication.epochs import UNDEFINED
from pluglog.replication.fetch_session import FetchSessionClient

log = Logger()

FETCH_VERSION = 11
#: Every so often a fetch looks at every partition anyway: a safety net for
#: a change no mark reported (as the leader's sessions sweep, SWEEP_MS).
RECHECK_MS = 10_000
EPOCH_VERSION = 3


class LeaderFetcher:
    """Replicates every partition this broker follows from ``leader_id``."""

    def __init__(self, manager, leader_id, fetcher_id=0):
        self.manager = manager
        self.broker = manager.broker
        self.reactor = manager.reactor
        self.config = manager.config
        self.leader_id = leader_id
        #: this fetcher's place in ``manager.fetchers``: (leader, fetcher id)
        self.key = (leader_id, fetcher_id)
        #: (topic, index) -> [Partition, needs_truncation, leader_epoch]
        self.partitions = {}
        #: keys whose entry needs truncation first / is fetched (entry[1] split)
        self._truncating = set()
        self._fetchable = set()
        self._max_bytes = None
        self._was_limited = False
        self._checked_ms = None
        self.conn = None
        self.running = False
        self._address = None
        #: the incremental fetch session with the leader (KIP-227)
        self.session = FetchSessionClient()

    def add(self, part):
        key = (part.topic, part.index)
        entry = self.partitions.get(key)
        if entry is None or entry[0] is not part or entry[2] != part.leader_epoch:
            if entry is not None:
                entry[0].fetch_sessions.pop(self, None)
            self.partitions[key] = [part, True, part.leader_epoch]
            # Partition._wake marks this fetcher's session (Partition.fetch_sessions).
            part.fetch_sessions[self] = key
            self._needs_truncation(key)
        if not self.running:
            self.running = True
            self._run().addErrback(
                lambda f: log.failure("fetcher for broker {id} died", f, id=self.leader_id)
            )

    def remove(self, key):
        entry = self.partitions.pop(key, None)
        if entry is not None:
            entry[0].fetch_sessions.pop(self, None)
        self._truncating.discard(key)
        self._fetchable.discard(key)
        self.session.mark(key)

    def stop(self):
        self.running = False
        for key in list(self.partitions):
            self.remove(key)
        self._drop_connection()

    def mark(self, key):
        """The partition's log changed (``Partition._wake``): look at it next fetch."""
        self.session.mark(key)

    def _needs_truncation(self, key):
        self.partitions[key][1] = True
        self._fetchable.discard(key)
        self._truncating.add(key)
        self.session.mark(key)

    def _truncated(self, key):
        self.partitions[key][1] = False
        self._truncating.discard(key)
        self._fetchable.add(key)
        self.session.mark(key)

    def brokers_changed(self):
        if self._address is not None and self._leader_address() != self._address:
            self._drop_connection()

    # -- loop ----------------------------------------------------------------------

    def _leader_address(self):
        for node, host, port, _rack in self.broker.coordinator.brokers():
            if node == self.leader_id:
                return host, port
        return None

    def _drop_connection(self):
        conn, self.conn = self.conn, None
        self._address = None
        if conn is not None:
            conn.close()

    @defer.inlineCallbacks
    def _connection(self):
        if self.conn is not None and self.conn.connected:
            return self.conn
        address = self._leader_address()
        if address is None:
            raise KafkaError(f"leader {self.leader_id} is not registered")
        timeout = self.config.replica_socket_timeout_ms / 1000.0
        # The leader's endpoint on the inter-broker listener, over TLS and
        # logged in when that listener asks for it.
        self.conn = yield peer.connect(
            self.reactor,
            self.config,
            address[0],
            address[1],
            client_id=f"replica-{self.broker.node_id}",
            timeout=timeout,
        )
        self._address = address
        return self.conn

    @defer.inlineCallbacks
    def _run(self):
        backoff = self.config.replica_fetch_backoff_ms / 1000.0
        while self.running and self.partitions:
            try:
                conn = yield self._connection()
                if self._truncating:
                    yield self._truncate(conn, list(self._truncating))
                ok = False
                if self._fetchable:
                    ok = yield self._fetch(conn, self._fetchable)
                if not ok:
                    # Nothing fetchable, or an error: do not spin on the leader.
                    yield task.deferLater(self.reactor, backoff, lambda: None)
            except Exception as exc:  # connection refused, timeout, leader gone
                if self.running:
                    log.info(
                        "replica fetch from broker {id} failed ({exc}); retrying",
                        id=self.leader_id,
                        exc=exc,
                    )
                self._drop_connection()
                yield task.deferLater(self.reactor, backoff, lambda: None)
        self.running = False
        if self.manager.fetchers.get(self.key) is self and not self.partitions:
            del self.manager.fetchers[self.key]
            self._drop_connection()

    # -- truncation ------------------------------------------------------------------

    def _topics(self, keys, fields):
        """Request ``topics`` entries: ``fields(part)`` per partition, grouped by topic."""
        topics = {}
        for key in keys:
            part = self.partitions[key][0]
            entry = {"partition": key[1], "current_leader_epoch": part.leader_epoch}
            entry.update(fields(part))
            topics.setdefault(key[0], []).append(entry)
        return [{"topic": t, "partitions": ps} for t, ps in topics.items()]

    @defer.inlineCallbacks
    def _truncate(self, conn, keys):
        body = {
            "replica_id": self.broker.node_id,
            "topics": self._topics(keys, lambda p: {"leader_epoch": p.epochs.latest_epoch()}),
        }
        response = yield conn.request(codec.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION, body)
        for topic in response["topics"]:
            for answer in topic["partitions"]:
                key = (topic["topic"], answer["partition"])
                entry = self.partitions.get(key)
                if entry is None:
                    continue
                part = entry[0]
                if answer["error_code"] != NONE:
                    log.info(
                        "{key}: OffsetForLeaderEpoch error {code}; waiting for new state",
                        key=key,
                        code=answer["error_code"],
                    )
                    continue
                end = part.log.log_end_offset
                if answer["leader_epoch"] == UNDEFINED or answer["end_offset"] < 0:
                    # The leader knows no epoch this old: keep what is committed.
                    target = min(part.high_watermark, end)
                    if part.epochs.latest_epoch() == UNDEFINED:
                        target = end  # nothing written under any epoch here yet
                else:
                    _epoch, mine = part.epochs.end_offset_for(answer["leader_epoch"], end)
                    target = min(answer["end_offset"], end, mine if mine >= 0 else end)
                if target < end:
                    log.info(
                        "{topic}-{index}: truncating {end} -> {target} (leader epoch {epoch})",
                        topic=key[0],
                        index=key[1],
                        end=end,
                        target=target,
                        epoch=answer["leader_epoch"],
                    )
                    part.truncate_to(target)
                self._truncated(key)

    # -- fetch -------------------------------------------------------------------------

    def _throttled(self, part):
        """Kafka's follower-side rule: a listed replica that is not in sync."""
        node = self.broker.node_id
        return (
            self.manager.follower_throttle.limited
            and node not in part.isr
            and part.config.throttled("follower", part.index, node)
        )

    @defer.inlineCallbacks
    def _fetch(self, conn, keys):
        """One Fetch for ``keys`` (the fetched set); True when it went well."""
        throttle = self.manager.follower_throttle
        throttled = set()
        max_bytes = self.config.replica_fetch_max_bytes
        now = self.broker.now_ms()
        if (
            max_bytes != self._max_bytes
            or self._checked_ms is None
            or (now - self._checked_ms >= RECHECK_MS)
        ):
            # A dynamic config change (every entry differs), or the safety net.
            self._max_bytes, self._checked_ms = max_bytes, now
            self.session.mark_all(keys)
        limited = throttle.limited
        if limited or self._was_limited:
            # Which partitions are left out depends on the quota window, so
            # while a throttle is configured (and once after) every partition
            # is looked at.
            self._was_limited = limited
            self.session.mark_all(keys)
        if limited:
            throttled = {key for key in keys if self._throttled(self.partitions[key][0])}
            if throttled and throttle.exceeded(now):
                keys = keys - throttled
                if not keys:
                    return False  # wait a backoff for the quota window to move on

        def entry(key):
            part = self.partitions[key][0]
            return {
                "partition": key[1],
                "current_leader_epoch": part.leader_epoch,
                "fetch_offset": part.log.log_end_offset,
                "log_start_offset": part.log.log_start_offset,
                "partition_max_bytes": max_bytes,
            }

        # KIP-227: only partitions whose state changed are listed.
        session_id, epoch, topics, forgotten = self.session.build(keys, entry)
        body = {
            "replica_id": self.broker.node_id,
            "max_wait_ms": self.config.replica_fetch_wait_max_ms,
            "min_bytes": 1,
            "max_bytes": max(self.config.replica_fetch_max_bytes, 1 << 20) * 10,
            "isolation_level": 0,
            "session_id": session_id,
            "session_epoch": epoch,
            "topics": topics,
            "forgotten_topics_data": forgotten,
            "rack_id": "",
        }
        try:
            response = yield conn.request(codec.FETCH, FETCH_VERSION, body)
        except Exception:
            self.session.request_failed()
            raise
        if not self.session.handle_response(response):
            log.info(
                "fetch session with broker {id}: error {code}; fetching in full",
                id=self.leader_id,
                code=response["error_code"],
            )
            return True  # the next fetch, a full one, goes at once
        ok = True
        now = self.broker.now_ms()
        for topic in response["responses"]:
            for answer in topic["partitions"]:
                key = (topic["topic"], answer["partition_index"])
                entry = self.partitions.get(key)
                if entry is None:
                    continue
                if key in throttled and answer["records"]:
                    throttle.record(len(answer["records"]), now)
                # An answer may move the fetch offset or log start: look again.
                self.session.mark(key)
                ok = self._apply(entry, key, answer, now) and ok
        return ok

    def _apply(self, entry, key, answer, now):
        part = entry[0]
        code = answer["error_code"]
        if code == NONE:
            records = answer["records"]
            try:
                part.append_replicated(records or b"", answer["high_watermark"], now)
                leader_start = answer["log_start_offset"]
                if part.log.log_start_offset < leader_start <= part.log.log_end_offset:
                    # DeleteRecords or retention on the leader moved its log start.
                    part.log.delete_records_before(leader_start)
                    part.log_start_moved()
            except KafkaError as exc:
                log.error("{key}: replicated data refused: {exc}", key=key, exc=exc)
                self._needs_truncation(key)
                return False
            return True
        if code == OFFSET_OUT_OF_RANGE:
            # The leader's log starts after ours ends (or ends before it):
            # truncate with the epoch check again, or start at its log start.
            leader_start = answer["log_start_offset"]
            if leader_start > part.log.log_end_offset:
                part.restart_at(leader_start)
            else:
                self._needs_truncation(key)
            return False
        if code in (FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION):
            # This follower's view is stale or the leader's is: the coordinator's
            # next state event re-adds the partition.
            self.remove(key)
            self.reactor.callLater(
                self.config.replica_fetch_backoff_ms / 1000.0, self.manager.refresh, *key
            )
            return False
        if code == UNKNOWN_LEADER_EPOCH:
            return False  # the leader has not applied the new epoch yet
        log.info("{key}: replica fetch error {code}", key=key, code=code)
        return False
