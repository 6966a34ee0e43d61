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
from pluglog.errors import COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST, NONE
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


def _client_host(peer):
    # Kafka reports InetAddress.toString(): "/" + address, no port.
    if not peer:
        return ""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host


def _throttled(body):
    body["throttle_time_ms"] = 0
    return body


def handle_find_coordinator(ctx, request):
    def answer(error, message=None, node=None):
        node_id, host, port = node if node is not None else (-1, "", -1)
        return {
            "throttle_time_ms": 0,
            "error_code": error,
            "error_message": message,
            "node_id": node_id,
            "host": host,
            "port": port,
        }

    key_type = request.get("key_type", _KEY_TYPE_GROUP)
    if key_type == _KEY_TYPE_TRANSACTION:
        tc = ctx.broker.txn_coordinator
        if tc is None or not tc.active:
            return answer(COORDINATOR_NOT_AVAILABLE, "the transaction coordinator is not running")
        # Kafka creates __transaction_state on the first lookup too.
        d = tc.store.ensure_topic()
        node_of, what = tc.coordinator_node, "__transaction_state"
    elif key_type == _KEY_TYPE_GROUP:
        gc = coordinator(ctx.broker)
        if not gc.active:
            return answer(COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running")
        # Kafka creates __consumer_offsets when the first client looks for a
        # coordinator, so the first commit does not pay for it.
        d = gc.ensure_offsets_topic()
        node_of, what = gc.coordinator_node, "__consumer_offsets"
    else:
        return answer(INVALID_REQUEST, f"unknown coordinator key type {key_type}")

    def created(_):
        node = node_of(request["key"])
        if node is None:
            return answer(COORDINATOR_NOT_AVAILABLE, f"the key's {what} partition has no leader")
        if ctx.session is not None:
            # The coordinator's endpoint on the listener this client came in on.
            address = endpoint_of(ctx.broker, node[0], ctx.session)
            if address is None:
                return answer(COORDINATOR_NOT_AVAILABLE, "the coordinator lacks this listener")
            node = (node[0], *address)
        return answer(NONE, node=node)

    def failed(failure):
        log.failure("creating {what} failed", failure, what=what)
        return answer(COORDINATOR_NOT_AVAILABLE, f"{what} could not be created")

    return d.addCallbacks(created, failed)


def handle_join_group(ctx, request):
    d = coordinator(ctx.broker).join_group(
        request["group_id"],
        request["member_id"],
        request.get("group_instance_id"),
        ctx.header.client_id or "",
        _client_host(ctx.peer),
        request["session_timeout_ms"],
        request.get("rebalance_timeout_ms", -1),
        request["protocol_type"],
        request["protocols"],
        ctx.version >= 4,
    )
    _abandon_on_close(ctx, request["group_id"], d)
    return d.addCallback(_throttled)


def handle_sync_group(ctx, request):
    d = coordinator(ctx.broker).sync_group(
        request["group_id"],
        request["generation_id"],
        request["member_id"],
        request.get("group_instance_id"),
        request["assignments"],
    )
    _abandon_on_close(ctx, request["group_id"], d)
    return d.addCallback(_throttled)


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


def handle_offset_fetch(ctx, request):
    topics = request.get("topics")
    wanted = None if topics is None else [(t["name"], t["partition_indexes"]) for t in topics]
    error, found = coordinator(ctx.broker).fetch_offsets(request["group_id"], wanted)
    out = []
    for name, parts in found:
        entries = []
        for index, om in parts:
            entries.append(
                {
                    "partition_index": index,
                    "committed_offset": om.offset if om else -1,
                    "committed_leader_epoch": om.leader_epoch if om else -1,
                    "metadata": om.metadata if om else "",
                    "error_code": error,
                }
            )
        out.append({"name": name, "partitions": entries})
    return {"throttle_time_ms": 0, "topics": out, "error_code": error}


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
    error, groups = coordinator(ctx.broker).list_groups()
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "groups": [{"group_id": g, "protocol_type": t} for g, t in groups],
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

__all__ = ["HANDLERS", "coordinator"]
