"""The classic group coordinator: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

Kafka's ``ClassicGroup`` state machine (kafka-protocol.md §5): Empty ->
PreparingRebalance -> CompletingRebalance -> Stable, plus Dead for deleted
(or unloaded) groups. Timers run on the broker's reactor clock
(``callLater``), one session timer per member and one rebalance timer per
group; tests drive a ``task.Clock``. A JoinGroup or SyncGroup that must wait
for other members is parked as a Deferred on its member and fired when the
phase completes.

This broker coordinates the groups of the ``__consumer_offsets`` partitions
it leads (:mod:`.ownership`): group requests for other groups get
NOT_COORDINATOR, those of a partition still loading
COORDINATOR_LOAD_IN_PROGRESS, and a partition whose leadership moves away
takes its groups with it.

Lifecycle: :meth:`GroupCoordinator.start` loads the offsets partitions this
broker leads (one read chunk per reactor turn, answering
COORDINATOR_LOAD_IN_PROGRESS meanwhile) and returns a Deferred that fires
when that is done; :meth:`stop` cancels every timer and answers parked
requests with NOT_COORDINATOR. SyncGroup, Heartbeat, LeaveGroup and sessions
live in :mod:`.members`, offsets and the admin APIs in :mod:`.offsets`.
"""

import uuid

from twisted.internet import defer, task

from pluglog.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NONE,
    NOT_COORDINATOR,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_SERVER_ERROR,
)
from pluglog.group.consumer import ConsumerGroupOperations, is_consumer_group
from pluglog.group.consumer_classic import ClassicMembersOperations
from pluglog.group.members import MemberOperations, fire_once, join_result, sync_result
from pluglog.group.model import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    Group,
    Member,
)
from pluglog.group.offsets import OffsetOperations
from pluglog.group.ownership import PartitionOwnership
from pluglog.group.store import OffsetStore, coordinator_error, group_key, group_value
from pluglog.group.txn_offsets import TxnOffsetOperations
from pluglog.logsafe import SafeLogger

log = SafeLogger()


class GroupCoordinator(
    MemberOperations,
    ConsumerGroupOperations,
    ClassicMembersOperations,
    OffsetOperations,
    TxnOffsetOperations,
    PartitionOwnership,
):
    """The consumer groups of the offsets partitions this broker leads."""

    def __init__(self, broker):
        self.broker = broker
        self.reactor = broker.reactor
        config = broker.config
        self.min_session_timeout_ms = config.group_min_session_timeout_ms
        self.max_session_timeout_ms = config.group_max_session_timeout_ms
        self.initial_rebalance_delay_ms = config.group_initial_rebalance_delay_ms
        self.offsets_retention_ms = config.offsets_retention_minutes * 60000
        self.store = OffsetStore(broker)
        self.groups = {}
        #: offsets partition index -> OwnedPartition (see :mod:`.ownership`)
        self.owned = {}
        self.active = False
        #: True until the partitions led at start are loaded.
        self.loading = False
        self._expiry_call = None
        #: bumped by every topic change (see :meth:`cluster_event`)
        self.topics_generation = 0

    # -- lifecycle ---------------------------------------------------------------

    def start(self):
        """Load the offsets partitions led here; the Deferred fires (with
        this coordinator) when their groups are served."""
        self.active = True
        self.loading = True
        self.broker.coordinator.add_listener(self.cluster_event)
        loads = [self._ensure_owned(part).loaded for part in self.led_offsets_partitions()]
        # Start-up always ends on a later reactor turn, so the first requests
        # see COORDINATOR_LOAD_IN_PROGRESS as they would with data to read.
        loads.append(task.deferLater(self.reactor, 0, lambda: None))

        def loaded(_):
            if not self.active:
                return self
            self.loading = False
            self._schedule_expiry()
            log.info(
                "group coordinator serving {n} group(s) of {p} offsets partition(s)",
                n=len(self.groups),
                p=len(self.owned),
            )
            return self

        return defer.gatherResults(loads).addCallback(loaded)

    def stop(self):
        self.active = False
        if self._expiry_call is not None and self._expiry_call.active():
            self._expiry_call.cancel()
        self.owned.clear()
        for group in self.groups.values():
            self.release_group(group, NOT_COORDINATOR)
        return defer.succeed(None)

    @staticmethod
    def _cancel(call):
        if call is not None and call.active():
            call.cancel()

    def now_ms(self):
        return self.broker.now_ms()

    def group_error(self, group_id):
        """The error every group request gets before looking at the group, or NONE."""
        if not group_id:
            return INVALID_GROUP_ID
        if not self.active:
            return COORDINATOR_NOT_AVAILABLE
        if self.loading:
            return COORDINATOR_LOAD_IN_PROGRESS
        return self.partition_error(group_id)

    def ensure_offsets_topic(self):
        return self.store.ensure_topic()

    # -- JoinGroup ---------------------------------------------------------------

    def join_group(
        self,
        group_id,
        member_id,
        instance_id,
        client_id,
        client_host,
        session_timeout_ms,
        rebalance_timeout_ms,
        protocol_type,
        protocols,
        require_known_member_id,
    ):
        """Returns a Deferred firing with a JoinGroup response body (no throttle)."""
        error = self.group_error(group_id)
        if error == NONE and not (
            self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms
        ):
            error = INVALID_SESSION_TIMEOUT
        if error != NONE:
            return defer.succeed(join_result(error, member_id))
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        protocols = [(p["name"], bytes(p["metadata"])) for p in protocols]
        d = defer.Deferred()
        spec = (client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type)
        group = self.groups.get(group_id)
        if is_consumer_group(group):
            if group.members:
                # KIP-1099: a classic member of a consumer group.
                return self.classic_join(
                    group, member_id, instance_id, spec, protocols, require_known_member_id
                )
            group = self._classic_from_consumer(group)
        if not member_id:
            if group is None:
                group = self.groups[group_id] = Group(group_id, self.now_ms())
            self._join_new_member(group, instance_id, spec, protocols, require_known_member_id, d)
        elif group is None:
            d.callback(join_result(UNKNOWN_MEMBER_ID, member_id))
        else:
            self._join_known_member(group, member_id, instance_id, spec, protocols, d)
        if group is not None and group.is_empty_shell():
            # A refused first join must not leave an empty group behind.
            del self.groups[group_id]
        return d

    def _classic_from_consumer(self, group):
        """An empty consumer group becomes a classic one, keeping its offsets."""
        classic = Group(group.group_id, self.now_ms())
        classic.offsets, classic.pending_txn = group.offsets, group.pending_txn
        self.groups[group.group_id] = classic
        self.store.append(group.group_id, self.consumer_group_tombstones(group)).addErrback(
            lambda f: log.warn("dropping consumer group records failed: {f}", f=f)
        )
        log.info("group {g}: empty consumer group converted to a classic group", g=group.group_id)
        return classic

    def _join_new_member(self, group, instance_id, spec, protocols, require_known, d):
        client_id, _host, session_timeout_ms, _rebalance, protocol_type = spec
        if group.state == DEAD:
            return d.callback(join_result(COORDINATOR_NOT_AVAILABLE))
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            return d.callback(join_result(INCONSISTENT_GROUP_PROTOCOL))
        member_id = f"{instance_id or client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            old_id = group.static_members.get(instance_id)
            if old_id is not None:
                return self._rejoin_static_member(group, old_id, member_id, spec, protocols, d)
        elif require_known:
            # KIP-394: hand out the id first so a client that dies before it
            # learns its id does not leave a member behind for a session.
            call = self.reactor.callLater(
                session_timeout_ms / 1000.0, self._pending_expired, group, member_id
            )
            group.pending_members[member_id] = call
            return d.callback(join_result(MEMBER_ID_REQUIRED, member_id))
        member = Member(member_id, instance_id, *spec, protocols)
        self._add_member_and_rebalance(group, member, d)

    def _join_known_member(self, group, member_id, instance_id, spec, protocols, d):
        protocol_type = spec[4]
        if group.state == DEAD:
            return d.callback(join_result(COORDINATOR_NOT_AVAILABLE, member_id))
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            return d.callback(join_result(INCONSISTENT_GROUP_PROTOCOL, member_id))
        if member_id in group.pending_members:
            if instance_id is not None:
                return d.callback(join_result(UNKNOWN_MEMBER_ID, member_id))
            self._cancel(group.pending_members.pop(member_id))
            member = Member(member_id, None, *spec, protocols)
            return self._add_member_and_rebalance(group, member, d)
        if group.is_static_fenced(member_id, instance_id):
            return d.callback(join_result(FENCED_INSTANCE_ID, member_id))
        member = group.members.get(member_id)
        if member is None or group.state == EMPTY:
            return d.callback(join_result(UNKNOWN_MEMBER_ID, member_id))
        self._schedule_session(group, member)
        unchanged = member.matches(protocols)
        if group.state == COMPLETING_REBALANCE and unchanged:
            return d.callback(self._current_join_result(group, member))
        if group.state == STABLE and unchanged and member_id != group.leader_id:
            return d.callback(self._current_join_result(group, member))
        self._update_member_and_rebalance(group, member, spec, protocols, d)

    def _current_join_result(self, group, member):
        return join_result(
            NONE,
            member.member_id,
            group.generation_id,
            group.protocol_name,
            group.leader_id,
            self._member_list(group) if member.member_id == group.leader_id else (),
        )

    @staticmethod
    def _member_list(group):
        return [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "metadata": m.metadata(group.protocol_name),
            }
            for m in group.members.values()
        ]

    def _set_join_deferred(self, member, d):
        old, member.join_deferred = member.join_deferred, d
        # A client that re-sends JoinGroup has given up on the earlier one.
        fire_once(old, join_result(REBALANCE_IN_PROGRESS, member.member_id))

    def _add_member_and_rebalance(self, group, member, d):
        member.is_new = True
        self._set_join_deferred(member, d)
        if group.state == PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        self._schedule_session(group, member)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} joined")
        self._try_complete_join(group)

    def _update_member_and_rebalance(self, group, member, spec, protocols, d):
        member.client_id, member.client_host = spec[0], spec[1]
        member.session_timeout_ms, member.rebalance_timeout_ms = spec[2], spec[3]
        member.protocols = protocols
        self._set_join_deferred(member, d)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")
        self._try_complete_join(group)

    def _rejoin_static_member(self, group, old_id, new_id, spec, protocols, d):
        member = group.members[old_id]
        # Whoever still waits under the old id is a zombie of this instance.
        join, member.join_deferred = member.join_deferred, None
        sync, member.sync_deferred = member.sync_deferred, None
        fire_once(join, join_result(FENCED_INSTANCE_ID, old_id))
        fire_once(sync, sync_result(FENCED_INSTANCE_ID))
        previous_leader = group.leader_id
        old_protocols = member.protocols
        group.replace_member_id(old_id, new_id)
        member.client_id, member.client_host = spec[0], spec[1]
        member.session_timeout_ms, member.rebalance_timeout_ms = spec[2], spec[3]
        member.protocols = protocols
        self._schedule_session(group, member)
        log.info(
            "group {g}: static member {i} rejoined as {new} (was {old})",
            g=group.group_id,
            i=member.instance_id,
            new=new_id,
            old=old_id,
        )
        if group.state == STABLE and group.select_protocol() == group.protocol_name:
            # Same protocol: keep everyone's assignment. The leader is named
            # by its old id so the rejoined member acts as a follower and
            # just fetches its current assignment with SyncGroup.
            def stored(_):
                d.callback(
                    join_result(
                        NONE,
                        new_id,
                        group.generation_id,
                        group.protocol_name,
                        previous_leader,
                    )
                )

            def not_stored(failure):
                code = coordinator_error(failure, UNKNOWN_SERVER_ERROR)
                log.warn(
                    "persisting static member {id} failed: {why}",
                    id=new_id,
                    why=failure.getErrorMessage(),
                )
                group.replace_member_id(new_id, old_id)
                member.protocols = old_protocols
                d.callback(join_result(code, new_id))

            self._store_group(group).addCallbacks(stored, not_stored)
            return
        member.join_deferred = d
        self._maybe_prepare_rebalance(group, f"static member {member.instance_id} rejoined")
        self._try_complete_join(group)

    # -- rebalancing -------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group, reason):
        if group.state in (STABLE, COMPLETING_REBALANCE, EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group, reason):
        if group.state == COMPLETING_REBALANCE:
            self._reset_assignments(group, REBALANCE_IN_PROGRESS)
        was_empty = group.state == EMPTY
        self._cancel(group.sync_call)
        group.sync_call = None
        group.pending_sync = set()
        group.transition(PREPARING_REBALANCE, self.now_ms())
        self._cancel(group.rebalance_call)
        timeout_ms = group.max_rebalance_timeout_ms()
        log.info(
            "group {g} rebalancing (generation {gen}): {reason}",
            g=group.group_id,
            gen=group.generation_id,
            reason=reason,
        )
        if was_empty and self.initial_rebalance_delay_ms > 0:
            # KIP-134: a new group waits for more members before its first
            # generation, extending while members keep arriving.
            group.initial_delay = True
            group.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, timeout_ms)
            remaining = max(timeout_ms - self.initial_rebalance_delay_ms, 0)
            group.rebalance_call = self.reactor.callLater(
                delay / 1000.0, self._initial_delay_expired, group, remaining
            )
        else:
            group.initial_delay = False
            group.rebalance_call = self.reactor.callLater(
                timeout_ms / 1000.0, self._complete_join, group
            )

    def _initial_delay_expired(self, group, remaining_ms):
        if group.new_member_added and remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, remaining_ms)
            group.rebalance_call = self.reactor.callLater(
                delay / 1000.0, self._initial_delay_expired, group, remaining_ms - delay
            )
            return
        group.initial_delay = False
        self._complete_join(group)

    def _try_complete_join(self, group):
        if group.state == PREPARING_REBALANCE and not group.initial_delay and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group):
        self._cancel(group.rebalance_call)
        group.rebalance_call = None
        group.initial_delay = False
        if group.state != PREPARING_REBALANCE:
            return
        for member in [m for m in group.members.values() if m.join_deferred is None]:
            log.info(
                "group {g}: member {m} did not rejoin in time; removing it",
                g=group.group_id,
                m=member.member_id,
            )
            self._cancel(member.heartbeat_call)
            fire_once(member.sync_deferred, sync_result(UNKNOWN_MEMBER_ID))
            member.sync_deferred = None
            group.remove(member.member_id)
        group.generation_id += 1
        now = self.now_ms()
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(EMPTY, now)
            log.info(
                "group {g} is empty (generation {gen})", g=group.group_id, gen=group.generation_id
            )
            self._store_group(group).addErrback(
                lambda f: log.failure("persisting empty group failed", f)
            )
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(COMPLETING_REBALANCE, now)
        log.info(
            "group {g} generation {gen}: {n} member(s), protocol {p}, leader {leader}",
            g=group.group_id,
            gen=group.generation_id,
            n=len(group.members),
            p=group.protocol_name,
            leader=group.leader_id,
        )
        group.pending_sync = set(group.members)
        self._cancel(group.sync_call)
        group.sync_call = self.reactor.callLater(
            group.max_rebalance_timeout_ms() / 1000.0,
            self._sync_expired,
            group,
            group.generation_id,
        )
        for member in list(group.members.values()):
            d, member.join_deferred = member.join_deferred, None
            member.is_new = False
            # Kafka re-arms every session here: members get a whole session
            # to send SyncGroup after the (maybe long) wait in JoinGroup.
            self._schedule_session(group, member, heard=False)
            fire_once(d, self._current_join_result(group, member))

    def _sync_expired(self, group, generation):
        """Remove members that joined this generation but never sent SyncGroup.

        Without this a leader that keeps heartbeating but never syncs would
        leave every other member parked forever.
        """
        group.sync_call = None
        if group.generation_id != generation or group.state not in (
            COMPLETING_REBALANCE,
            STABLE,
        ):
            return
        missing = [m for m in group.pending_sync if m in group.members]
        group.pending_sync = set()
        for member_id in missing:
            member = group.members.get(member_id)
            if member is not None:
                log.info(
                    "group {g}: member {m} sent no SyncGroup within the rebalance timeout; "
                    "removing it",
                    g=group.group_id,
                    m=member_id,
                )
                self._remove_member(group, member, "no SyncGroup in time")

    def _reset_assignments(self, group, error):
        for member in group.members.values():
            member.assignment = b""
            d, member.sync_deferred = member.sync_deferred, None
            fire_once(d, sync_result(error))

    def _store_group(self, group):
        return self.store.append(group.group_id, [(group_key(group.group_id), group_value(group))])
