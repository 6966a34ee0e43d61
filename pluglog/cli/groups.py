"""``pluglog groups``: list, describe (with lag), reset-offsets, delete.

``describe`` asks ConsumerGroupDescribe (v1) first and DescribeGroups for a
classic group, so KIP-848 consumer groups show their members too, each with
the protocol it speaks (a group converted under KIP-1099 holds both).

The equivalent of kafka-consumer-groups.sh. Offsets are reset with an
OffsetCommit of generation -1, which the coordinator accepts only while the
group has no members — resetting under a live consumer would be overwritten
by its next commit anyway, so that is refused with a clear message.

In a cluster each group has its own coordinator (the leader of its
``__consumer_offsets`` partition): group requests go to the broker
FindCoordinator names, ``list`` asks every broker, and log end offsets come
from each partition's leader (:mod:`pluglog.cli.routing`).
"""

import contextlib
import struct
import time
from datetime import datetime

from pluglog import errors
from pluglog import protocol as codec
from pluglog.cli.common import (
    CliError,
    add_json_flag,
    check,
    error_name,
    metadata,
    partitions_of,
    print_json,
)
from pluglog.cli.topics import end_offsets
from pluglog.client.blocking import BlockingClient

#: How long a command waits for a coordinator that is moving or loading.
COORDINATOR_WAIT_S = 15.0
_RETRIABLE = (errors.COORDINATOR_NOT_AVAILABLE, errors.COORDINATOR_LOAD_IN_PROGRESS)


def add_parser(sub):
    parser = sub.add_parser("groups", help="inspect and manage consumer groups")
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="list group ids")
    add_json_flag(listing)
    listing.set_defaults(run=list_groups)
    describe = actions.add_parser("describe", help="members, committed offsets and lag")
    describe.add_argument("group")
    add_json_flag(describe)
    describe.set_defaults(run=describe_group)
    reset = actions.add_parser(
        "reset-offsets", help="move committed offsets (group must be empty)"
    )
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int)
    to.add_argument("--to-datetime", type=_datetime_ms, help="ISO 8601, e.g. 2026-11-22T10:00:00")
    reset.add_argument("--execute", action="store_true", help="commit (default: show the plan)")
    reset.set_defaults(run=reset_offsets)
    delete = actions.add_parser("delete", help="delete an empty group and its offsets")
    delete.add_argument("group")
    delete.set_defaults(run=delete_group)


def _datetime_ms(text):
    import argparse

    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 date-time, got {text!r}") from None
    return int(moment.timestamp() * 1000)


@contextlib.contextmanager
def _connected(client, host, port):
    """``client`` if it is connected to ``host:port``, else a new connection."""
    if (host, port) == client.address:
        yield client
        return
    with BlockingClient(host, port, client_id=client.client_id) as other:
        yield other


def _retry(call, what):
    """Run ``call()`` -> (error code, result) until the coordinator is ready."""
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    while True:
        code, result = call()
        if code not in _RETRIABLE or time.monotonic() >= deadline:
            check(code, what)
            return result
        time.sleep(0.2)


@contextlib.contextmanager
def coordinator(client, group):
    """A client connected to ``group``'s coordinator."""

    def find():
        resp = client.request(codec.FIND_COORDINATOR, 2, {"key": group, "key_type": 0})
        return resp["error_code"], resp

    found = _retry(find, f"FindCoordinator {group}")
    with _connected(client, found["host"], found["port"]) as other:
        yield other


def list_groups(client, args):
    groups = {}
    for broker in metadata(client, [])["brokers"]:
        with _connected(client, broker["host"], broker["port"]) as other:

            def ask(other=other):
                resp = other.request(codec.LIST_GROUPS, 2, {})
                return resp["error_code"], resp

            resp = _retry(ask, f"ListGroups on broker {broker['node_id']}")
        groups.update((g["group_id"], g["protocol_type"]) for g in resp["groups"])
    if getattr(args, "json", False):
        return print_json([{"group": g, "protocol_type": groups[g]} for g in sorted(groups)])
    for group_id in sorted(groups):
        print(f"{group_id}\t{groups[group_id]}")


def _assignment(data):
    """Decode ConsumerProtocolAssignment bytes into {(topic, partition)}."""
    out = set()
    if not data or len(data) < 6:
        return out
    pos = 2  # version
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    for _ in range(max(count, 0)):
        (length,) = struct.unpack_from(">h", data, pos)
        topic = bytes(data[pos + 2 : pos + 2 + length]).decode()
        pos += 2 + length
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for p in struct.unpack_from(f">{n}i", data, pos):
            out.add((topic, p))
        pos += 4 * n
    return out


def on_coordinator(client, group, call, what):
    """``call(coord)`` -> (error code, result) on ``group``'s coordinator,
    found again while the answer is NOT_COORDINATOR (the coordinator moved
    since FindCoordinator named it) and asked again while it is loading, as
    Kafka's admin client does, for up to COORDINATOR_WAIT_S."""
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    while True:
        with coordinator(client, group) as coord:
            code, result = call(coord)
            while code in _RETRIABLE and time.monotonic() < deadline:
                time.sleep(0.2)
                code, result = call(coord)
        if code != errors.NOT_COORDINATOR or time.monotonic() >= deadline:
            check(code, what)
            return result
        time.sleep(0.2)


def group_offsets(client, group):
    """``{(topic, partition): committed offset}`` of ``group``, asked of its
    coordinator (the bootstrap broker need not be it)."""

    def fetch(coord):
        resp = coord.request(codec.OFFSET_FETCH, 5, {"group_id": group, "topics": None})
        return resp["error_code"], resp

    return _offsets_of(on_coordinator(client, group, fetch, group))


def committed(client, group):
    def fetch():
        resp = client.request(codec.OFFSET_FETCH, 5, {"group_id": group, "topics": None})
        return resp["error_code"], resp

    return _offsets_of(_retry(fetch, group))


def _offsets_of(resp):
    out = {}
    for topic in resp["topics"]:
        for part in topic["partitions"]:
            check(part["error_code"], f"{topic['name']}-{part['partition_index']}")
            out[(topic["name"], part["partition_index"])] = part["committed_offset"]
    return out


# ConsumerGroupDescribe v1's MemberType (KIP-1099): which protocol a member of
# a consumer group speaks.
MEMBER_TYPES = {0: "classic", 1: "consumer"}


def _consumer_group(coord, group_id):
    """The group as ConsumerGroupDescribe (KIP-848) tells it, or None when it
    is a classic group (GROUP_ID_NOT_FOUND there), as librdkafka asks."""
    body = {"group_ids": [group_id], "include_authorized_operations": False}

    def describe():
        group = coord.request(codec.CONSUMER_GROUP_DESCRIBE, 1, body)["groups"][0]
        code = group["error_code"]
        return (errors.NONE if code == errors.GROUP_ID_NOT_FOUND else code), group

    group = _retry(describe, group_id)
    if group["error_code"] == errors.GROUP_ID_NOT_FOUND:
        return None
    for member in group["members"]:
        member["partitions"] = {
            (tp["topic_name"], p)
            for tp in member["assignment"]["topic_partitions"]
            for p in tp["partitions"]
        }
        member["protocol"] = MEMBER_TYPES.get(member["member_type"], "consumer")
    return group


def describe_group(client, args):
    with coordinator(client, args.group) as coord:

        def describe():
            group = coord.request(codec.DESCRIBE_GROUPS, 4, {"groups": [args.group]})["groups"][0]
            return group["error_code"], group

        group = _consumer_group(coord, args.group)
        if group is None:
            group = _retry(describe, args.group)
            for member in group["members"]:
                member["partitions"] = _assignment(member["member_assignment"])
                member["protocol"] = "classic"
        offsets = committed(coord, args.group)
    owners = {}
    for member in group["members"]:
        for tp in member["partitions"]:
            owners[tp] = f"{member['member_id']} ({member['client_id']}@{member['client_host']})"
    by_topic = {}
    for topic, partition in set(offsets) | set(owners):
        by_topic.setdefault(topic, set()).add(partition)
    rows = []
    for topic in sorted(by_topic):
        ends = end_offsets(client, topic, sorted(by_topic[topic]), -1)
        for partition in sorted(by_topic[topic]):
            current = offsets.get((topic, partition), -1)
            end = ends[partition]
            rows.append((topic, partition, current, end, owners.get((topic, partition))))
    if getattr(args, "json", False):
        return print_json(
            {
                "group": args.group,
                "state": group["group_state"],
                "members": [
                    {
                        "member_id": m["member_id"],
                        "client_id": m["client_id"],
                        "client_host": m["client_host"],
                        "protocol": m["protocol"],
                    }
                    for m in group["members"]
                ],
                "partitions": [
                    {
                        "topic": topic,
                        "partition": partition,
                        "committed_offset": current if current >= 0 else None,
                        "log_end_offset": end,
                        "lag": end - current if current >= 0 else None,
                        "consumer": owner,
                    }
                    for topic, partition, current, end, owner in rows
                ],
            }
        )
    kinds = sorted({m["protocol"] for m in group["members"]})
    print(
        f"Group: {args.group}\tState: {group['group_state']}\tMembers: {len(group['members'])}"
        f"\tProtocols: {','.join(kinds) or '-'}"
    )
    print("TOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCONSUMER")
    for topic, partition, current, end, owner in rows:
        lag = end - current if current >= 0 else "-"
        shown = current if current >= 0 else "-"
        print(f"{topic}\t{partition}\t{shown}\t{end}\t{lag}\t{owner or '-'}")


def reset_offsets(client, args):
    partitions = partitions_of(client, args.topic)
    if args.to_offset is not None:
        targets = dict.fromkeys(partitions, args.to_offset)
    else:
        timestamp = -2 if args.to_earliest else -1 if args.to_latest else args.to_datetime
        targets = end_offsets(client, args.topic, partitions, timestamp)
        if args.to_datetime is not None:
            latest = end_offsets(client, args.topic, partitions, -1)
            targets = {p: o if o >= 0 else latest[p] for p, o in targets.items()}
    for partition in partitions:
        print(f"{args.topic}\t{partition}\t{targets[partition]}")
    if not args.execute:
        print("(dry run: add --execute to commit these offsets)")
        return
    body = {
        "group_id": args.group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": args.topic,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": targets[p],
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                    for p in partitions
                ],
            }
        ],
    }
    with coordinator(client, args.group) as coord:
        resp = coord.request(codec.OFFSET_COMMIT, 7, body)
    for part in resp["topics"][0]["partitions"]:
        code = part["error_code"]
        if code in (25, 27, 22):  # UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION
            raise CliError(
                f"group {args.group} has active members ({error_name(code)}); "
                "stop its consumers before resetting offsets"
            )
        check(code, f"{args.topic}-{part['partition_index']}")
    print(f"Committed new offsets for group {args.group}.")


def delete_group(client, args):
    with coordinator(client, args.group) as coord:
        resp = coord.request(codec.DELETE_GROUPS, 1, {"groups_names": [args.group]})
    check(resp["results"][0]["error_code"], args.group)
    print(f"Deleted group {args.group}.")
