"""KIP-1099: classic members in consumer groups, and groups converting online.

A base class of :class:`pluglog.group.coordinator.GroupCoordinator`, beside
the two protocols. With ``group.consumer.migration.policy`` allowing it
(``upgrade`` or ``bidirectional``), a consumer-protocol member joining a
classic group that has members converts it (Kafka's
``convertToConsumerGroup``): the classic members become members of the
consumer group at the classic generation, owning what their last
assignment gave them, which is also the first target. From then on they
keep speaking JoinGroup, SyncGroup, Heartbeat and LeaveGroup, and the
server-side assignor decides for them too:

* JoinGroup updates the member's subscription (read from its consumer
  protocol metadata) and reconciles it with what it says it owns; the
  answer carries its member epoch as the generation and no member list
  (no client-side assignment). SyncGroup answers its assigned partitions,
  or REBALANCE_IN_PROGRESS when the group moved on.
* Heartbeat answers REBALANCE_IN_PROGRESS when the member must rejoin: the
  group epoch is ahead of its epoch, it must revoke partitions, or the
  partitions it waits for were released. A member that does not rejoin
  (or sync) within its rebalance timeout is removed, as is one whose
  classic session runs out.

When the last consumer-protocol member leaves (or is removed) and classic
members remain, the group converts back (``downgrade`` or
``bidirectional``; Kafka's ``convertToClassicGroup``): a classic group at
the group epoch, each member's assignment from the target, rebalancing
at once. Each conversion is written as Kafka writes it: tombstones for the
old kind's records, then the new kind's records, in one batch.
"""

import uuid

from twisted.internet import defer

from pluglog.client.assignors import decode_assignment, decode_subscription, encode_assignment
from pluglog.errors import (
    FENCED_INSTANCE_ID,
    GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    MEMBER_ID_REQUIRED,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)
from pluglog.group.consumer_model import (
    CONSUMER,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    ConsumerMember,
    freeze,
    minus,
    reconcile,
)
from pluglog.group.consumer_records import (
    current_records,
    group_records,
    member_records,
    member_tombstones,
    target_records,
)
from pluglog.group.members import fire_once, join_result, sync_result
from pluglog.group.model import DEAD, STABLE, Group, Member
from pluglog.group.store import group_key, group_value
from pluglog.logsafe import SafeLogger

log = SafeLogger()


class ClassicMembersOperations:
    """Online conversion and the classic APIs of classic members of consumer groups."""

    def migration_allows(self, direction):
        """``direction``: "upgrade" or "downgrade"."""
        policy = self.broker.config.group_consumer_migration_policy
        return policy in ("bidirectional", direction)

    # -- upgrade -----------------------------------------------------------------

    def upgrade_classic_group(self, group, records):
        """A consumer group made of classic ``group`` (Kafka's
        ``validateOnlineUpgrade`` then ``convertToConsumerGroup``), or None
        when it may not convert."""
        if not self.migration_allows("upgrade"):
            log.info("group {g}: online upgrade refused by the policy", g=group.group_id)
            return None
        if group.protocol_type != CONSUMER or len(group.members) > self._consumer_config()[3]:
            return None
        topics = {name: meta.topic_id for name, meta in self.broker.coordinator.topics().items()}
        members = []
        try:
            for m in group.members.values():
                subscription = decode_subscription(m.metadata(group.protocol_name))
                owned = decode_assignment(m.assignment)
                members.append((m, subscription.topics, owned))
        except Exception as exc:  # any malformed embedded protocol refuses the upgrade
            log.info("group {g}: no upgrade, unreadable metadata: {e}", g=group.group_id, e=exc)
            return None
        # Members parked mid-rebalance rejoin the new group.
        for m in group.members.values():
            fire_once(m.join_deferred, join_result(REBALANCE_IN_PROGRESS, m.member_id))
            fire_once(m.sync_deferred, sync_result(REBALANCE_IN_PROGRESS))
            m.join_deferred = m.sync_deferred = None
            self._cancel(m.heartbeat_call)
        for call in [group.rebalance_call, group.sync_call, *group.pending_members.values()]:
            self._cancel(call)
        # Whatever still holds the classic group (a SyncGroup being stored) sees it gone.
        group.transition(DEAD, self.now_ms())
        converted = ConsumerGroup(group.group_id, self.now_ms())
        converted.offsets, converted.pending_txn = group.offsets, group.pending_txn
        epoch = group.generation_id
        converted.group_epoch = converted.assignment_epoch = epoch
        for m, names, owned in members:
            member = ConsumerMember(m.member_id, m.client_id, m.client_host)
            member.instance_id = m.instance_id
            member.subscribed_topic_names = sorted(set(names))
            member.rebalance_timeout_ms = m.rebalance_timeout_ms
            member.session_timeout_ms = m.session_timeout_ms
            member.member_epoch = member.previous_member_epoch = epoch
            by_id = {}
            for topic, partition in owned:
                if topics.get(topic):
                    by_id.setdefault(topics[topic], set()).add(partition)
            member.assigned = freeze(by_id)
            member.classic = (m.session_timeout_ms, list(m.protocols))
            converted.add(member)
            converted.target[member.member_id] = member.assigned
        records.append((group_key(group.group_id), None))
        for member in converted.members.values():
            records += member_records(converted, member)
        records += group_records(converted)
        records += target_records(converted, list(converted.members))
        for member in converted.members.values():
            records += current_records(converted, member)
        self.groups[group.group_id] = converted
        converted.refresh_state(self.now_ms())
        for member in converted.members.values():
            self._arm_classic_session(converted, member)
        log.info(
            "group {g}: classic group with {n} member(s) converted to a consumer group",
            g=group.group_id,
            n=len(converted.members),
        )
        return converted

    # -- downgrade ---------------------------------------------------------------

    def maybe_downgrade(self, group, records, rebalance=True):
        """After a consumer-protocol member left (or a classic static member
        replaced it): convert back when only classic members remain
        (Kafka's ``validateOnlineDowngrade...``). Returns the classic
        group, or None. A replacement does not rebalance: the joining
        member takes the assignment of the one it replaced."""
        if not group.members or not all(m.uses_classic() for m in group.members.values()):
            return None
        if not self.migration_allows("downgrade"):
            log.info("group {g}: online downgrade refused by the policy", g=group.group_id)
            return None
        names = {meta.topic_id: name for name, meta in self.broker.coordinator.topics().items()}
        classic = Group(group.group_id, self.now_ms())
        classic.offsets, classic.pending_txn = group.offsets, group.pending_txn
        classic.generation_id = group.group_epoch
        for m in group.members.values():
            self._cancel(m.heartbeat_call)
            self._cancel(m.revocation_call)
            session, protocols = m.classic
            member = Member(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                session,
                m.rebalance_timeout_ms,
                CONSUMER,
                protocols,
            )
            classic.add(member)
        classic.protocol_name = classic.select_protocol()
        for member in classic.members.values():
            target = group.target.get(member.member_id, {})
            pairs = [(names[t], p) for t, ps in target.items() if t in names for p in ps]
            member.assignment = _assignment_bytes(pairs, member.metadata(classic.protocol_name))
        classic.state = STABLE  # loaded as it stands, not a transition
        records += self.consumer_group_tombstones(group)
        records.append((group_key(classic.group_id), group_value(classic)))
        group.transition(DEAD, self.now_ms())
        self.groups[classic.group_id] = classic
        for member in classic.members.values():
            self._schedule_session(classic, member)
        log.info(
            "group {g}: only classic members left; converted to a classic group (generation {e})",
            g=classic.group_id,
            e=classic.generation_id,
        )
        if rebalance:
            self._prepare_rebalance(classic, "downgraded from a consumer group")
        return classic

    # -- the classic APIs on consumer groups -------------------------------------

    def classic_join(self, group, member_id, instance_id, spec, protocols, require_known):
        """JoinGroup of a classic member to consumer group ``group``: a
        Deferred firing with the JoinGroup body."""
        client_id, client_host, session_ms, rebalance_ms, protocol_type = spec
        names = [n for n, _ in protocols]
        if protocol_type != CONSUMER or not _supports(group, names):
            return defer.succeed(join_result(INCONSISTENT_GROUP_PROTOCOL, member_id))
        unknown = not member_id
        member_id = member_id or f"{instance_id or client_id}-{uuid.uuid4()}"
        member = group.members.get(member_id)
        replaced = None
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is not None and known != member_id:
                if not unknown:
                    return defer.succeed(join_result(FENCED_INSTANCE_ID, member_id))
                # A restarted static member takes over its instance's
                # partitions and target, without a rebalance (Kafka's rule).
                previous = group.members[known]
                member = self._replace_static_member(
                    group, previous, member_id, client_id, client_host
                )[0]
                member.classic = previous.classic or (session_ms, protocols)
                replaced = previous

            elif known is None and not unknown and member is None:
                return defer.succeed(join_result(UNKNOWN_MEMBER_ID, member_id))
        elif require_known and unknown:
            return defer.succeed(join_result(MEMBER_ID_REQUIRED, member_id))
        if member is not None and not member.uses_classic():
            return defer.succeed(join_result(UNKNOWN_MEMBER_ID, member_id))
        try:
            subscription = decode_subscription(protocols[0][1])
        except Exception:
            return defer.succeed(join_result(INCONSISTENT_GROUP_PROTOCOL, member_id))
        records = [] if replaced is None else member_tombstones(group.group_id, replaced.member_id)
        new = member is None
        if new:
            if len(group.members) >= self._consumer_config()[3]:
                return defer.succeed(join_result(GROUP_MAX_SIZE_REACHED, member_id))
            member = ConsumerMember(member_id, client_id, client_host)
            member.instance_id = instance_id
            group.add(member)
        before = member.metadata_fields()
        member.client_id, member.client_host = client_id, client_host
        member.subscribed_topic_names = sorted(set(subscription.topics))
        member.rebalance_timeout_ms = rebalance_ms
        member.session_timeout_ms = session_ms
        member.classic = (session_ms, [(n, bytes(m)) for n, m in protocols])
        if new or before[4:7] != member.metadata_fields()[4:7]:
            group.group_epoch += 1
        records += member_records(group, member)
        self._refresh_target(group, records)
        topics = {name: meta.topic_id for name, meta in self.broker.coordinator.topics().items()}
        owned = {}
        for topic, partition in subscription.owned_partitions:
            if topics.get(topic):
                owned.setdefault(topics[topic], set()).add(partition)
        reconcile(group, member, freeze(owned))
        records += current_records(group, member)
        self._cancel(member.revocation_call)
        member.revocation_call = None
        group.refresh_state(self.now_ms())
        generation, protocol = member.member_epoch, protocols[0][0]
        if replaced is not None and not replaced.uses_classic():
            # It replaced the last consumer-protocol member, maybe.
            self.maybe_downgrade(group, records, rebalance=False)

        def stored(code):
            if code != NONE:
                return join_result(code, member_id)
            if self.groups.get(group.group_id) is group and group.members.get(member_id) is member:
                self._arm_classic_session(group, member)
                # SyncGroup must follow within the rebalance timeout.
                member.revocation_call = self.reactor.callLater(
                    member.rebalance_timeout_ms / 1000.0,
                    self._consumer_expired,
                    group,
                    member,
                    "it sent no SyncGroup within its rebalance timeout",
                )
            return join_result(NONE, member_id, generation, protocol, "")

        return self._store_consumer(group, records).addCallback(stored)

    def _classic_member(self, group, member_id, instance_id):
        """``(member, error)`` for SyncGroup/Heartbeat (``validateConsumerGroupMember``)."""
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return None, UNKNOWN_MEMBER_ID
            if known != member_id:
                return None, FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None or not member.uses_classic():
            return None, UNKNOWN_MEMBER_ID
        return member, NONE

    def classic_sync(self, group, generation_id, member_id, instance_id):
        """SyncGroup of a classic member of a consumer group: the body."""
        member, error = self._classic_member(group, member_id, instance_id)
        if error == NONE and generation_id != member.member_epoch:
            error = ILLEGAL_GENERATION
        if error == NONE and (
            group.group_epoch > member.member_epoch and member.state != UNREVOKED_PARTITIONS
        ):
            self._arm_rejoin(group, member)
            error = REBALANCE_IN_PROGRESS
        if error != NONE:
            return sync_result(error)
        self._cancel(member.revocation_call)
        member.revocation_call = None
        self._arm_classic_session(group, member)
        names = {meta.topic_id: name for name, meta in self.broker.coordinator.topics().items()}
        pairs = [(names[t], p) for t, ps in member.assigned.items() if t in names for p in ps]
        session, protocols = member.classic
        body = sync_result(NONE, _assignment_bytes(pairs, protocols[0][1]))
        body["protocol"] = (CONSUMER, protocols[0][0])
        return body

    def classic_heartbeat(self, group, generation_id, member_id, instance_id):
        """Heartbeat of a classic member of a consumer group: the error code."""
        member, error = self._classic_member(group, member_id, instance_id)
        if error != NONE:
            return error
        if generation_id != member.member_epoch:
            return ILLEGAL_GENERATION
        self._arm_classic_session(group, member)
        if (
            member.member_epoch < group.group_epoch
            or member.state == UNREVOKED_PARTITIONS
            or (member.state == UNRELEASED_PARTITIONS and not _waiting(group, member))
        ):
            self._arm_rejoin(group, member)
            return REBALANCE_IN_PROGRESS
        return NONE

    def classic_leave(self, group, members):
        """LeaveGroup naming members of a consumer group: the member errors."""
        records, codes = [], []
        for member_id, instance_id in members:
            if not member_id and instance_id is not None:
                member_id = group.static_members.get(instance_id, "")
                member, error = self._classic_member(group, member_id, instance_id)
            else:
                member, error = self._classic_member(group, member_id, instance_id)
            if error == NONE:
                self._remove_consumer_member(group, member, "LeaveGroup", records)
            codes.append(error)
        self._store_consumer(group, records)
        return codes

    # -- timers ------------------------------------------------------------------

    def _arm_classic_session(self, group, member):
        delay = member.classic[0] / 1000.0 if member.classic else member.session_timeout_ms / 1e3
        if member.heartbeat_call is not None and member.heartbeat_call.active():
            member.heartbeat_call.reset(delay)
        else:
            member.heartbeat_call = self.reactor.callLater(
                delay, self._consumer_expired, group, member, "its session expired"
            )

    def _arm_rejoin(self, group, member):
        """Kafka's join timeout: a member told to rejoin must within its
        rebalance timeout (armed once; JoinGroup cancels it)."""
        if member.revocation_call is None or not member.revocation_call.active():
            member.revocation_call = self.reactor.callLater(
                member.rebalance_timeout_ms / 1000.0,
                self._consumer_expired,
                group,
                member,
                "the classic member did not rejoin within its rebalance timeout",
            )


def _supports(group, names):
    """``ConsumerGroup.supportsClassicProtocols``: a name every classic member has."""
    classic = [m for m in group.members.values() if m.uses_classic()]
    if not classic:
        return bool(names)
    return any(all(n in [p for p, _ in m.classic[1]] for m in classic) for n in names)


def _waiting(group, member):
    """True while a partition of the member's target is still held by another."""
    wanted = minus(group.target.get(member.member_id, {}), member.assigned)
    held = group.owners(exclude=member.member_id)
    return any((t, p) in held for t, ps in wanted.items() for p in ps)


def _assignment_bytes(pairs, metadata):
    """A consumer protocol Assignment at the version of the member's
    Subscription (every version 0-3 has the same fields)."""
    data = encode_assignment(pairs)
    version = int.from_bytes(bytes(metadata[:2]), "big", signed=True) if len(metadata) >= 2 else 0
    return max(0, min(version, 3)).to_bytes(2, "big") + data[2:]
