"""A consumer-group member on the reactor (Kafka's classic, eager protocol).

:class:`GroupMember` finds the coordinator (FindCoordinator), joins
(JoinGroup, answering MEMBER_ID_REQUIRED), runs the chosen assignor when it
is the leader, takes its assignment from SyncGroup and heartbeats every
``heartbeat.interval.ms`` on the reactor clock over its own connection
(``"group"``), so long-poll fetches never delay a heartbeat. A heartbeat or
commit answer of REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION or
UNKNOWN_MEMBER_ID starts a rejoin: the consumer's partitions are revoked
first (auto commit, ``on_partitions_revoked``), then assigned again
(``on_partitions_assigned``), and positions restart from committed offsets.

Static membership: with ``group.instance.id`` the member joins under that
id and does not send LeaveGroup when it stops (Kafka's behaviour), so a
restart within ``session.timeout.ms`` gets its partitions back without a
rebalance.
"""

from twisted.internet import defer, task
from twisted.logger import Logger

from pluglog.client import assignors
from pluglog.client.cluster import TopicPartition
from pluglog.client.config import ms
from pluglog.client.errors import (
    BrokerResponseError,
    KafkaClientError,
    KafkaConnectionError,
    RequestTimedOutError,
)
from pluglog.errors import ConfigError
from pluglog.protocol.api_keys import HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP
from pluglog.protocol.errors import DecodeError

log = Logger()

COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82

_COORDINATOR_ERRORS = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
_REJOIN_ERRORS = {ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS}


class GroupMember:
    """Membership of one consumer in ``group.id`` (see module docstring)."""

    def __init__(self, reactor, client, config, consumer):
        self.reactor = reactor
        self.client = client
        self.config = config
        self.consumer = consumer
        self.group_id = config["group.id"]
        self.instance_id = config["group.instance.id"]
        strategies = config["partition.assignment.strategy"]
        if isinstance(strategies, str):
            strategies = [s.strip() for s in strategies.split(",") if s.strip()]
        for name in strategies:
            if name not in assignors.ASSIGNORS:
                raise ConfigError(
                    f"partition.assignment.strategy={name!r}: expected one of "
                    f"{', '.join(sorted(assignors.ASSIGNORS))}"
                )
        self.strategies = list(strategies)
        self.topics = []
        self.member_id = ""
        self.generation = -1
        self.assigned = []
        self._coordinator_id = None
        self._heartbeat = None
        self._joining = None
        self._needs_rejoin = False
        self._stopped = False

    def identity(self):
        return self.generation, self.member_id, self.instance_id

    # -- coordinator ----------------------------------------------------------

    @defer.inlineCallbacks
    def coordinator(self):
        """Deferred node id of the group coordinator (found and cached)."""
        while self._coordinator_id is None:
            try:
                self._coordinator_id = yield self.client.find_coordinator(self.group_id)
            except (BrokerResponseError, KafkaConnectionError, RequestTimedOutError) as exc:
                if self._stopped or not getattr(exc, "retriable", True):
                    raise
                yield self._backoff()
        return self._coordinator_id

    def _backoff(self):
        return task.deferLater(self.reactor, ms(self.config["retry.backoff.ms"]), lambda: None)

    def coordinator_error(self, code):
        """An answer from the coordinator carried ``code``: react to it."""
        if code in _COORDINATOR_ERRORS:
            self._coordinator_id = None
        if code in (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID):
            self.member_id = "" if code == UNKNOWN_MEMBER_ID else self.member_id
            self.generation = -1
        if code in _REJOIN_ERRORS or code in _COORDINATOR_ERRORS:
            self.rejoin()

    # -- lifecycle ------------------------------------------------------------

    def start(self, topics):
        self.topics = list(topics)
        return self._ensure_joined()

    def rejoin(self):
        if not self._stopped and self._joining is None:
            self._needs_rejoin = True
            self._ensure_joined().addErrback(self._fatal)

    def _fatal(self, failure):
        log.failure("group {g}: cannot rejoin", failure, g=self.group_id)
        self.consumer._error = failure.value
        self.consumer._wake()

    def _ensure_joined(self):
        if self._joining is None:
            self._stop_heartbeat()
            self._joining = self._join_loop()

            def done(result):
                self._joining = None
                return result

            self._joining.addBoth(done)
            return self._joining
        d = defer.Deferred()
        self._joining.addBoth(lambda r: (d.callback(None), r)[1])
        return d

    @defer.inlineCallbacks
    def stop(self):
        self._stopped = True
        self._stop_heartbeat()
        if self.member_id and self.instance_id is None and self._coordinator_id is not None:
            body = {
                "group_id": self.group_id,
                "member_id": self.member_id,
                "members": [{"member_id": self.member_id, "group_instance_id": None}],
            }
            try:
                yield self.client.send(
                    self._coordinator_id, LEAVE_GROUP, 3, body, purpose="group", timeout=5
                )
            except Exception as exc:
                log.info("LeaveGroup failed: {e}", e=exc)
        self.member_id = ""
        self.generation = -1

    # -- join / sync ------------------------------------------------------------

    @defer.inlineCallbacks
    def _join_loop(self):
        if self.assigned:
            revoked, self.assigned = self.assigned, []
            yield self.consumer._revoke(revoked)
            self.consumer._set_assignment([])
        while not self._stopped:
            self._needs_rejoin = False
            try:
                node = yield self.coordinator()
                joined = yield self._join(node)
                if joined is None:
                    continue
                assignment = yield self._sync(node, *joined)
                if assignment is None:
                    continue
            except (KafkaConnectionError, RequestTimedOutError) as exc:
                log.info("group {g}: {e}; retrying", g=self.group_id, e=exc)
                self._coordinator_id = None
                yield self._backoff()
                continue
            self.assigned = [TopicPartition(t, p) for t, p in assignment]
            yield self.consumer._assigned(self.assigned)
            if self._needs_rejoin:
                continue
            self._start_heartbeat()
            return self.assigned

    def _join_body(self, version):
        owned = [tuple(tp) for tp in self.assigned]
        metadata = assignors.encode_subscription(self.topics, None, owned)
        return {
            "group_id": self.group_id,
            "session_timeout_ms": self.config["session.timeout.ms"],
            "rebalance_timeout_ms": self.config["max.poll.interval.ms"],
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "protocol_type": "consumer",
            "protocols": [{"name": name, "metadata": metadata} for name in self.strategies],
        }

    @defer.inlineCallbacks
    def _join(self, node):
        timeout = ms(self.config["max.poll.interval.ms"]) + 5
        response = yield self.client.send(
            node, JOIN_GROUP, 5, self._join_body, purpose="group", timeout=timeout
        )
        code = response["error_code"]
        if code == MEMBER_ID_REQUIRED:
            self.member_id = response["member_id"]
            return None
        if code == UNKNOWN_MEMBER_ID:
            self.member_id = ""
            return None
        if code in _COORDINATOR_ERRORS or code == REBALANCE_IN_PROGRESS:
            if code in _COORDINATOR_ERRORS:
                self._coordinator_id = None
            yield self._backoff()
            return None
        if code:
            raise BrokerResponseError(code, where=f"JoinGroup {self.group_id}")
        self.member_id = response["member_id"]
        self.generation = response["generation_id"]
        return response["leader"], response["protocol_name"], response["members"]

    @defer.inlineCallbacks
    def _sync(self, node, leader, protocol, members):
        assignments = []
        if leader == self.member_id:
            assignments = yield self._assign(protocol, members)
        body = {
            "group_id": self.group_id,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "assignments": assignments,
        }
        try:
            response = yield self.client.send(node, SYNC_GROUP, 3, body, purpose="group")
        except DecodeError as exc:
            # librdkafka's mock cluster answers a failed SyncGroup (an error
            # code, typically REBALANCE_IN_PROGRESS) with a null assignment,
            # which Kafka's schema does not allow; the error code is then
            # unreadable, and rejoining is the safe reading of any failure.
            log.info(
                "group {g}: unreadable SyncGroup answer ({e}); rejoining", g=self.group_id, e=exc
            )
            yield self._backoff()
            return None
        code = response["error_code"]
        if code in _REJOIN_ERRORS or code in _COORDINATOR_ERRORS:
            self.coordinator_error(code) if code != REBALANCE_IN_PROGRESS else None
            if code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
            return None
        if code:
            raise BrokerResponseError(code, where=f"SyncGroup {self.group_id}")
        return assignors.decode_assignment(response["assignment"])

    @defer.inlineCallbacks
    def _assign(self, protocol, members):
        assign = assignors.ASSIGNORS.get(protocol)
        if assign is None:
            raise KafkaClientError(f"group chose assignor {protocol!r}, which pluglog lacks")
        subscriptions = {}
        for m in members:
            subscriptions[m["member_id"]] = assignors.decode_subscription(m["metadata"])
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        yield self.client.refresh_metadata(topics)
        partitions = {t: self.client.partitions[t] for t in topics if t in self.client.partitions}
        plan = assign(partitions, subscriptions)
        log.info(
            "group {g} generation {gen}: {plan}", g=self.group_id, gen=self.generation, plan=plan
        )
        return [
            {"member_id": member, "assignment": assignors.encode_assignment(pairs)}
            for member, pairs in plan.items()
        ]

    # -- heartbeats -------------------------------------------------------------

    def _start_heartbeat(self):
        self._stop_heartbeat()
        self._heartbeat = self.reactor.callLater(
            ms(self.config["heartbeat.interval.ms"]), self._beat
        )

    def _stop_heartbeat(self):
        if self._heartbeat is not None and self._heartbeat.active():
            self._heartbeat.cancel()
        self._heartbeat = None

    def _beat(self):
        self._heartbeat = None
        if self._stopped or self._joining is not None:
            return
        body = {
            "group_id": self.group_id,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
        }
        d = self.coordinator()
        d.addCallback(lambda node: self.client.send(node, HEARTBEAT, 3, body, purpose="group"))
        d.addCallbacks(self._beat_answer, self._beat_failed)
        d.addErrback(self._fatal)

    def _beat_answer(self, response):
        code = response["error_code"]
        if code == FENCED_INSTANCE_ID:
            raise BrokerResponseError(code, where=f"group {self.group_id}")
        if code:
            self.coordinator_error(code)
            if code not in _REJOIN_ERRORS and code not in _COORDINATOR_ERRORS:
                raise BrokerResponseError(code, where=f"Heartbeat {self.group_id}")
        if self._heartbeat is None and self._joining is None and not self._stopped:
            self._start_heartbeat()

    def _beat_failed(self, failure):
        failure.trap(KafkaConnectionError, RequestTimedOutError)
        self._coordinator_id = None
        if not self._stopped and self._joining is None:
            self._start_heartbeat()
