"""Which ``__consumer_offsets`` partitions this broker's group coordinator owns.

A group belongs to partition ``partition_for(group_id)`` of
``__consumer_offsets``, and its coordinator is whichever broker leads that
partition (Kafka's GroupMetadataManager ``ownedPartitions`` /
``loadingPartitions``). This mixin of
:class:`pluglog.group.coordinator.GroupCoordinator` follows that leadership:

* :meth:`leadership_changed` (called by the Broker whenever a hosted
  partition starts or stops leading) loads a partition this broker now leads
  (:class:`~pluglog.group.loader.Loader`, one chunk per reactor turn) and
  unloads one it no longer leads: timers cancelled, parked JoinGroup/SyncGroup
  answered NOT_COORDINATOR, groups marked Dead and dropped.
* :meth:`partition_error` is the check every group API makes: NOT_COORDINATOR
  unless this broker leads the group's partition, COORDINATOR_LOAD_IN_PROGRESS
  while it is loading. It also looks at the partition's live role, so a missed
  notification (a ZooKeeper session lost and restored, a coordinator built
  after the partitions were opened) heals on the next request instead of
  serving stale groups.
* A lost coordination (ZooKeeper) session unloads everything at once; the
  re-announced states load the partitions still led here again.
* An ownership is tied to the leader epoch it was loaded in: led again in a
  newer epoch, the partition is unloaded and read again, because another
  broker may have written to it in between.
* :meth:`coordinator_node` answers FindCoordinator from the cluster's
  partition state (the coordinator's view, like Kafka's metadata cache).

Everything runs on the reactor thread.
"""

from twisted.internet import defer
from twisted.logger import Logger

from pluglog.coordination.state import NO_LEADER
from pluglog.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NONE,
    NOT_COORDINATOR,
)
from pluglog.group.loader import Loader
from pluglog.group.members import fire_once, join_result, sync_result
from pluglog.group.model import DEAD
from pluglog.group.store import OFFSETS_TOPIC

log = Logger()


def leader_endpoint(broker, topic, index):
    """``(node_id, host, port)`` of the live leader of ``topic``-``index`` in
    the cluster's view (Kafka's metadata cache), or None: the coordinator a
    FindCoordinator names, for groups and for transactional ids."""
    cluster = broker.coordinator
    state = cluster.partition_state(topic, index)
    if state is None or state.leader == NO_LEADER:
        return None
    if state.leader == broker.node_id:
        return (broker.node_id, *broker.advertised)
    for node_id, host, port, _rack in cluster.brokers():
        if node_id == state.leader:
            return node_id, host, port
    return None


def not_led_error(broker, topic, index, part):
    """What a coordinator request for partition ``index`` of ``topic`` gets
    when this broker has no leading replica ``part`` of it:
    COORDINATOR_LOAD_IN_PROGRESS while the log is not open here yet but the
    cluster already names this broker its leader (FindCoordinator names it
    from that state, and new logs open over several reactor turns), else
    NOT_COORDINATOR. A Kafka broker is in the same place between a
    LeaderAndIsr and its load; clients retry the first answer on the same
    broker and the second after another FindCoordinator. A replica that is
    open but follows or is offline says NOT_COORDINATOR, as Kafka's does
    after its resignation."""
    if part is None:
        state = broker.coordinator.partition_state(topic, index)
        if state is not None and state.leader == broker.node_id:
            return COORDINATOR_LOAD_IN_PROGRESS
    return NOT_COORDINATOR


class OwnedPartition:
    """One offsets partition this broker leads, in one leader epoch."""

    __slots__ = ("error", "index", "leader_epoch", "loaded")

    def __init__(self, index, leader_epoch):
        self.index = index
        self.leader_epoch = leader_epoch
        #: What group requests of this partition get: NONE once loaded.
        self.error = COORDINATOR_LOAD_IN_PROGRESS
        #: Deferred fired (with None, never failing) when loading ends.
        self.loaded = None


class PartitionOwnership:
    """Loading and unloading per offsets partition; needs the coordinator's
    ``broker``, ``store``, ``groups``, ``active``, ``_schedule_session`` and
    ``_cancel``; the coordinator's ``owned`` maps offsets partition index to
    :class:`OwnedPartition`."""

    # -- leadership ----------------------------------------------------------------

    def leadership_changed(self, part):
        """A partition of this broker gained or lost leadership."""
        if part.topic != OFFSETS_TOPIC or not self.active:
            return
        if part.is_leader:
            self._ensure_owned(part)
        elif part.index in self.owned:
            self._unload(part.index, "this broker no longer leads it")

    def cluster_event(self, event, payload):
        """Coordinator listener: a lost ZooKeeper session means this broker
        leads nothing until its states are re-announced (which reload).
        Topic changes move the generation KIP-848 groups cache their
        subscribed topics under."""
        if event in ("created", "changed", "deleted"):
            self.topics_generation += 1
        if event == "session" and payload == "lost" and self.active:
            for index in list(self.owned):
                self._unload(index, "the coordination session was lost")

    def partition_error(self, group_id):
        """NONE when this broker coordinates ``group_id`` and has its groups."""
        count = self.broker.num_partitions(OFFSETS_TOPIC)
        if count is None:
            # Kafka creates the topic on FindCoordinator; a group request that
            # comes first (a tool, a client with a cached coordinator) does too.
            self.store.ensure_topic().addErrback(
                lambda f: log.failure("creating __consumer_offsets failed", f)
            )
            count = self.broker.num_partitions(OFFSETS_TOPIC)
            if count is None:
                return COORDINATOR_NOT_AVAILABLE
        index = self.store.partition_of(group_id, count)
        part = self.broker.partitions.get((OFFSETS_TOPIC, index))
        if part is None or not part.is_leader:
            if index in self.owned:
                self._unload(index, "this broker no longer leads it")
            return not_led_error(self.broker, OFFSETS_TOPIC, index, part)
        return self._ensure_owned(part).error

    def any_loading(self):
        return any(o.error == COORDINATOR_LOAD_IN_PROGRESS for o in self.owned.values())

    def sweep_ownership(self):
        """Unload partitions whose leadership moved without a notification."""
        for index, owned in list(self.owned.items()):
            part = self.broker.partitions.get((OFFSETS_TOPIC, index))
            if part is None or not part.is_leader or part.leader_epoch != owned.leader_epoch:
                self._unload(index, "this broker no longer leads it")

    def led_offsets_partitions(self):
        count = self.broker.num_partitions(OFFSETS_TOPIC) or 0
        parts = (self.broker.partitions.get((OFFSETS_TOPIC, i)) for i in range(count))
        return [p for p in parts if p is not None and p.is_leader]

    def coordinator_node(self, group_id):
        """``(node_id, host, port)`` of the broker leading the group's offsets
        partition, or None while it has no (live) leader."""
        return leader_endpoint(self.broker, OFFSETS_TOPIC, self.store.partition_of(group_id))

    # -- loading -------------------------------------------------------------------

    def _ensure_owned(self, part):
        owned = self.owned.get(part.index)
        if owned is not None and owned.leader_epoch == part.leader_epoch:
            return owned
        if owned is not None:
            self._unload(part.index, f"led again in leader epoch {part.leader_epoch}")
        owned = self.owned[part.index] = OwnedPartition(part.index, part.leader_epoch)
        plog = part.log
        if plog.log_end_offset <= plog.log_start_offset:
            # Nothing to read (a new topic): serve at once.
            owned.error = NONE
            owned.loaded = defer.succeed(None)
            return owned
        loader = Loader(self, part, lambda: self.active and self.owned.get(part.index) is owned)
        log.info(
            "loading {topic}-{index} (leader epoch {epoch})",
            topic=OFFSETS_TOPIC,
            index=part.index,
            epoch=part.leader_epoch,
        )
        owned.loaded = loader.run().addCallbacks(
            self._install, self._load_failed, callbackArgs=(owned,), errbackArgs=(owned,)
        )
        return owned

    def _install(self, groups, owned):
        if groups is None or not self.active or self.owned.get(owned.index) is not owned:
            return
        self.groups.update(groups)
        for group in groups.values():
            for member in group.members.values():
                if getattr(group, "kind", None) == "consumer" and member.uses_classic():
                    # KIP-1099: a classic member keeps its own session timeout.
                    self._arm_classic_session(group, member)
                elif getattr(group, "kind", None) == "consumer":
                    config = self.broker.config
                    member.session_timeout_ms = config.group_consumer_session_timeout_ms
                    self._arm_consumer_timers(group, member)
                else:
                    self._schedule_session(group, member)
        owned.error = NONE
        log.info(
            "loaded {n} group(s) from {topic}-{index}",
            n=len(groups),
            topic=OFFSETS_TOPIC,
            index=owned.index,
        )

    def _load_failed(self, failure, owned):
        log.failure(
            "loading {topic}-{index} failed", failure, topic=OFFSETS_TOPIC, index=owned.index
        )
        if self.owned.get(owned.index) is owned:
            # Retried when leadership next changes; clients meanwhile look
            # for the coordinator again.
            owned.error = COORDINATOR_NOT_AVAILABLE

    # -- unloading -----------------------------------------------------------------

    def _unload(self, index, reason):
        owned = self.owned.pop(index, None)
        now = self.now_ms()
        doomed = [g for g in self.groups.values() if self.store.partition_of(g.group_id) == index]
        for group in doomed:
            self.release_group(group, NOT_COORDINATOR)
            group.transition(DEAD, now)
            del self.groups[group.group_id]
        if owned is not None or doomed:
            log.info(
                "unloaded {n} group(s) of {topic}-{index}: {reason}",
                n=len(doomed),
                topic=OFFSETS_TOPIC,
                index=index,
                reason=reason,
            )

    def release_group(self, group, error):
        """Cancel the group's timers and answer its parked requests with ``error``."""
        self._cancel(group.rebalance_call)
        self._cancel(group.sync_call)
        group.rebalance_call = group.sync_call = None
        for call in group.pending_members.values():
            self._cancel(call)
        group.pending_members.clear()
        for member in group.members.values():
            self._cancel(member.heartbeat_call)
            member.heartbeat_call = None
            join, member.join_deferred = member.join_deferred, None
            sync, member.sync_deferred = member.sync_deferred, None
            fire_once(join, join_result(error, member.member_id))
            fire_once(sync, sync_result(error))
