"""SyncGroup, Heartbeat, LeaveGroup and member sessions of the group coordinator.

A base class of :class:`pluglog.group.coordinator.GroupCoordinator`, which
provides the rebalance steps used here (``_prepare_rebalance``,
``_try_complete_join``, ``_reset_assignments``, ``_store_group``). Every
request from a member restarts its session timer; a member parked in
JoinGroup or SyncGroup is never expired, because clients stop heartbeating
while such a request is outstanding (the rebalance timeout bounds that wait).
A parked request whose connection closes is abandoned (:meth:`abandon`): no
answer can reach its client any more, so the member counts as not waiting
and its session runs from its last request. Without that, a static member
closed during a rebalance (librdkafka sends no LeaveGroup for those) stayed
until the rebalance completed plus a whole session.
"""

from twisted.internet import defer

from pluglog.errors import (
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_SERVER_ERROR,
)
from pluglog.group.model import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from pluglog.group.store import coordinator_error
from pluglog.logsafe import SafeLogger

log = SafeLogger()


def join_result(error, member_id="", generation_id=-1, protocol_name="", leader="", members=()):
    return {
        "error_code": error,
        "generation_id": generation_id,
        "protocol_name": protocol_name or "",
        "leader": leader or "",
        "member_id": member_id,
        "members": list(members),
    }


def sync_result(error, assignment=b""):
    return {"error_code": error, "assignment": assignment}


def fire_once(deferred, result):
    """Answer a parked request unless it was answered already."""
    if deferred is not None and not deferred.called:
        deferred.callback(result)


class MemberOperations:
    """SyncGroup/Heartbeat/LeaveGroup; needs the coordinator's rebalance steps."""

    # -- SyncGroup ---------------------------------------------------------------

    def sync_group(self, group_id, generation_id, member_id, instance_id, assignments):
        """Returns a Deferred firing with a SyncGroup response body (no throttle)."""
        error = self.group_error(group_id)
        group = self.groups.get(group_id)
        if error == NONE and getattr(group, "kind", None) == "consumer":
            return defer.succeed(self.classic_sync(group, generation_id, member_id, instance_id))
        if error == NONE:
            error = self._member_error(group, member_id, instance_id, generation_id)
        if error == NONE and group.state == EMPTY:
            error = UNKNOWN_MEMBER_ID
        elif error == NONE and group.state == PREPARING_REBALANCE:
            error = REBALANCE_IN_PROGRESS
        if error != NONE:
            return defer.succeed(sync_result(error))
        member = group.members[member_id]
        group.pending_sync.discard(member_id)
        self._schedule_session(group, member)
        if group.state == STABLE:
            return defer.succeed(sync_result(NONE, member.assignment))
        d = defer.Deferred()
        old, member.sync_deferred = member.sync_deferred, d
        fire_once(old, sync_result(REBALANCE_IN_PROGRESS))
        if member_id == group.leader_id:
            self._leader_sync(group, {a["member_id"]: bytes(a["assignment"]) for a in assignments})
        return d

    def _leader_sync(self, group, assignments):
        generation = group.generation_id
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")

        def stored(_):
            if group.state != COMPLETING_REBALANCE or group.generation_id != generation:
                return
            group.transition(STABLE, self.now_ms())
            for member in group.members.values():
                d, member.sync_deferred = member.sync_deferred, None
                fire_once(d, sync_result(NONE, member.assignment))

        def not_stored(failure):
            # Kafka's storeGroup translation; a group unloaded meanwhile is
            # Dead and its members were already told NOT_COORDINATOR.
            code = coordinator_error(failure, UNKNOWN_SERVER_ERROR)
            log.warn(
                "persisting group {g} failed: {why}",
                g=group.group_id,
                why=failure.getErrorMessage(),
            )
            if group.state == COMPLETING_REBALANCE and group.generation_id == generation:
                self._reset_assignments(group, code)
                self._prepare_rebalance(group, "its metadata could not be stored")

        self._store_group(group).addCallbacks(stored, not_stored)

    def _member_error(self, group, member_id, instance_id, generation_id):
        """Checks shared by SyncGroup, Heartbeat and member commits."""
        if group is None or getattr(group, "kind", None) == "consumer":
            # A consumer group (KIP-848) has no classic members.
            return UNKNOWN_MEMBER_ID
        if group.state == DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if group.is_static_fenced(member_id, instance_id):
            return FENCED_INSTANCE_ID
        if member_id not in group.members:
            return UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ILLEGAL_GENERATION
        return NONE

    # -- Heartbeat and sessions --------------------------------------------------

    def heartbeat(self, group_id, generation_id, member_id, instance_id):
        """Returns the Heartbeat error code."""
        error = self.group_error(group_id)
        if error != NONE:
            return error
        group = self.groups.get(group_id)
        if getattr(group, "kind", None) == "consumer":
            return self.classic_heartbeat(group, generation_id, member_id, instance_id)
        error = self._member_error(group, member_id, instance_id, generation_id)
        if error != NONE:
            return error
        if group.state == EMPTY:
            return UNKNOWN_MEMBER_ID
        self._schedule_session(group, group.members[member_id])
        return REBALANCE_IN_PROGRESS if group.state == PREPARING_REBALANCE else NONE

    def _schedule_session(self, group, member, heard=True):
        """(Re)start the session timer; ``heard``: a request of the member's."""
        delay = member.session_timeout_ms / 1000.0
        if heard:
            member.heard_at = self.reactor.seconds()
        call = member.heartbeat_call
        if call is not None and call.active():
            call.reset(delay)
        else:
            member.heartbeat_call = self.reactor.callLater(
                delay, self._session_expired, group, member
            )

    def _session_expired(self, group, member):
        if group.members.get(member.member_id) is not member:
            return
        if member.join_deferred is not None or member.sync_deferred is not None:
            # Clients do not heartbeat while a JoinGroup or SyncGroup is
            # parked; the rebalance timeout bounds that wait instead.
            self._schedule_session(group, member, heard=False)
            return
        log.info("group {g}: session of member {m} expired", g=group.group_id, m=member.member_id)
        self._remove_member(group, member, "session timeout")

    def abandon(self, group_id, deferred):
        """The connection of a parked JoinGroup/SyncGroup (``deferred``) closed.

        The member stops counting as waiting, so a rebalance no longer waits
        for it and its session expires ``session.timeout.ms`` after its last
        request (now, if that is past). A client that reconnects and sends
        the request again parks it anew.
        """
        group = self.groups.get(group_id)
        if group is None:
            return
        for member in group.members.values():
            if member.join_deferred is deferred:
                member.join_deferred = None
                what = "JoinGroup"
            elif member.sync_deferred is deferred:
                member.sync_deferred = None
                what = "SyncGroup"
            else:
                continue
            log.info(
                "group {g}: member {m} closed its connection with a {what} pending",
                g=group_id,
                m=member.member_id,
                what=what,
            )
            left = member.heard_at + member.session_timeout_ms / 1000.0 - self.reactor.seconds()
            self._cancel(member.heartbeat_call)
            member.heartbeat_call = self.reactor.callLater(
                max(left, 0.0), self._session_expired, group, member
            )
            return

    def _pending_expired(self, group, member_id):
        if group.pending_members.pop(member_id, None) is not None:
            self._try_complete_join(group)
            if group.is_empty_shell() and self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]

    def _remove_member(self, group, member, reason):
        self._cancel(member.heartbeat_call)
        join, member.join_deferred = member.join_deferred, None
        sync, member.sync_deferred = member.sync_deferred, None
        fire_once(join, join_result(UNKNOWN_MEMBER_ID, member.member_id))
        fire_once(sync, sync_result(UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.state == PREPARING_REBALANCE:
            self._try_complete_join(group)
        elif group.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} left ({reason})")

    # -- LeaveGroup --------------------------------------------------------------

    def leave_group(self, group_id, members):
        """``members`` is ``[(member_id, instance_id)]``; returns (error, [errors])."""
        error = self.group_error(group_id)
        if error != NONE:
            return error, [error] * len(members)
        group = self.groups.get(group_id)
        if group is None:
            return NONE, [UNKNOWN_MEMBER_ID] * len(members)
        if getattr(group, "kind", None) == "consumer":
            return NONE, self.classic_leave(group, members)
        if group.state == DEAD:
            return COORDINATOR_NOT_AVAILABLE, [COORDINATOR_NOT_AVAILABLE] * len(members)
        return NONE, [self._leave_one(group, mid, iid) for mid, iid in members]

    def _leave_one(self, group, member_id, instance_id):
        if not member_id and instance_id is not None:
            member_id = group.static_members.get(instance_id)
            if member_id is None:
                return UNKNOWN_MEMBER_ID
        elif group.is_static_fenced(member_id, instance_id):
            return FENCED_INSTANCE_ID
        if member_id in group.pending_members:
            self._cancel(group.pending_members.pop(member_id))
            self._try_complete_join(group)
            return NONE
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        self._remove_member(group, member, "LeaveGroup")
        return NONE
