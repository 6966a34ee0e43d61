"""Handlers of the group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups
and OffsetDelete.

They only translate between request/response bodies of each version and the
calls of :class:`pluglog.group.GroupCoordinator` (``broker.group_coordinator``);
the state machine and the offset store live in :mod:`pluglog.group`.
FindCoordinator names the broker that leads the group's partition of
``__consumer_offsets`` (creating the topic on first use, as Kafka does), or
answers COORDINATOR_NOT_AVAILABLE while that partition has no leader.
"""

from pluglog import protocol as codec
from pluglog.errors import (
    COORDINATOR_NOT_AVAILABLE,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_REQUEST,
    NONE,
    UNSTABLE_OFFSET_COMMIT,
)
from pluglog.group import GroupCoordinator
from pluglog.logsafe import SafeLogger
from pluglog.security.acls import GROUP
from pluglog.server.authorization import authorized_operations
from pluglog.server.handlers.core import endpoint_of

log = SafeLogger()

#: DescribeGroups v3+ AuthorizedOperations when they were not asked for
_OPERATIONS_OMITTED = -(2**31)
_KEY_TYPE_GROUP = 0
_KEY_TYPE_TRANSACTION = 1


def coordinator(broker):
    """The broker's group coordinator; built and started on first use when the
    broker was not given one at start (unit tests, tools)."""
    gc = getattr(broker, "group_coordinator", None)
    if gc is None:
        gc = broker.group_coordinator = GroupCoordinator(broker)
        gc.start().addErrback(lambda f: None)  # start() has logged it
    return gc


def client_host(peer):
    # Kafka reports InetAddress.toString(): "/" + address, no port.
    if not peer:
        return ""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host


def _throttled(body):
    body["throttle_time_ms"] = 0
    return body


def _coordinator_entry(key, error, message=None, node=None):
    node_id, host, port = node if node is not None else (-1, "", -1)
    return {
        "key": key,
        "error_code": error,
        "error_message": message,
        "node_id": node_id,
        "host": host,
        "port": port,
    }


def handle_find_coordinator(ctx, request):
    """v0-3 look up ``key``; v4+ batch ``coordinator_keys`` (one entry each)."""
    batched = ctx.version >= 4
    keys = request["coordinator_keys"] if batched else [request["key"]]

    def answer(entries):
        if batched:
            return {"throttle_time_ms": 0, "coordinators": entries}
        body = dict(entries[0])
        del body["key"]
        body["throttle_time_ms"] = 0
        return body

    def every(error, message):
        return answer([_coordinator_entry(k, error, message) for k in keys])

    key_type = request.get("key_type", _KEY_TYPE_GROUP)
    if key_type == _KEY_TYPE_TRANSACTION:
        tc = ctx.broker.txn_coordinator
        if tc is None or not tc.active:
            return every(COORDINATOR_NOT_AVAILABLE, "the transaction coordinator is not running")
        # Kafka creates __transaction_state on the first lookup too.
        d = tc.store.ensure_topic()
        node_of, what = tc.coordinator_node, "__transaction_state"
    elif key_type == _KEY_TYPE_GROUP:
        gc = coordinator(ctx.broker)
        if not gc.active:
            return every(COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running")
        # Kafka creates __consumer_offsets when the first client looks for a
        # coordinator, so the first commit does not pay for it.
        d = gc.ensure_offsets_topic()
        node_of, what = gc.coordinator_node, "__consumer_offsets"
    else:
        # Share groups (key type 2, v6) are not served.
        return every(INVALID_REQUEST, f"unknown coordinator key type {key_type}")

    def one(key):
        node = node_of(key)
        if node is None:
            return _coordinator_entry(
                key, COORDINATOR_NOT_AVAILABLE, f"the key's {what} partition has no leader"
            )
        if ctx.session is not None:
            # The coordinator's endpoint on the listener this client came in on.
            address = endpoint_of(ctx.broker, node[0], ctx.session)
            if address is None:
                return _coordinator_entry(
                    key, COORDINATOR_NOT_AVAILABLE, "the coordinator lacks this listener"
                )
            node = (node[0], *address)
        return _coordinator_entry(key, NONE, node=node)

    def created(_):
        return answer([one(k) for k in keys])

    def failed(failure):
        log.failure("creating {what} failed", failure, what=what)
        return every(COORDINATOR_NOT_AVAILABLE, f"{what} could not be created")

    return d.addCallbacks(created, failed)


def handle_join_group(ctx, request):
    d = coordinator(ctx.broker).join_group(
        request["group_id"],
        request["member_id"],
        request.get("group_instance_id"),
        ctx.header.client_id or "",
        client_host(ctx.peer),
        request["session_timeout_ms"],
        request.get("rebalance_timeout_ms", -1),
        request["protocol_type"],
        request["protocols"],
        ctx.version >= 4,
    )
    _abandon_on_close(ctx, request["group_id"], d)

    def answered(body):
        # v7+: the group's protocol type, which a successful join matched.
        body["protocol_type"] = request["protocol_type"] if body["error_code"] == NONE else None
        return _throttled(body)

    return d.addCallback(answered)


def handle_sync_group(ctx, request):
    gc = coordinator(ctx.broker)
    # v5+: the names the member joined with must be the group's.
    known = gc.protocol_of(request["group_id"])
    asked = (request.get("protocol_type"), request.get("protocol_name"))
    if known is not None and any(a is not None and a != k for a, k in zip(asked, known)):
        return {
            "throttle_time_ms": 0,
            "error_code": INCONSISTENT_GROUP_PROTOCOL,
            "protocol_type": None,
            "protocol_name": None,
            "assignment": b"",
        }
    d = gc.sync_group(
        request["group_id"],
        request["generation_id"],
        request["member_id"],
        request.get("group_instance_id"),
        request["assignments"],
    )
    _abandon_on_close(ctx, request["group_id"], d)

    def answered(body):
        now = gc.protocol_of(request["group_id"]) if body["error_code"] == NONE else None
        now = body.pop("protocol", None) or now
        body["protocol_type"], body["protocol_name"] = now or (None, None)
        return _throttled(body)

    return d.addCallback(answered)


def _abandon_on_close(ctx, group_id, d):
    """A parked JoinGroup/SyncGroup whose connection closes stops holding its
    member (see :meth:`pluglog.group.members.MemberOperations.abandon`)."""
    if d.called or ctx.on_close is None:
        return
    forget = ctx.on_close(lambda: coordinator(ctx.broker).abandon(group_id, d))

    def answered(result):
        forget()
        return result

    d.addBoth(answered)


def handle_heartbeat(ctx, request):
    error = coordinator(ctx.broker).heartbeat(
        request["group_id"],
        request["generation_id"],
        request["member_id"],
        request.get("group_instance_id"),
    )
    return {"throttle_time_ms": 0, "error_code": error}


def handle_leave_group(ctx, request):
    if ctx.version < 3:
        members = [(request["member_id"], None)]
    else:
        members = [(m["member_id"], m.get("group_instance_id")) for m in request["members"]]
    error, errors = coordinator(ctx.broker).leave_group(request["group_id"], members)
    if ctx.version < 3:
        return {"throttle_time_ms": 0, "error_code": error if error != NONE else errors[0]}
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "members": [
            {"member_id": mid, "group_instance_id": iid, "error_code": code}
            for (mid, iid), code in zip(members, errors)
        ],
    }


def handle_offset_commit(ctx, request):
    generation = request.get("generation_id_or_member_epoch", request.get("generation_id", -1))
    d = coordinator(ctx.broker).commit_offsets(
        request["group_id"],
        generation,
        request.get("member_id", ""),
        request.get("group_instance_id"),
        request.get("retention_time_ms", -1),
        request["topics"],
    )
    return d.addCallback(lambda topics: {"throttle_time_ms": 0, "topics": topics})


def _fetched_topics(gc, group_id, found, error, require_stable):
    out = []
    for name, parts in found:
        entries = []
        for index, om in parts:
            code = error
            if code == NONE and require_stable and gc.pending_offset(group_id, (name, index)):
                # KIP-447: a transaction still holds an offset for it.
                code = UNSTABLE_OFFSET_COMMIT
            entries.append(
                {
                    "partition_index": index,
                    "committed_offset": om.offset if om and code == NONE else -1,
                    "committed_leader_epoch": om.leader_epoch if om and code == NONE else -1,
                    "metadata": om.metadata if om and code == NONE else "",
                    "error_code": code,
                }
            )
        out.append({"name": name, "partitions": entries})
    return out


def fetch_group_offsets(ctx, group_id, topics, stable, member=(None, -1)):
    """One group's OffsetFetch answer: ``(error, topics)``; ``member`` is
    v9's (member id, member epoch)."""
    gc = coordinator(ctx.broker)
    wanted = None if topics is None else [(t["name"], t["partition_indexes"]) for t in topics]
    error, found = gc.fetch_offsets(group_id, wanted, *member)
    return error, _fetched_topics(gc, group_id, found, error, stable)


def handle_offset_fetch(ctx, request):
    stable = request.get("require_stable", False)
    if ctx.version < 8:
        error, topics = fetch_group_offsets(ctx, request["group_id"], request["topics"], stable)
        return {"throttle_time_ms": 0, "topics": topics, "error_code": error}
    groups = []
    for g in request["groups"]:
        member = (g.get("member_id"), g.get("member_epoch", -1))
        error, topics = fetch_group_offsets(ctx, g["group_id"], g["topics"], stable, member)
        groups.append({"group_id": g["group_id"], "topics": topics, "error_code": error})
    return {"throttle_time_ms": 0, "groups": groups}


def handle_describe_groups(ctx, request):
    gc = coordinator(ctx.broker)
    groups = []
    for group_id in request["groups"]:
        described = gc.describe_group(group_id)
        described["authorized_operations"] = _OPERATIONS_OMITTED
        if request.get("include_authorized_operations"):
            # KIP-430: the principal's operations (all of them without an authorizer).
            described["authorized_operations"] = authorized_operations(ctx, GROUP, group_id)
        groups.append(described)
    return {"throttle_time_ms": 0, "groups": groups}


def handle_list_groups(ctx, request):
    # v4+ filter by state, v5+ by group type; Kafka compares both case-insensitively.
    states = {s.lower() for s in request.get("states_filter") or ()}
    types = {t.lower() for t in request.get("types_filter") or ()}
    error, groups = coordinator(ctx.broker).list_groups()
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "groups": [
            {"group_id": g, "protocol_type": t, "group_state": state, "group_type": kind}
            for g, t, state, kind in groups
            if (not states or state.lower() in states) and (not types or kind in types)
        ],
    }


def handle_delete_groups(ctx, request):
    d = coordinator(ctx.broker).delete_groups(request["groups_names"])
    return d.addCallback(
        lambda results: {
            "throttle_time_ms": 0,
            "results": [{"group_id": g, "error_code": code} for g, code in results],
        }
    )


def handle_offset_delete(ctx, request):
    wanted = [
        (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in request["topics"]
    ]
    d = coordinator(ctx.broker).delete_offsets(request["group_id"], wanted)

    def answer(result):
        error, topics = result
        return {
            "error_code": error,
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": name,
                    "partitions": [{"partition_index": p, "error_code": c} for p, c in parts],
                }
                for name, parts in topics
            ],
        }

    return d.addCallback(answer)


HANDLERS = {
    codec.FIND_COORDINATOR: handle_find_coordinator,
    codec.JOIN_GROUP: handle_join_group,
    codec.SYNC_GROUP: handle_sync_group,
    codec.HEARTBEAT: handle_heartbeat,
    codec.LEAVE_GROUP: handle_leave_group,
    codec.OFFSET_COMMIT: handle_offset_commit,
    codec.OFFSET_FETCH: handle_offset_fetch,
    codec.DESCRIBE_GROUPS: handle_describe_groups,
    codec.LIST_GROUPS: handle_list_groups,
    codec.DELETE_GROUPS: handle_delete_groups,
    codec.OFFSET_DELETE: handle_offset_delete,
}

__all__ = ["HANDLERS", "client_host", "coordinator"]
