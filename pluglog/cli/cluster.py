"""``pluglog cluster describe`` and the partition-health filters of
``pluglog topics describe`` (``--under-replicated``, ``--unavailable``).

The cluster view comes from DescribeCluster (cluster id, controller, brokers
with their racks) and Metadata (every partition's leader, replicas and ISR),
which any broker answers. The filters follow kafka-topics.sh
``--describe --under-replicated-partitions`` / ``--unavailable-partitions``:
under-replicated means fewer in-sync replicas than assigned ones;
unavailable means no leader, or a leader that is not a live broker.
"""

from pluglog import protocol as codec
from pluglog.cli.common import add_json_flag, check, metadata, print_json

DESCRIBE_CLUSTER_VERSION = 0


def add_parser(sub):
    parser = sub.add_parser("cluster", help="brokers, controller and partition health")
    actions = parser.add_subparsers(dest="action", required=True)
    describe = actions.add_parser(
        "describe", help="cluster id, controller, brokers, partition health"
    )
    add_json_flag(describe)
    describe.set_defaults(run=describe_cluster)


def add_topic_filters(describe):
    """The kafka-topics.sh-style health filters on ``topics describe``."""
    describe.add_argument(
        "--under-replicated",
        action="store_true",
        help="only partitions with fewer in-sync replicas than replicas",
    )
    describe.add_argument(
        "--unavailable",
        action="store_true",
        help="only partitions without a live leader",
    )


def _ids(nodes):
    return ",".join(str(n) for n in nodes)


def under_replicated(partition):
    return len(partition["isr_nodes"]) < len(partition["replica_nodes"])


def unavailable(partition, live):
    return partition["leader_id"] < 0 or partition["leader_id"] not in live


def partition_line(topic, p):
    line = (
        f"\tTopic: {topic}\tPartition: {p['partition_index']}\tLeader: "
        f"{p['leader_id'] if p['leader_id'] >= 0 else 'none'}\t"
        f"Replicas: {_ids(p['replica_nodes'])}\tIsr: {_ids(p['isr_nodes'])}"
    )
    if p.get("offline_replicas"):
        line += f"\tOffline: {_ids(p['offline_replicas'])}"
    return line


def unhealthy_partitions(meta, want_under, want_unavailable):
    """``[(topic, partition entry)]`` matching the filters, in topic order."""
    live = {b["node_id"] for b in meta["brokers"]}
    found = []
    for topic in sorted(meta["topics"], key=lambda t: t["name"]):
        check(topic["error_code"], topic["name"])
        for p in sorted(topic["partitions"], key=lambda p: p["partition_index"]):
            if (want_under and under_replicated(p)) or (want_unavailable and unavailable(p, live)):
                found.append((topic["name"], p))
    return found


def print_unhealthy(client, args):
    """``topics describe [TOPIC] --under-replicated/--unavailable``."""
    meta = metadata(client, None if args.topic is None else [args.topic])
    for topic, p in unhealthy_partitions(meta, args.under_replicated, args.unavailable):
        print(partition_line(topic, p))


def describe_cluster(client, args):
    resp = client.request(
        codec.DESCRIBE_CLUSTER,
        DESCRIBE_CLUSTER_VERSION,
        {"include_cluster_authorized_operations": False},
    )
    check(resp["error_code"], "describe cluster", resp["error_message"])
    controller = resp["controller_id"]
    meta = metadata(client, None)
    live = {b["node_id"] for b in meta["brokers"]}
    parts = [p for t in meta["topics"] for p in t["partitions"]]
    brokers = sorted(resp["brokers"], key=lambda b: b["broker_id"])
    counts = {
        "topics": len(meta["topics"]),
        "partitions": len(parts),
        "under_replicated": sum(under_replicated(p) for p in parts),
        "unavailable": sum(unavailable(p, live) for p in parts),
    }
    if getattr(args, "json", False):
        return print_json(
            {
                "cluster_id": resp["cluster_id"],
                "controller": controller,
                "brokers": [
                    {"id": b["broker_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
                    for b in brokers
                ],
                **counts,
            }
        )
    print(f"ClusterId: {resp['cluster_id']}\tController: {controller}")
    for b in brokers:
        role = "\tController: yes" if b["broker_id"] == controller else ""
        print(
            f"Broker: {b['broker_id']}\tHost: {b['host']}:{b['port']}\t"
            f"Rack: {b['rack'] or '-'}{role}"
        )
    print(
        f"Topics: {counts['topics']}\tPartitions: {counts['partitions']}\t"
        f"UnderReplicated: {counts['under_replicated']}\t"
        f"Unavailable: {counts['unavailable']}"
    )
