"""The Twisted consumer: assignment, positions, the fetch loop, commits.

``Consumer(reactor, *topics, bootstrap_servers=..., group_id=None,
auto_offset_reset="latest", **kafka_config)`` mirrors aiokafka's
AIOKafkaConsumer with Deferreds. With topics and a ``group_id`` it joins the
group (:mod:`pluglog.client.group`) and consumes what the group assigns;
with topics and no group it takes every partition of them; without topics
the application calls :meth:`Consumer.assign`.

Fetch loop and flow control: one Fetch at a time per leader broker, for the
assigned, not paused partitions whose fetched records the application has
taken (Kafka's consumer does the same: no partition is fetched while it
still has buffered records). :meth:`Consumer.getmany` hands buffered records
out and, when there are none, waits up to ``timeout_ms`` for the next answer.
A position is the offset of the next record :meth:`getmany` returns; auto
commit (``enable.auto.commit``) commits positions every
``auto.commit.interval.ms``, before a rebalance and on :meth:`stop`.
"""

from collections import deque

from twisted.internet import defer
from twisted.logger import Logger

from pluglog.client import plugins
from pluglog.client.cluster import ClusterClient, TopicPartition
from pluglog.client.config import CONSUMER, client_config, ms
from pluglog.client.errors import (
    REFRESH_METADATA,
    BrokerResponseError,
    KafkaClientError,
    KafkaConnectionError,
    RequestTimedOutError,
)
from pluglog.client.fetcher import ConsumerRecord, records_from
from pluglog.client.offsets import OffsetsMixin
from pluglog.errors import ConfigError
from pluglog.protocol.api_keys import FETCH

log = Logger()

FETCH_VERSION = 11
OFFSET_OUT_OF_RANGE = 1
EARLIEST = -2
LATEST = -1

__all__ = ["Consumer", "ConsumerRecord", "TopicPartition"]


class _State:
    __slots__ = ("position", "fetch_position", "buffer", "paused", "epoch", "highwater", "lso")

    def __init__(self):
        self.position = None
        self.fetch_position = None
        self.buffer = deque()
        self.paused = False
        self.epoch = 0  # bumped by seek: answers to older fetches are dropped
        self.highwater = None
        self.lso = None


class Consumer(OffsetsMixin):
    """Kafka consumer on the reactor (see the module docstring)."""

    def __init__(
        self,
        reactor,
        *topics,
        bootstrap_servers=None,
        group_id=None,
        auto_offset_reset=None,
        listener=None,
        **kafka_config,
    ):
        self.config = config = client_config(
            CONSUMER,
            kafka_config,
            bootstrap_servers=bootstrap_servers,
            group_id=group_id,
            auto_offset_reset=auto_offset_reset,
        )
        self.reactor = reactor
        self.topics = list(topics)
        self.group_id = config["group.id"]
        self.listener = listener
        self.isolation = 1 if config["isolation.level"] == "read_committed" else 0
        url = config["schema.registry.url"]
        self.key_deserializer = plugins.build_serializer(
            config["key.deserializer"], reactor, url, is_key=True
        )
        self.value_deserializer = plugins.build_serializer(
            config["value.deserializer"], reactor, url
        )
        self.client = ClusterClient(reactor, config)
        self._states = {}
        self._fetching = set()  # node ids with a Fetch in flight
        self._waiters = []
        self._error = None
        self._group = None
        self._auto_commit = None
        self._running = False
        self._resetting = set()

    # -- lifecycle ----------------------------------------------------------

    @defer.inlineCallbacks
    def start(self):
        """Bootstrap; join the group or assign the topics' partitions."""
        yield self.client.start()
        self._running = True
        if self.topics and self.group_id is not None:
            from pluglog.client.group import GroupMember

            self._group = GroupMember(self.reactor, self.client, self.config, self)
            yield self._group.start(self.topics)
        elif self.topics:
            tps = []
            for topic in self.topics:
                parts = yield self.client.partitions_for(topic)
                tps += [TopicPartition(topic, p) for p in parts]
            self.assign(tps)
        if self.group_id is not None and self.config["enable.auto.commit"]:
            interval = ms(self.config["auto.commit.interval.ms"])
            self._auto_commit = self.reactor.callLater(interval, self._auto_commit_tick)
        return self

    @defer.inlineCallbacks
    def stop(self):
        """Commit (auto commit), leave the group, close connections."""
        if not self._running:
            return
        self._running = False
        if self._auto_commit is not None and self._auto_commit.active():
            self._auto_commit.cancel()
        try:
            if self.group_id is not None and self.config["enable.auto.commit"]:
                yield self._commit_quietly()
            if self._group is not None:
                yield self._group.stop()
        finally:
            self._wake()
            yield self.client.close()

    # -- assignment -----------------------------------------------------------

    def assign(self, partitions):
        """Consume exactly ``partitions`` (TopicPartitions); no group."""
        if self._group is not None:
            raise KafkaClientError("assign() is not allowed while subscribed to a group")
        self._set_assignment(partitions)

    def _set_assignment(self, partitions):
        wanted = {TopicPartition(*tp) for tp in partitions}
        for tp in list(self._states):
            if tp not in wanted:
                del self._states[tp]
        for tp in wanted:
            self._states.setdefault(tp, _State())
        self._fetch()

    def assignment(self):
        return set(self._states)

    def _state(self, tp):
        state = self._states.get(TopicPartition(*tp))
        if state is None:
            raise KafkaClientError(f"{tp} is not assigned to this consumer")
        return state

    def seek(self, partition, offset):
        """Consume ``partition`` from ``offset`` on."""
        state = self._state(partition)
        if offset < 0:
            raise ConfigError(f"seek offset {offset} is negative")
        self._set_position(state, offset)
        self._fetch()

    def _set_position(self, state, offset):
        state.position = state.fetch_position = offset
        state.buffer.clear()
        state.epoch += 1

    def seek_to_beginning(self, *partitions):
        return self._reset(partitions or list(self._states), EARLIEST)

    def seek_to_end(self, *partitions):
        return self._reset(partitions or list(self._states), LATEST)

    @defer.inlineCallbacks
    def position(self, partition):
        """Deferred: the offset of the next record to be returned."""
        state = self._state(partition)
        if state.position is None:
            yield self._resolve_positions()
        return state.position

    def highwater(self, partition):
        """The high watermark from the last fetch answer, or None."""
        return self._state(partition).highwater

    def pause(self, *partitions):
        """Stop fetching ``partitions`` (records already fetched stay buffered)."""
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, *partitions):
        for tp in partitions:
            self._state(tp).paused = False
        self._fetch()

    def paused(self):
        return {tp for tp, s in self._states.items() if s.paused}

    # -- getmany --------------------------------------------------------------

    def getmany(self, *partitions, timeout_ms=0, max_records=None):
        """Deferred of ``{TopicPartition: [ConsumerRecord]}``: buffered records
        at once, else whatever arrives within ``timeout_ms`` (``{}`` if nothing)."""
        if self._error is not None:
            error, self._error = self._error, None
            return defer.fail(error)
        limit = max_records or self.config["max.poll.records"]
        wanted = [TopicPartition(*tp) for tp in partitions] if partitions else None
        out = self._take(wanted, limit)
        if out or timeout_ms <= 0 or not self._running:
            self._fetch()
            return defer.succeed(out)
        d = defer.Deferred()
        timer = self.reactor.callLater(ms(timeout_ms), self._waited, d, wanted, limit)
        self._waiters.append((d, wanted, limit, timer))
        self._fetch()
        return d

    def _take(self, wanted, limit):
        out = {}
        for tp in wanted if wanted is not None else list(self._states):
            state = self._states.get(tp)
            if state is None or not state.buffer or state.paused:
                continue
            buf = state.buffer
            taken = []
            while buf and limit > 0:
                taken.append(buf.popleft())
                limit -= 1
            if taken:
                out[tp] = taken
                # Past the batches that returned nothing too (transaction
                # markers, aborted batches), as Kafka's consumer moves.
                state.position = state.fetch_position if not buf else taken[-1].offset + 1
            if limit <= 0:
                break
        return out

    def _waited(self, d, wanted, limit):
        for i, item in enumerate(self._waiters):
            if item[0] is d:
                del self._waiters[i]
                break
        if self._error is not None:
            error, self._error = self._error, None
            d.errback(error)
        else:
            d.callback(self._take(wanted, limit))

    def _wake(self):
        waiters, self._waiters = self._waiters, []
        keep = []
        for d, wanted, limit, timer in waiters:
            if self._error is not None:
                timer.cancel()
                error, self._error = self._error, None
                d.errback(error)
                continue
            out = self._take(wanted, limit)
            if out or not self._running:
                timer.cancel()
                d.callback(out)
            else:
                keep.append((d, wanted, limit, timer))
        self._waiters = keep + self._waiters

    # -- the fetch loop -------------------------------------------------------

    def _fetch(self):
        if not self._running:
            return
        unresolved = [
            tp
            for tp, s in self._states.items()
            if s.position is None and tp not in self._resetting
        ]
        if unresolved:
            self._resolve_positions().addErrback(self._background_error)
        by_node = {}
        for tp, state in self._states.items():
            if state.paused or state.buffer or state.fetch_position is None:
                continue
            node = self.client.leader_for(tp)
            if node < 0:
                self.client.refresh_metadata().addErrback(lambda _: None)
                continue
            if node in self._fetching:
                continue
            by_node.setdefault(node, []).append(tp)
        for node, tps in by_node.items():
            self._fetch_from(node, tps)

    def _fetch_from(self, node, tps):
        self._fetching.add(node)
        topics = {}
        epochs = {}
        for tp in tps:
            state = self._states[tp]
            epochs[tp] = state.epoch
            topics.setdefault(tp.topic, []).append(
                {
                    "partition": tp.partition,
                    "fetch_offset": state.fetch_position,
                    "partition_max_bytes": self.config["max.partition.fetch.bytes"],
                }
            )
        body = {
            "replica_id": -1,
            "max_wait_ms": self.config["fetch.max.wait.ms"],
            "min_bytes": self.config["fetch.min.bytes"],
            "max_bytes": self.config["fetch.max.bytes"],
            "isolation_level": self.isolation,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        timeout = ms(self.config["request.timeout.ms"] + self.config["fetch.max.wait.ms"])
        d = self.client.send(node, FETCH, FETCH_VERSION, body, timeout=timeout, purpose="fetch")
        d.addCallbacks(self._fetched, self._fetch_failed, (epochs,), None, (node,))
        d.addBoth(self._fetch_done, node)
        d.addErrback(self._background_error)

    def _fetch_done(self, result, node):
        self._fetching.discard(node)
        self._wake()
        self._fetch()
        return result

    def _fetched(self, response, epochs):
        if response.get("error_code"):
            raise BrokerResponseError(response["error_code"], where="Fetch")
        refresh = False
        for topic in response["responses"]:
            name = topic["topic"]
            for part in topic["partitions"]:
                tp = TopicPartition(name, part["partition_index"])
                state = self._states.get(tp)
                if state is None or epochs.get(tp) != state.epoch:
                    continue  # unassigned or sought since the request left
                code = part["error_code"]
                if code == OFFSET_OUT_OF_RANGE:
                    self._out_of_range(tp, state)
                    continue
                if code:
                    refresh = refresh or code in REFRESH_METADATA
                    continue
                state.highwater = part["high_watermark"]
                state.lso = part.get("last_stable_offset")
                records, next_position = records_from(
                    name,
                    tp.partition,
                    part["records"],
                    state.fetch_position,
                    self.key_deserializer,
                    self.value_deserializer,
                    part.get("aborted_transactions") if self.isolation else None,
                    self.config["check.crcs"],
                )
                state.buffer.extend(records)
                state.fetch_position = next_position
                if not state.buffer:
                    state.position = next_position  # only markers or aborted batches
        if refresh:
            self.client.refresh_metadata().addErrback(lambda _: None)

    def _fetch_failed(self, failure, node):
        failure.trap(KafkaConnectionError, RequestTimedOutError, BrokerResponseError)
        log.info("fetch from node {node} failed: {e}", node=node, e=failure.value)
        self.client.refresh_metadata().addErrback(lambda _: None)

    def _out_of_range(self, tp, state):
        policy = self.config["auto.offset.reset"]
        if policy == "none":
            self._error = BrokerResponseError(
                OFFSET_OUT_OF_RANGE, where=f"{tp} at offset {state.fetch_position}"
            )
            state.fetch_position = None
            return
        state.position = state.fetch_position = None
        self._resolve_positions().addErrback(self._background_error)

    def _background_error(self, failure):
        if self._running:
            log.info("consumer: {e}", e=failure.value)
            if not failure.check(KafkaConnectionError, RequestTimedOutError):
                self._error = failure.value
                self._wake()

    # -- positions, offsets ---------------------------------------------------

    @defer.inlineCallbacks
    def _resolve_positions(self):
        """Committed offsets (groups) or auto.offset.reset for unknown positions."""
        # The answers apply to these states only: a partition revoked while
        # they were on their way, and maybe assigned again (a new state),
        # needs a lookup of its own, as the group may have committed it
        # meanwhile (an old answer would re-read what another member did).
        todo = {
            tp: s
            for tp, s in self._states.items()
            if s.position is None and tp not in self._resetting
        }
        if not todo:
            return
        self._resetting.update(todo)
        try:
            if self.group_id is not None:
                committed = yield self.committed_offsets(list(todo))
                for tp, offset in committed.items():
                    state = todo.get(tp)
                    # A seek while the answer was on its way wins.
                    if offset is not None and offset >= 0 and self._current(tp, state):
                        if state.position is None:
                            self._set_position(state, offset)
            rest = [tp for tp, s in todo.items() if self._current(tp, s) and s.position is None]
            policy = self.config["auto.offset.reset"]
            if rest and policy == "none":
                raise KafkaClientError(
                    f"no committed offset for {rest} and auto.offset.reset=none"
                )
            if rest:
                yield self._reset_now(
                    rest,
                    EARLIEST if policy == "earliest" else LATEST,
                    only_unset=True,
                    states=todo,
                )
        finally:
            self._resetting.difference_update(todo)
        self._fetch()

    def _current(self, tp, state):
        """True while ``state`` is still ``tp``'s (not revoked or replaced)."""
        return state is not None and self._states.get(tp) is state

    @defer.inlineCallbacks
    def _reset(self, partitions, timestamp):
        tps = [TopicPartition(*tp) for tp in partitions]
        for tp in tps:
            self._state(tp)
        yield self._reset_now(tps, timestamp)
        self._fetch()

    @defer.inlineCallbacks
    def _reset_now(self, tps, timestamp, only_unset=False, states=None):
        """``states``: the states the lookup is for (:meth:`_resolve_positions`);
        an answer for a partition whose state was replaced meanwhile is dropped."""
        offsets = yield self.list_offsets(tps, timestamp)
        for tp, offset in offsets.items():
            state = self._states.get(tp)
            if states is not None and states.get(tp) is not state:
                continue
            if state is not None and not (only_unset and state.position is not None):
                self._set_position(state, offset)

    # -- group callbacks (pluglog.client.group) ------------------------------

    @defer.inlineCallbacks
    def _revoke(self, partitions):
        if self.config["enable.auto.commit"]:
            yield self._commit_quietly()
        if self.listener is not None:
            yield defer.maybeDeferred(self.listener.on_partitions_revoked, set(partitions))

    @defer.inlineCallbacks
    def _assigned(self, partitions):
        self._set_assignment(partitions)
        if self.listener is not None:
            yield defer.maybeDeferred(self.listener.on_partitions_assigned, set(partitions))
