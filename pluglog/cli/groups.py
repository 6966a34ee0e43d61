"""``pluglog groups``: list, describe (with lag), reset-offsets, delete.

The equivalent of kafka-consumer-groups.sh. Offsets are reset with an
OffsetCommit of generation -1, which the coordinator accepts only while the
group has no members — resetting under a live consumer would be overwritten
by its next commit anyway, so that is refused with a clear message.
"""

import struct
from datetime import datetime

from pluglog import protocol as codec
from pluglog.cli.common import check, error_name, partitions_of
from pluglog.cli.topics import end_offsets


def add_parser(sub):
    parser = sub.add_parser("groups", help="inspect and manage consumer groups")
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="list group ids").set_defaults(run=list_groups)
    describe = actions.add_parser("describe", help="members, committed offsets and lag")
    describe.add_argument("group")
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


def list_groups(client, args):
    resp = client.request(codec.LIST_GROUPS, 2, {})
    check(resp["error_code"], "ListGroups")
    for group in sorted(resp["groups"], key=lambda g: g["group_id"]):
        print(f"{group['group_id']}\t{group['protocol_type']}")


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


def committed(client, group):
    resp = client.request(codec.OFFSET_FETCH, 5, {"group_id": group, "topics": None})
    check(resp["error_code"], group)
    out = {}
    for topic in resp["topics"]:
        for part in topic["partitions"]:
            check(part["error_code"], f"{topic['name']}-{part['partition_index']}")
            out[(topic["name"], part["partition_index"])] = part["committed_offset"]
    return out


def describe_group(client, args):
    resp = client.request(codec.DESCRIBE_GROUPS, 4, {"groups": [args.group]})
    group = resp["groups"][0]
    check(group["error_code"], args.group)
    owners = {}
    for member in group["members"]:
        for tp in _assignment(member["member_assignment"]):
            owners[tp] = f"{member['member_id']} ({member['client_id']}@{member['client_host']})"
    offsets = committed(client, args.group)
    print(f"Group: {args.group}\tState: {group['group_state']}\tMembers: {len(group['members'])}")
    print("TOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCONSUMER")
    by_topic = {}
    for topic, partition in set(offsets) | set(owners):
        by_topic.setdefault(topic, set()).add(partition)
    for topic in sorted(by_topic):
        ends = end_offsets(client, topic, sorted(by_topic[topic]), -1)
        for partition in sorted(by_topic[topic]):
            current = offsets.get((topic, partition), -1)
            end = ends[partition]
            lag = end - current if current >= 0 else "-"
            shown = current if current >= 0 else "-"
            owner = owners.get((topic, partition), "-")
            print(f"{topic}\t{partition}\t{shown}\t{end}\t{lag}\t{owner}")


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
    resp = client.request(
        codec.OFFSET_COMMIT,
        7,
        {
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
        },
    )
    for part in resp["topics"][0]["partitions"]:
        code = part["error_code"]
        if code in (25, 27, 22):  # UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION
            from pluglog.cli.main import CliError

            raise CliError(
                f"group {args.group} has active members ({error_name(code)}); "
                "stop its consumers before resetting offsets"
            )
        check(code, f"{args.topic}-{part['partition_index']}")
    print(f"Committed new offsets for group {args.group}.")


def delete_group(client, args):
    resp = client.request(codec.DELETE_GROUPS, 1, {"groups_names": [args.group]})
    check(resp["results"][0]["error_code"], args.group)
    print(f"Deleted group {args.group}.")
