"""The KIP-848 consumer group protocol of the coordinator: ConsumerGroupHeartbeat.

A base class of :class:`pluglog.group.coordinator.GroupCoordinator`, beside
the classic protocol. One heartbeat joins (member epoch 0), leaves (-1; a
static member's -2 is taken as a leave too), or reports what the member
owns and gets its next step (:func:`pluglog.group.consumer_model.reconcile`).
Any change of membership, subscription or of the subscribed topics'
partitions bumps the group epoch; the next heartbeat then has the group's
server-side assignor (:mod:`.assignors`, ``group.consumer.assignors``) make
a new target assignment, whose epoch becomes the group epoch. Members reach
the target through revocation first, and take partitions only once their
previous owners let them go.

Each heartbeat that changes something appends Kafka's records for it
(:mod:`.consumer_records`) as one batch and answers once it is stored, so a
coordinator that takes over the partition reloads the same group. Members
that send nothing for ``group.consumer.session.timeout.ms`` are removed, as
are those that do not revoke within their rebalance timeout.

An empty group of either kind becomes the other kind, keeping its committed
offsets. Groups with members convert as ``group.consumer.migration.policy``
allows (:mod:`.consumer_classic`, KIP-1099); otherwise a
ConsumerGroupHeartbeat to a classic group with members answers
GROUP_ID_NOT_FOUND.
"""

import uuid

from twisted.internet import defer

from pluglog.errors import (
    FENCED_MEMBER_EPOCH,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    INVALID_REGULAR_EXPRESSION,
    INVALID_REQUEST,
    NONE,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_SERVER_ERROR,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR,
)
from pluglog.group.assignors import ASSIGNORS
from pluglog.group.consumer_admin import ConsumerGroupAdmin, is_consumer_group
from pluglog.group.consumer_model import (
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    ConsumerMember,
    freeze,
    reconcile,
)
from pluglog.group.consumer_records import (
    current_records,
    group_records,
    member_records,
    member_tombstones,
    target_records,
)
from pluglog.group.store import coordinator_error, group_key
from pluglog.group.topic_regex import compile_topic_regex
from pluglog.logsafe import SafeLogger

log = SafeLogger()

LEAVE, STATIC_LEAVE = -1, -2


class ConsumerGroupOperations(ConsumerGroupAdmin):
    """ConsumerGroupHeartbeat, sessions, revocation timeouts, persistence."""

    def _consumer_config(self):
        config = self.broker.config
        return (
            config.group_consumer_assignors.split(","),
            config.group_consumer_session_timeout_ms,
            config.group_consumer_heartbeat_interval_ms,
            config.group_consumer_max_size,
        )

    def consumer_heartbeat(self, request, client_id, client_host):
        """Returns a Deferred firing with a ConsumerGroupHeartbeat response body."""
        interval = self.broker.config.group_consumer_heartbeat_interval_ms

        def answer(error, message=None, member=None, assignment=None, epoch=None):
            return {
                "throttle_time_ms": 0,
                "error_code": error,
                "error_message": message,
                "member_id": member.member_id if member is not None else None,
                "member_epoch": epoch
                if epoch is not None
                else (member.member_epoch if member is not None else -1),
                "heartbeat_interval_ms": interval,
                "assignment": assignment,
            }

        group_id = request["group_id"]
        error, message = self._heartbeat_request_error(request)
        if error == NONE:
            error = self.group_error(group_id)
        if error != NONE:
            return defer.succeed(answer(error, message))
        epoch = request["member_epoch"]
        records = []
        group, error, message = self._consumer_group_for(group_id, epoch == 0, records)
        if error != NONE:
            return defer.succeed(answer(error, message))
        if epoch in (LEAVE, STATIC_LEAVE):
            member = group.members.get(request["member_id"])
            if member is None:
                return defer.succeed(answer(UNKNOWN_MEMBER_ID, "unknown member"))
            if epoch == STATIC_LEAVE and member.instance_id is not None:
                # A static member going away to come back (a restart): it
                # keeps its partitions until its session runs out.
                member.member_epoch = STATIC_LEAVE
                records += current_records(group, member)
                group.refresh_state(self.now_ms())
            else:
                self._remove_consumer_member(group, member, "it left", records)
                self.maybe_downgrade(group, records)
            d = self._store_consumer(group, records)
            return d.addCallback(
                lambda code: answer(code, None, member, epoch=epoch if code == NONE else None)
            )
        member, error, message = self._heartbeat_member(group, request, client_id, client_host)
        if error != NONE:
            # A conversion done on the way is kept, as Kafka keeps it.
            d = self._store_consumer(group, records)
            return d.addCallback(lambda _code: answer(error, message))
        joined = epoch == 0
        # A static member taking over from its previous instance is no new member.
        replaced = member.previous_member_epoch == STATIC_LEAVE and joined
        if replaced:
            records += member_tombstones(group.group_id, member.replaced_id)
        changed = self._update_subscription(group, member, request, joined and not replaced)
        if joined or changed:
            records += member_records(group, member)
        self._refresh_target(group, records)
        owned = _owned(request["topic_partitions"])
        if reconcile(group, member, owned) or joined:
            records += current_records(group, member)
        self._arm_consumer_timers(group, member)
        group.refresh_state(self.now_ms())
        send = joined or bool(records) or (owned is not None and owned != member.assigned)
        assignment = _assignment(member.assigned) if send else None
        d = self._store_consumer(group, records)
        return d.addCallback(lambda code: answer(code, None, member, assignment))

    # -- request checks ----------------------------------------------------------

    def _heartbeat_request_error(self, request):
        """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``."""
        epoch = request["member_epoch"]
        if not request["group_id"]:
            return INVALID_REQUEST, "GroupId can't be empty."
        if request["instance_id"] == "":
            return INVALID_REQUEST, "InstanceId can't be empty."
        if epoch < STATIC_LEAVE:
            return INVALID_REQUEST, f"MemberEpoch {epoch} is invalid."
        if epoch != 0 and not request["member_id"]:
            return INVALID_REQUEST, "MemberId can't be empty."
        if epoch == 0:
            if request["rebalance_timeout_ms"] == -1:
                return INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."
            if request["topic_partitions"]:
                return INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."
            if request["subscribed_topic_names"] is None and not request.get(
                "subscribed_topic_regex"
            ):
                return INVALID_REQUEST, "SubscribedTopicNames must be set in first request."
        assignor = request["server_assignor"]
        if assignor is not None and assignor not in self._consumer_config()[0]:
            return UNSUPPORTED_ASSIGNOR, f"ServerAssignor {assignor} is not supported."
        regex = request.get("subscribed_topic_regex")
        if regex:
            try:
                compile_topic_regex(regex)
            except ValueError as exc:
                return INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex {regex!r}: {exc}"
        return NONE, None

    def _consumer_group_for(self, group_id, create, records):
        """``(group, error, message)``: the consumer group, converting a
        classic group (KIP-1099; the conversion's records go to ``records``)."""
        group = self.groups.get(group_id)
        if group is not None and not is_consumer_group(group):
            if group.members or group.pending_members:
                converted = self.upgrade_classic_group(group, records) if create else None
                if converted is None:
                    return None, GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
                return converted, NONE, None
            converted = ConsumerGroup(group_id, self.now_ms())
            converted.offsets, converted.pending_txn = group.offsets, group.pending_txn
            self.release_group(group, UNKNOWN_MEMBER_ID)
            self.groups[group_id] = group = converted
            # The classic record goes, or a reload would find both kinds.
            self.store.append(group_id, [(group_key(group_id), None)]).addErrback(
                lambda f: log.warn("dropping the classic record of {g} failed", g=group_id)
            )
            log.info("group {g}: empty classic group converted to a consumer group", g=group_id)
        if group is None:
            if not create:
                return None, GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
            group = self.groups[group_id] = ConsumerGroup(group_id, self.now_ms())
        return group, NONE, None

    def _heartbeat_member(self, group, request, client_id, client_host):
        """``(member, error, message)`` for a join (epoch 0) or a heartbeat."""
        member_id, epoch = request["member_id"], request["member_epoch"]
        member = group.members.get(member_id) if member_id else None
        if epoch == 0:
            instance = request["instance_id"]
            previous = group.members.get(group.static_members.get(instance, ""))
            if previous is not None and previous is not member:
                if previous.member_epoch != STATIC_LEAVE:
                    return (
                        None,
                        UNRELEASED_INSTANCE_ID,
                        f"Static member with instance id {instance} is still in the group.",
                    )
                return self._replace_static_member(
                    group, previous, member_id, client_id, client_host
                )
            if member is not None:
                # A member re-joining with epoch 0 owns nothing any more.
                self._remove_consumer_member(group, member, "it re-joined", [])
            elif len(group.members) >= self._consumer_config()[3]:
                return None, GROUP_MAX_SIZE_REACHED, "The consumer group has reached its max size."
            member = ConsumerMember(member_id or uuid.uuid4().hex, client_id, client_host)
            group.add(member)
            return member, NONE, None
        if member is None:
            return None, UNKNOWN_MEMBER_ID, f"Member {member_id} is not in the group."
        member.client_id, member.client_host = client_id, client_host
        if epoch != member.member_epoch:
            owned = _owned(request["topic_partitions"])
            lost_answer = epoch == member.previous_member_epoch and owned == member.assigned
            if not lost_answer:
                return (
                    None,
                    FENCED_MEMBER_EPOCH,
                    (f"Member epoch {epoch} is not the current {member.member_epoch}."),
                )
        return member, NONE, None

    def _replace_static_member(self, group, previous, member_id, client_id, client_host):
        """Kafka's static member replacement: the new instance takes over the
        member that left with epoch -2, its subscription, partitions and
        target, without bumping the group epoch."""
        member = ConsumerMember(member_id or uuid.uuid4().hex, client_id, client_host)
        for field in (
            "instance_id",
            "rack_id",
            "subscribed_topic_names",
            "subscribed_topic_regex",
            "server_assignor",
            "rebalance_timeout_ms",
            "assigned",
            "pending_revocation",
        ):
            setattr(member, field, getattr(previous, field))
        member.previous_member_epoch = STATIC_LEAVE
        member.replaced_id = previous.member_id
        self._cancel(previous.heartbeat_call)
        self._cancel(previous.revocation_call)
        target = group.target.get(previous.member_id)
        group.remove(previous.member_id)
        if target is not None:
            group.target[member.member_id] = target
        group.add(member)
        log.info(
            "consumer group {g}: static member {i} is back as {m} (was {old})",
            g=group.group_id,
            i=member.instance_id,
            m=member.member_id,
            old=previous.member_id,
        )
        return member, NONE, None

    def _update_subscription(self, group, member, request, joined):
        """Apply the heartbeat's non-null fields; True if the subscription
        changed (which bumps the group epoch)."""
        before = member.metadata_fields()
        names = request["subscribed_topic_names"]
        if names is not None:
            member.subscribed_topic_names = sorted(set(names))
        regex = request.get("subscribed_topic_regex")
        if regex is not None:
            member.subscribed_topic_regex = regex or None
        for field in ("instance_id", "rack_id", "server_assignor"):
            if request[field] is not None:
                setattr(member, field, request[field])
        if request["rebalance_timeout_ms"] != -1:
            member.rebalance_timeout_ms = request["rebalance_timeout_ms"]
        member.session_timeout_ms = self._consumer_config()[1]
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member.member_id
        subscription = before[4:7] != member.metadata_fields()[4:7]
        if joined or subscription:
            group.group_epoch += 1
        return before != member.metadata_fields()

    # -- target assignment -------------------------------------------------------

    def _subscribed_topics(self, group):
        """``{topic_id: (name, partitions)}`` the members subscribe to; kept
        until a topic or the group (its epoch: subscriptions) changes, so a
        heartbeat does not walk every topic of the cluster."""
        key = (self.topics_generation, group.group_epoch)
        if group.topics_cache is not None and group.topics_cache[0] == key:
            return group.topics_cache[1]
        found = self._match_topics(group)
        group.topics_cache = (key, found)
        return found

    def _match_topics(self, group):
        cluster = self.broker.coordinator.topics()
        patterns = [_pattern(m) for m in group.members.values()]
        patterns = [p for p in patterns if p is not None]
        wanted = group.subscribed_topics()
        out = {}
        for name, meta in cluster.items():
            if not meta.topic_id or getattr(meta, "internal", False):
                continue
            if name in wanted or any(p.fullmatch(name) for p in patterns):
                out[meta.topic_id] = (name, meta.num_partitions)
        return out

    def _member_topics(self, member, topics):
        names = set(member.subscribed_topic_names)
        regex = _pattern(member)
        return {
            tid
            for tid, (name, _n) in topics.items()
            if name in names or (regex is not None and regex.fullmatch(name))
        }

    def _refresh_target(self, group, records):
        """Bump the group epoch if the subscribed topics changed, and compute
        a new target assignment when the group epoch is ahead of it."""
        topics = self._subscribed_topics(group)
        seen = {tid: meta for tid, meta in topics.items()}
        if group.topics_seen is not None and seen != group.topics_seen:
            group.group_epoch += 1
        elif group.topics_seen is None and group.target and group.assignment_epoch:
            # Loaded from the log (key 4, the topics' metadata, is not kept):
            # a target that no longer covers exactly the subscribed partitions
            # was made before topics changed while nobody coordinated.
            covered = {(t, p) for a in group.target.values() for t, ps in a.items() for p in ps}
            wanted = {(t, p) for t, (_name, n) in topics.items() for p in range(n)}
            if covered != wanted:
                group.group_epoch += 1
        group.topics_seen = seen
        if group.assignment_epoch >= group.group_epoch:
            return
        assignors = self._consumer_config()[0]
        chosen = [m.server_assignor for m in group.members.values() if m.server_assignor]
        name = max(set(chosen), key=lambda n: (chosen.count(n), n)) if chosen else assignors[0]
        group.assignor_name = name
        members = {m.member_id: self._member_topics(m, topics) for m in group.members.values()}
        counts = {tid: n for tid, (_name, n) in topics.items()}
        previous = dict(group.target)
        target = ASSIGNORS[name](members, counts, previous)
        group.target = {m: freeze(a) for m, a in target.items()}
        group.assignment_epoch = group.group_epoch
        changed = [m for m in group.target if group.target[m] != previous.get(m)]
        records += group_records(group)
        records += target_records(group, changed)

    # -- leaving, sessions, revocation timeouts ---------------------------------

    def _remove_consumer_member(self, group, member, reason, records):
        self._cancel(member.heartbeat_call)
        self._cancel(member.revocation_call)
        member.heartbeat_call = member.revocation_call = None
        group.remove(member.member_id)
        group.group_epoch += 1
        group.refresh_state(self.now_ms())
        records += member_tombstones(group.group_id, member.member_id)
        records += group_records(group)
        log.info(
            "consumer group {g}: member {m} removed ({why}); group epoch {e}",
            g=group.group_id,
            m=member.member_id,
            why=reason,
            e=group.group_epoch,
        )

    def _arm_consumer_timers(self, group, member):
        delay = member.session_timeout_ms / 1000.0
        if member.heartbeat_call is not None and member.heartbeat_call.active():
            member.heartbeat_call.reset(delay)
        else:
            member.heartbeat_call = self.reactor.callLater(
                delay, self._consumer_expired, group, member, "its session expired"
            )
        if member.state == UNREVOKED_PARTITIONS:
            if member.revocation_call is None or not member.revocation_call.active():
                member.revocation_call = self.reactor.callLater(
                    member.rebalance_timeout_ms / 1000.0,
                    self._consumer_expired,
                    group,
                    member,
                    "it did not revoke its partitions within its rebalance timeout",
                )
        else:
            self._cancel(member.revocation_call)
            member.revocation_call = None

    def _consumer_expired(self, group, member, reason):
        if (
            group.members.get(member.member_id) is not member
            or self.groups.get(group.group_id) is not group
        ):
            return
        records = []
        self._remove_consumer_member(group, member, reason, records)
        if not member.uses_classic():
            self.maybe_downgrade(group, records)
        self._store_consumer(group, records)

    def _store_consumer(self, group, records):
        """Append ``records``; a Deferred firing with NONE or the error code."""
        if not records:
            return defer.succeed(NONE)

        def failed(failure):
            code = coordinator_error(failure, UNKNOWN_SERVER_ERROR)
            log.warn(
                "persisting consumer group {g} failed: {why}",
                g=group.group_id,
                why=failure.getErrorMessage(),
            )
            return code

        d = self.store.append(group.group_id, records)
        return d.addCallbacks(lambda _: NONE, failed)


def _pattern(member):
    """The member's compiled regex; None without one, or for one a loaded
    record carries that this broker does not accept (it matches nothing)."""
    if not member.subscribed_topic_regex:
        return None
    try:
        return compile_topic_regex(member.subscribed_topic_regex)
    except ValueError:
        return None


def _owned(topic_partitions):
    if topic_partitions is None:
        return None
    return freeze({tp["topic_id"].hex: tp["partitions"] for tp in topic_partitions})


def _assignment(assigned):
    return {
        "topic_partitions": [
            {"topic_id": uuid.UUID(hex=t), "partitions": sorted(ps)}
            for t, ps in sorted(assigned.items())
        ]
    }
