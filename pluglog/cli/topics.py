"""``pluglog topics``: list, describe (with kafka-topics.sh's health filters),
create, delete, alter-config."""

import sys

from pluglog import protocol as codec
from pluglog.cli import cluster
from pluglog.cli.common import add_json_flag, check, metadata, print_json
from pluglog.cli.routing import router
from pluglog.cli.tiered import describe_tiers, tier_line


def add_parser(sub, positive, config_pair):
    parser = sub.add_parser("topics", help="manage topics")
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="list topic names")
    add_json_flag(listing)
    listing.set_defaults(run=list_topics)
    describe = actions.add_parser("describe", help="partitions, offsets and configs")
    add_json_flag(describe)
    describe.add_argument("topic", nargs="?", help="required unless a health filter is given")
    cluster.add_topic_filters(describe)
    describe.set_defaults(run=describe_topic)
    create = actions.add_parser("create", help="create a topic")
    create.add_argument("topic")
    create.add_argument(
        "--partitions", type=positive, default=None, help="default: the broker's num.partitions"
    )
    create.add_argument(
        "--replication-factor",
        type=positive,
        default=None,
        help="replicas per partition (default: the broker's default.replication.factor)",
    )
    create.add_argument(
        "--config",
        type=config_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config, e.g. min.insync.replicas=2 (repeatable)",
    )
    create.set_defaults(run=create_topic)
    delete = actions.add_parser("delete", help="delete a topic")
    delete.add_argument("topic")
    delete.set_defaults(run=delete_topic)
    alter = actions.add_parser("alter-config", help="set or delete topic configs")
    alter.add_argument("topic")
    alter.add_argument("--set", type=config_pair, action="append", default=[])
    alter.add_argument("--delete", action="append", default=[])
    alter.set_defaults(run=alter_config)


def list_topics(client, args):
    names = sorted(topic["name"] for topic in metadata(client, None)["topics"])
    if getattr(args, "json", False):
        return print_json(names)
    for name in names:
        print(name)


def end_offsets(
    client, topic, partitions, timestamp, skip_leaderless=False, isolation_level=0, version=5
):
    """``{partition: offset}`` for ``timestamp`` (-2 earliest, -1 latest,
    -4 the local log's start with ``version=8``), asked of each partition's
    leader; ``skip_leaderless`` leaves out partitions that have none instead
    of failing. ``isolation_level=1`` (read_committed): "latest" is the last
    stable offset."""
    out = {}
    for leader, parts in router(client).by_leader(topic, partitions, skip_leaderless):
        wanted = [{"partition_index": p, "timestamp": timestamp} for p in parts]
        resp = leader.request(
            codec.LIST_OFFSETS,
            version,
            {
                "replica_id": -1,
                "isolation_level": isolation_level,
                "topics": [
                    {
                        "name": topic,
                        "partitions": wanted,
                    }
                ],
            },
        )
        for entry in resp["topics"][0]["partitions"]:
            check(entry["error_code"], f"{topic}-{entry['partition_index']}")
            out[entry["partition_index"]] = entry["offset"]
    return out


def local_starts(client, topic, partitions):
    """``{partition: local log start}`` (ListOffsets v8 EARLIEST_LOCAL), or
    ``{}`` from a broker without it."""
    try:
        return end_offsets(client, topic, partitions, -4, skip_leaderless=True, version=8)
    except Exception:  # an older broker (UNSUPPORTED_VERSION) has no remote tier
        return {}


def tiered_note(start, local_start):
    """The describe line's tail for a tiered partition: where the local log
    starts, when offsets below it are in the remote tier."""
    if start is None or local_start is None or local_start <= start:
        return ""
    return f"\tLocalStart: {local_start} (remote: {local_start - start} offsets)"


def _tier_fields(tiers):
    """A tiered partition's JSON fields (none for an untiered topic)."""
    if tiers is None:
        return {}
    return {
        "local_bytes": tiers["local_bytes"],
        "remote_start_offset": tiers["remote_start"],
        "remote_end_offset": tiers["remote_end"],
        "remote_bytes": tiers["remote_bytes"],
    }


def describe_topic(client, args):
    if args.under_replicated or args.unavailable:
        return cluster.print_unhealthy(client, args)
    if args.topic is None:  # a usage error: exit 2 like argparse's
        print(
            "pluglog: topics describe: name a topic, or give --under-replicated/--unavailable",
            file=sys.stderr,
        )
        return 2
    topic = metadata(client, [args.topic], allow_create=False)["topics"][0]
    check(topic["error_code"], args.topic)
    parts = sorted(p["partition_index"] for p in topic["partitions"])
    # A partition without a live leader shows "-" instead of failing the command.
    start = end_offsets(client, args.topic, parts, -2, skip_leaderless=True)
    end = end_offsets(client, args.topic, parts, -1, skip_leaderless=True)
    local = local_starts(client, args.topic, parts)
    resp = client.request(
        codec.DESCRIBE_CONFIGS,
        1,
        {
            "resources": [
                {"resource_type": 2, "resource_name": args.topic, "configuration_keys": None}
            ]
        },
    )
    result = resp["results"][0]
    check(result["error_code"], args.topic, result["error_message"])
    tiered = any(
        item["name"] == "remote.storage.enable" and item["value"] == "true"
        for item in result["configs"]
    )
    # A tiered topic's local and remote tiers, per partition (pluglog.cli.tiered).
    tiers = describe_tiers(client, args.topic, parts, local) if tiered else {}
    if getattr(args, "json", False):
        return print_json(
            {
                "topic": args.topic,
                "partitions": [
                    {
                        "partition": p["partition_index"],
                        "leader": p["leader_id"],
                        "replicas": p["replica_nodes"],
                        "isr": p["isr_nodes"],
                        "start_offset": start.get(p["partition_index"]),
                        "local_start_offset": local.get(p["partition_index"]),
                        "end_offset": end.get(p["partition_index"]),
                        **_tier_fields(tiers.get(p["partition_index"])),
                    }
                    for p in sorted(topic["partitions"], key=lambda p: p["partition_index"])
                ],
                "configs": {
                    item["name"]: {"value": item["value"], "override": item["config_source"] == 1}
                    for item in result["configs"]
                },
            }
        )
    print(f"Topic: {args.topic}\tPartitionCount: {len(parts)}")
    for p in topic["partitions"]:
        index = p["partition_index"]
        print(
            f"\tPartition: {index}\tLeader: {p['leader_id']}\tReplicas: {p['replica_nodes']}\t"
            f"Isr: {p['isr_nodes']}\tStart: {start.get(index, '-')}\tEnd: {end.get(index, '-')}"
            + (
                tier_line(tiers[index])
                if index in tiers
                else tiered_note(start.get(index), local.get(index))
            )
        )
    for item in result["configs"]:
        marker = "*" if item["config_source"] == 1 else " "
        print(f"\t{marker} {item['name']}={item['value']}")


def create_topic(client, args):
    resp = client.request(
        codec.CREATE_TOPICS,
        4,
        {
            "topics": [
                {
                    "name": args.topic,
                    "num_partitions": args.partitions or -1,
                    # -1: the broker's default.replication.factor, as in Kafka.
                    "replication_factor": args.replication_factor or -1,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in args.config],
                }
            ],
            "timeout_ms": 30000,
            "validate_only": False,
        },
    )
    result = resp["topics"][0]
    check(result["error_code"], args.topic, result["error_message"])
    print(f"Created topic {args.topic}.")


def delete_topic(client, args):
    resp = client.request(
        codec.DELETE_TOPICS, 3, {"topic_names": [args.topic], "timeout_ms": 30000}
    )
    check(resp["responses"][0]["error_code"], args.topic)
    print(f"Deleted topic {args.topic}.")


def alter_config(client, args):
    changes = [{"name": k, "config_operation": 0, "value": v} for k, v in args.set]
    changes += [{"name": k, "config_operation": 1, "value": None} for k in args.delete]
    resp = client.request(
        codec.INCREMENTAL_ALTER_CONFIGS,
        0,
        {
            "resources": [{"resource_type": 2, "resource_name": args.topic, "configs": changes}],
            "validate_only": False,
        },
    )
    result = resp["responses"][0]
    check(result["error_code"], args.topic, result["error_message"])
    print(f"Updated configs of {args.topic}.")
