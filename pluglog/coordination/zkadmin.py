"""The admin operations of the ``zookeeper`` coordinator (any broker may call them).

Topic creation writes ``/brokers/topics/<t>`` and ``/config/topics/<t>`` in
one transaction and waits (bounded) until every partition has a state with a
leader (Kafka's DelayedCreatePartitions; a CreateTopics' own timeout past,
REQUEST_TIMED_OUT); deletion goes through ``/admin/delete_topics``; partition
additions rewrite the topic znode under a version check; config changes
rewrite ``/config/topics/<t>``; reassignments go through
``/admin/reassign_partitions``. Elections and controlled shutdowns are
request znodes under ``/pluglog/requests`` that the controller answers by
writing a ``result`` into them. Methods run on the reactor thread; ZooKeeper
calls run on the coordinator's io worker.
"""

import collections

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from twisted.internet import defer
from twisted.logger import Logger

from pluglog.coordination import assignment as assign
from pluglog.coordination import zkdata as z
from pluglog.coordination.state import NO_LEADER, TopicMetadata
from pluglog.coordination.topicchecks import (
    check_partition_count,
    refuse_existing,
    topic_configs,
    validate_topic_name,
)
from pluglog.coordination.zkbridge import DISCONNECTED
from pluglog.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    NoReassignmentInProgressError,
    PreferredLeaderNotAvailableError,
    RequestTimedOutError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)

log = Logger()

#: Attempts and pause between them when partitions cannot move yet.
CONTROLLED_SHUTDOWN_ATTEMPTS = 3
CONTROLLED_SHUTDOWN_BACKOFF = 0.5

ELECTION_ERRORS = {
    0: None,
    3: UnknownTopicOrPartitionError,
    80: PreferredLeaderNotAvailableError,
    83: EligibleLeadersNotAvailableError,
    84: ElectionNotNeededError,
}


class AdminMixin:
    """Methods of :class:`pluglog.coordination.zookeeper.ZooKeeperCoordinator`."""

    def admin_timeout(self):
        """Bound of waits for the controller (create, delete, requests)."""
        return max(self.config.zookeeper_session_timeout_ms / 1000.0, 10.0)

    # -- waiting for the cache -------------------------------------------------

    def _wait(self, predicate, timeout):
        """Deferred of True once ``predicate()`` holds, False after ``timeout``."""
        if predicate():
            return defer.succeed(True)
        d = defer.Deferred()
        waiter = [predicate, d, None]
        waiter[2] = self.reactor.callLater(timeout, self._finish_waiter, waiter, False)
        self._waiters.append(waiter)
        return d

    def _finish_waiter(self, waiter, value):
        if waiter in self._waiters:
            self._waiters.remove(waiter)
            if waiter[2] is not None and waiter[2].active():
                waiter[2].cancel()
            waiter[1].callback(value)

    def _check_waiters(self):
        for waiter in list(self._waiters):
            if waiter[0]():
                self._finish_waiter(waiter, True)

    # -- topics ----------------------------------------------------------------

    def _live_brokers(self):
        return [(b, rack) for b, _h, _p, rack in self.brokers()]

    def _read_brokers(self):
        """The registered brokers as ZooKeeper has them now (io worker)."""
        brokers = {}
        for child in self.client.get_children(z.BROKER_IDS):
            try:
                raw, _ = self.client.get(f"{z.BROKER_IDS}/{child}")
            except NoNodeError:
                continue
            info = z.broker_from_json(child, z.loads(raw))
            brokers[info[0]] = info
        return brokers

    def _planned(self, plan):
        """A Deferred of ``plan(live brokers)``.

        The broker list is fed by a watch, so a broker that registered a
        moment ago may not be in it yet (its watch event is still on its
        way). When the plan is refused for naming a broker the list lacks or
        for too few brokers, ZooKeeper's list is read once and the plan
        retried on it, so the refusal is about the cluster, not about the
        watch's delay.
        """
        try:
            return defer.succeed(plan(self._live_brokers()))
        except (InvalidReplicaAssignmentError, InvalidReplicationFactorError):
            pass
        except Exception:
            return defer.fail()
        d = self.io.submit(self._read_brokers)
        d.addCallback(self._set_brokers)
        d.addCallback(lambda _: plan(self._live_brokers()))
        return d

    def create_topic(
        self,
        name,
        num_partitions,
        replication_factor,
        configs,
        internal=False,
        validate_only=False,
        assignments=None,
        timeout=None,
    ):
        def plan(live):
            validate_topic_name(name)
            refuse_existing(name, self._topics)
            if assignments:
                replicas = assign.validate_assignment(
                    {int(p): [int(b) for b in r] for p, r in assignments.items()},
                    {b for b, _ in live},
                )
            else:
                check_partition_count(num_partitions)
                factor = replication_factor
                if internal:
                    factor = max(1, min(self.config.offsets_topic_replication_factor, len(live)))
                replicas = assign.assign_replicas(live, num_partitions, factor)
            return replicas, topic_configs(configs)

        return self._planned(plan).addCallback(
            self._create_planned, name, internal, validate_only, timeout
        )

    def _create_planned(self, planned, name, internal, validate_only, timeout=None):
        replicas, configs = planned
        meta = TopicMetadata(name, len(replicas), configs, z.new_topic_id(), internal, replicas)
        if validate_only:
            return meta

        def write():
            if self.client.exists(f"{z.DELETE_TOPICS}/{name}"):
                raise TopicExistsError(f"topic {name!r} is marked for deletion")
            tx = self.client.transaction()
            tx.create(z.topic_path(name), z.dumps(z.topic_json(replicas, meta.topic_id, internal)))
            tx.create(z.config_path(name), z.dumps(z.config_json(configs)))
            results = tx.commit()
            if isinstance(results[0], NodeExistsError):
                raise TopicExistsError(f"topic {name!r} already exists")
            for result in results:
                if isinstance(result, Exception):
                    raise result

        d = self._submit_write(write)
        d.addCallback(lambda _: self._wait_states(name, range(len(replicas)), timeout))
        d.addCallback(lambda _: self._topics.get(name, meta))
        return d

    def _wait_states(self, name, partitions, timeout=None):
        """Wait until every partition has a state with a leader. ``timeout``
        (a CreateTopics' own, seconds) past, fail with RequestTimedOutError,
        as Kafka's DelayedCreatePartitions answers REQUEST_TIMED_OUT (the
        topic stays: its leaders come when the controller gets to them);
        without one, wait at most :meth:`admin_timeout` and go on."""
        pending = collections.deque(partitions)

        def led(key):
            state = self._states.get(key)
            return state is not None and state.leader != NO_LEADER

        def ready():
            # Called on every state the cache takes: drop the seen ones from
            # the front (states come mostly in partition order) rather than
            # look at every partition each time, which at 10,000 partitions
            # held the event loop for seconds in all.
            while pending and led((name, pending[0])):
                pending.popleft()
            return not pending

        bound = self.admin_timeout() if timeout is None else max(0.0, timeout)

        def timed(ok):
            if ok:
                return
            if timeout is not None:
                raise RequestTimedOutError(
                    f"topic {name!r} is created but {len(pending)} of its partitions had "
                    f"no leader within the request's timeout ({bound:g}s)"
                )
            log.warn("topic {t}: partition states not seen within {s}s", t=name, s=bound)

        return self._wait(ready, bound).addCallback(timed)

    def delete_topic(self, name):
        meta = self._topics.get(name)
        if meta is None:
            return defer.fail(UnknownTopicOrPartitionError(f"no topic {name!r}"))

        def write():
            try:
                self.client.create(f"{z.DELETE_TOPICS}/{name}")
            except NodeExistsError:
                pass

        d = self._submit_write(write)
        d.addCallback(lambda _: self._wait(lambda: name not in self._topics, self.admin_timeout()))
        d.addCallback(lambda _: meta)
        return d

    def create_partitions(
        self, name, total_count, validate_only=False, assignments=None, timeout=None
    ):
        meta = self._topics.get(name)
        if meta is None:
            return defer.fail(UnknownTopicOrPartitionError(f"no topic {name!r}"))
        if total_count <= meta.num_partitions:
            return defer.fail(
                InvalidPartitionsError(
                    f"topic {name!r} has {meta.num_partitions} partitions; "
                    f"the new count {total_count} must be larger"
                )
            )

        def plan(live):
            if not assignments:
                return assign.assign_new_partitions(live, meta.assignment, total_count)
            added = assign.validate_assignment(
                {meta.num_partitions + i: list(r) for i, r in enumerate(assignments)},
                {b for b, _ in live},
                first_partition=meta.num_partitions,
            )
            if len(added) != total_count - meta.num_partitions:
                raise InvalidReplicaAssignmentError(
                    f"{len(added)} assignments for {total_count - meta.num_partitions} "
                    "new partitions"
                )
            return added

        def planned(added):
            if validate_only:
                return meta
            return self._add_partitions(name, meta, total_count, added, timeout)

        return self._planned(plan).addCallback(planned)

    def _add_partitions(self, name, meta, total_count, added, timeout=None):
        def write():
            raw, stat = self.client.get(z.topic_path(name))
            current, topic_id, internal, adding, removing = z.topic_from_json(z.loads(raw))
            if len(current) != meta.num_partitions:
                raise InvalidPartitionsError(f"topic {name!r} changed meanwhile")
            current.update(added)
            body = z.topic_json(current, topic_id, internal, adding, removing)
            try:
                self.client.set(z.topic_path(name), z.dumps(body), version=stat.version)
            except BadVersionError:
                raise InvalidPartitionsError(f"topic {name!r} changed meanwhile") from None

        d = self._submit_write(write)
        # Only the new partitions: an existing one without a leader (its
        # brokers down) is no reason to hold the answer.
        d.addCallback(
            lambda _: self._wait_states(name, range(meta.num_partitions, total_count), timeout)
        )
        d.addCallback(lambda _: self._topics[name])
        return d

    def alter_topic_config(self, name, configs):
        if name not in self._topics:
            return defer.fail(UnknownTopicOrPartitionError(f"no topic {name!r}"))
        try:
            configs = topic_configs(configs)
        except InvalidConfigError:
            return defer.fail()

        def write():
            body = z.dumps(z.config_json(configs))
            try:
                self.client.set(z.config_path(name), body)
            except NoNodeError:
                self.client.create(z.config_path(name), body)

        d = self._submit_write(write)
        d.addCallback(
            lambda _: self._wait(
                lambda: self._topics.get(name) is None or self._topics[name].configs == configs,
                self.admin_timeout(),
            )
        )
        d.addCallback(lambda _: self._topics.get(name))
        return d

    # -- controller requests ---------------------------------------------------

    def _request(self, body, timeout):
        """Create a request znode; a Deferred of its ``result`` (None on timeout)."""
        answers = {}

        def create():
            return self.client.create(f"{z.REQUESTS}/req-", z.dumps(body), sequence=True)

        def poll(path):
            def watch(event):
                self.io.post(self._safely, poll, path)

            try:
                raw, _ = self.client.get(path, watch=watch)
            except NoNodeError:
                return
            data = z.loads(raw) or {}
            if "result" in data:
                self.io.deliver(answered, path, data["result"])

        def answered(path, result):
            answers[path] = result
            self._check_waiters()

        def cleanup(path):
            try:
                self.client.delete(path)
            except NoNodeError:
                pass

        @defer.inlineCallbacks
        def run():
            # Bounded even while ZooKeeper is unreachable (kazoo would wait).
            created = self._submit_write(create).addTimeout(timeout, self.reactor)
            try:
                path = yield created
            except (defer.CancelledError, defer.TimeoutError, *DISCONNECTED):
                return None
            self.io.post(self._safely, poll, path)
            yield self._wait(lambda: path in answers, timeout)
            self.io.post(self._safely, cleanup, path)
            return answers.get(path)

        return run()

    def elect_leaders(self, partitions, preferred=True):
        """ElectLeaders through the controller: ``{(t, p): None | KafkaError}``."""
        partitions = list(partitions)
        body = {"type": "elect", "preferred": bool(preferred), "partitions": partitions}

        def answered(result):
            if result is None:
                return {
                    tp: RequestTimedOutError("no answer from the controller") for tp in partitions
                }
            out = {}
            for topic, p, code in result:
                cls = ELECTION_ERRORS.get(code)
                out[(topic, p)] = None if cls is None else cls(f"{topic}-{p}: {cls.name}")
            return out

        return self._request(body, self.admin_timeout()).addCallback(answered)

    @defer.inlineCallbacks
    def controlled_shutdown(self):
        """Ask the controller to move leadership away. Like Kafka's
        controlled.shutdown.max.retries (3), a partition nobody else can lead
        is retried a few times, not until the timeout; the whole thing ends
        after controlled.shutdown.timeout.ms at the latest."""
        timeout = self.config.controlled_shutdown_timeout_ms / 1000.0
        deadline = self.reactor.seconds() + timeout
        for attempt in range(1, CONTROLLED_SHUTDOWN_ATTEMPTS + 1):
            left = deadline - self.reactor.seconds()
            if left <= 0:
                break
            # The epoch of this registration (a session restored meanwhile
            # registers again, with a new one).
            body = {
                "type": "controlled_shutdown",
                "broker": self.broker_id,
                "broker_epoch": self.broker_epoch,
            }
            result = yield self._request(body, left)
            if result is None:
                break
            if "error" in result:
                log.warn(
                    "controlled shutdown attempt {n} refused by the controller: {error}",
                    n=attempt,
                    error=result["error"],
                )
                continue
            if result.get("remaining") == 0:
                log.info(
                    "controlled shutdown done: no partition left here that another "
                    "live in-sync replica could lead"
                )
                return
            log.info(
                "controlled shutdown attempt {n}: {left} partition(s) still led here",
                n=attempt,
                left=result.get("remaining"),
            )
            pause = defer.Deferred()
            self.reactor.callLater(
                min(CONTROLLED_SHUTDOWN_BACKOFF, max(left, 0)), pause.callback, None
            )
            yield pause
        log.warn("controlled shutdown incomplete; stopping anyway")

    # -- reassignment ----------------------------------------------------------

    def reassign_partitions(self, targets):
        """``{(t, p): [replicas] | None}`` (None cancels); a Deferred of
        ``{(t, p): None | KafkaError}`` once the requests are written."""
        results = {}
        entries = {}
        known = set(self._brokers)
        for (topic, p), replicas in targets.items():
            meta = self._topics.get(topic)
            try:
                if meta is None or p not in meta.assignment:
                    raise UnknownTopicOrPartitionError(f"no partition {topic}-{p}")
                adding, _removing = self._reassigning.get(topic, ({}, {}))
                if replicas is None:
                    if not adding.get(p) and not _removing.get(p):
                        raise NoReassignmentInProgressError(f"{topic}-{p}: nothing to cancel")
                    replicas = [r for r in meta.replicas(p) if r not in adding.get(p, [])]
                replicas = [int(r) for r in replicas]
                if not replicas or len(set(replicas)) != len(replicas):
                    raise InvalidReplicaAssignmentError(f"{topic}-{p}: bad replicas {replicas}")
                unknown = [r for r in replicas if r not in known]
                if unknown:
                    raise InvalidReplicaAssignmentError(f"{topic}-{p}: unknown brokers {unknown}")
            except Exception as exc:
                results[(topic, p)] = exc
                continue
            entries[(topic, p)] = replicas
            results[(topic, p)] = None

        def write():
            while entries:
                try:
                    raw, stat = self.client.get(z.REASSIGN)
                except NoNodeError:
                    try:
                        self.client.create(z.REASSIGN, z.dumps(z.reassign_json(entries)))
                        return
                    except NodeExistsError:
                        continue
                merged = {**z.reassign_from_json(z.loads(raw)), **entries}
                try:
                    self.client.set(z.REASSIGN, z.dumps(z.reassign_json(merged)), stat.version)
                    return
                except (BadVersionError, NoNodeError):
                    continue

        return self._submit_write(write).addCallback(lambda _: results)

    def list_reassignments(self):
        """``{(t, p): {"replicas", "adding_replicas", "removing_replicas"}}``."""
        out = {}
        for topic, (adding, removing) in self._reassigning.items():
            meta = self._topics.get(topic)
            if meta is None:
                continue
            for p in sorted(set(adding) | set(removing)):
                if adding.get(p) or removing.get(p):
                    out[(topic, p)] = {
                        "replicas": list(meta.replicas(p)),
                        "adding_replicas": list(adding.get(p, [])),
                        "removing_replicas": list(removing.get(p, [])),
                    }
        return out
