"""The cluster operator's APIs: DescribeCluster, DescribeLogDirs, ElectLeaders,
AlterPartitionReassignments and ListPartitionReassignments.

DescribeCluster and DescribeLogDirs are answered by any broker (the log dirs
are the answering broker's own). The other three change or read controller
state, so, as in Kafka, only the controller answers them; other brokers say
NOT_CONTROLLER and the client looks the controller up again in Metadata
(kafka-python retries once; librdkafka sends them to the controller it found
in Metadata in the first place). The controller's work is the coordinator's:
``elect_leaders``, ``reassign_partitions`` and ``list_reassignments``.
"""

import os

from twisted.internet import defer
from twisted.logger import Logger

from pluglog import protocol as codec
from pluglog.errors import (
    ELECTION_NOT_NEEDED,
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR,
    KAFKA_STORAGE_ERROR,
    NONE,
    NOT_CONTROLLER,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from pluglog.interfaces import ILogDirStorage
from pluglog.security.acls import CLUSTER, CLUSTER_NAME
from pluglog.server.authorization import authorized_operations
from pluglog.server.handlers.common import error_code
from pluglog.server.handlers.core import _brokers

log = Logger()

# DescribeCluster's endpoint errors (Kafka's Errors.java; only this module uses them).
MISMATCHED_ENDPOINT_TYPE = 114
UNSUPPORTED_ENDPOINT_TYPE = 115
AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)
ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1


def _not_controller(broker):
    """The NOT_CONTROLLER message if this broker is not the controller, else None."""
    controller = broker.coordinator.controller_id()
    if controller == broker.node_id:
        return None
    return f"broker {broker.node_id} is not the controller (the controller is {controller})"


def _partition_exists(topics, topic, partition):
    meta = topics.get(topic)
    return meta is not None and 0 <= partition < meta.num_partitions


@defer.inlineCallbacks
def _ask_controller(call, keys, what):
    """Run a coordinator call that answers ``{(t, p): None | KafkaError}``;
    a failure of the call as a whole becomes every partition's error."""
    try:
        outcome = yield call()
    except Exception as exc:
        log.failure("{what} failed in the coordinator", what=what)
        outcome = {tp: exc for tp in keys}
    results = {}
    for tp in keys:
        exc = outcome.get(tp)
        results[tp] = (NONE, None) if exc is None else (error_code(exc), str(exc))
    return results


def _reassignment_entry(value):
    """``(replicas, adding, removing)`` from a coordinator's entry, a tuple
    or a dict with ListPartitionReassignments' field names."""
    if isinstance(value, dict):
        return value["replicas"], value["adding_replicas"], value["removing_replicas"]
    return value


def _group_by_topic(results, topic_key, entries_key, entry):
    """``{(topic, partition): value}`` -> Kafka's topic / partitions nesting."""
    by_topic = {}
    for (topic, partition), value in results.items():
        by_topic.setdefault(topic, []).append(entry(partition, value))
    return [{topic_key: t, entries_key: parts} for t, parts in by_topic.items()]


# -- DescribeCluster -------------------------------------------------------------


def handle_describe_cluster(ctx, request):
    broker = ctx.broker
    endpoint = request.get("endpoint_type", ENDPOINT_BROKERS)
    response = {
        "throttle_time_ms": 0,
        "error_code": NONE,
        "error_message": None,
        "endpoint_type": endpoint,
        "cluster_id": broker.coordinator.cluster_id(),
        "controller_id": broker.coordinator.controller_id(),
        "brokers": [],
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN,
    }
    if request.get("include_cluster_authorized_operations"):
        # KIP-430: the principal's operations (all of them without an authorizer).
        response["cluster_authorized_operations"] = authorized_operations(
            ctx, CLUSTER, CLUSTER_NAME
        )
    if endpoint == ENDPOINT_CONTROLLERS:
        # Kafka's brokers answer this way too: the ZooKeeper-era controller is
        # a broker, not a KRaft controller endpoint.
        response["error_code"] = MISMATCHED_ENDPOINT_TYPE
        response["error_message"] = "this is a broker endpoint; ask for endpoint type 1"
        return response
    if endpoint != ENDPOINT_BROKERS:
        response["error_code"] = UNSUPPORTED_ENDPOINT_TYPE
        response["error_message"] = f"unknown endpoint type {endpoint}"
        return response
    response["brokers"] = [
        {"broker_id": node, "host": host, "port": port, "rack": rack, "is_fenced": False}
        for node, host, port, rack in _brokers(broker, ctx.session)
    ]
    return response


# -- DescribeLogDirs -------------------------------------------------------------


def _disk_space(path):
    try:
        stat = os.statvfs(path)
    except OSError:
        return -1, -1
    return stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize


def handle_describe_log_dirs(ctx, request):
    """Every log dir (``log.dirs``) with the size of each partition it holds
    of those this broker hosts (or of the requested ones); a failed dir
    answers KAFKA_STORAGE_ERROR and no partitions, as Kafka's does."""
    broker = ctx.broker
    wanted = request["topics"]
    if wanted is None:
        keys = sorted(broker.partitions)
    else:
        keys = [
            (t["topic"], p)
            for t in wanted
            for p in t["partitions"]
            if (t["topic"], p) in broker.partitions
        ]
    storage = broker.storage
    if ILogDirStorage.providedBy(storage):
        dirs, failed, dir_of = list(storage.data_dirs), storage.failed_dirs(), storage.dir_of
    else:  # one dir (a storage plugin without log dirs)
        dirs, failed, dir_of = list(broker.config.data_dirs[:1]), {}, None
    by_dir = {directory: {} for directory in dirs}
    for key in keys:
        part = broker.partitions[key]
        directory = (dir_of(*key) if dir_of else None) or dirs[0]
        leo = part.log.log_end_offset
        by_dir.setdefault(directory, {}).setdefault(key[0], []).append(
            {
                "partition_index": key[1],
                "partition_size": part.log.size_bytes,
                # Kafka's lag of a current log: how far its end is behind the HW.
                "offset_lag": max(part.high_watermark - leo, 0),
                "is_future_key": False,
            }
        )
    for key, (directory, size, lag) in broker.log_mover.futures().items():
        if key not in broker.partitions or (wanted is not None and key not in keys):
            continue
        by_dir.setdefault(directory, {}).setdefault(key[0], []).append(
            {
                "partition_index": key[1],
                "partition_size": size,
                # Kafka's lag of a future log: how far it is behind the current one.
                "offset_lag": lag,
                "is_future_key": True,
            }
        )
    results = []
    for directory, topics in by_dir.items():
        if directory in failed:
            results.append({"error_code": KAFKA_STORAGE_ERROR, "log_dir": directory, "topics": []})
            continue
        total, usable = _disk_space(directory)
        results.append(
            {
                "error_code": NONE,
                "log_dir": os.path.abspath(directory),
                "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
                "total_bytes": total,
                "usable_bytes": usable,
            }
        )
    return {"throttle_time_ms": 0, "error_code": NONE, "results": results}


def handle_alter_replica_log_dirs(ctx, request):
    """Move partitions of this broker between its log dirs (broker.log_dirs)."""
    broker = ctx.broker
    results = {}
    for entry in request["dirs"]:
        destination = os.path.abspath(entry["path"]) if entry["path"] else ""
        for topic in entry["topics"]:
            parts = results.setdefault(topic["name"], [])
            for index in topic["partitions"]:
                code = broker.log_mover.request(topic["name"], index, destination)
                parts.append({"partition_index": index, "error_code": code})
    return {
        "throttle_time_ms": 0,
        "results": [{"topic_name": name, "partitions": parts} for name, parts in results.items()],
    }


# -- ElectLeaders ----------------------------------------------------------------


def _election_not_needed(broker, topics, topic, partition, preferred, live):
    """Kafka's ELECTION_NOT_NEEDED: the preferred replica already leads, or
    (unclean) the partition has a live leader."""
    state = broker.coordinator.partition_state(topic, partition)
    if state is None:
        return False
    if preferred:
        replicas = topics[topic].replicas(partition)
        return bool(replicas) and state.leader == replicas[0]
    return state.leader in live


@defer.inlineCallbacks
def handle_elect_leaders(ctx, request):
    broker = ctx.broker
    preferred = request.get("election_type", ELECTION_PREFERRED) != ELECTION_UNCLEAN
    topics = broker.coordinator.topics()  # once: coordinators hand out copies
    wanted = request["topic_partitions"]
    if wanted is None:
        partitions = [
            (name, p) for name, meta in sorted(topics.items()) for p in range(meta.num_partitions)
        ]
    else:
        partitions = [(t["topic"], p) for t in wanted for p in t["partitions"]]
    results = {}
    refused = _not_controller(broker)
    live = {node for node, _host, _port, _rack in broker.coordinator.brokers()}
    to_elect = []
    for topic, partition in partitions:
        if refused is not None:
            # v0 has no top-level error code: say it on every partition.
            results[(topic, partition)] = (NOT_CONTROLLER, refused)
        elif not _partition_exists(topics, topic, partition):
            results[(topic, partition)] = (
                UNKNOWN_TOPIC_OR_PARTITION,
                f"no partition {topic}-{partition}",
            )
        elif _election_not_needed(broker, topics, topic, partition, preferred, live):
            results[(topic, partition)] = (
                ELECTION_NOT_NEEDED,
                "the preferred replica already leads"
                if preferred
                else "the partition has a live leader",
            )
        else:
            results[(topic, partition)] = None
            to_elect.append((topic, partition))
    if to_elect:
        elected = yield _ask_controller(
            lambda: broker.coordinator.elect_leaders(to_elect, preferred=preferred),
            to_elect,
            "ElectLeaders",
        )
        results.update(elected)
    return {
        "throttle_time_ms": 0,
        "error_code": NONE if refused is None else NOT_CONTROLLER,
        "replica_election_results": _group_by_topic(
            results,
            "topic",
            "partition_result",
            lambda p, r: {"partition_id": p, "error_code": r[0], "error_message": r[1]},
        ),
    }


# -- AlterPartitionReassignments / ListPartitionReassignments --------------------


def _check_assignment(topics, topic, partition, replicas, allow_rf_change, live):
    """The (code, message) refusing a reassignment before the controller
    sees it, or None."""
    if not _partition_exists(topics, topic, partition):
        return UNKNOWN_TOPIC_OR_PARTITION, f"no partition {topic}-{partition}"
    if replicas is None:  # a cancellation: the coordinator knows what is pending
        return None
    if not replicas:
        return INVALID_REPLICA_ASSIGNMENT, "the replica list is empty"
    if len(set(replicas)) != len(replicas):
        return INVALID_REPLICA_ASSIGNMENT, f"duplicate broker ids in {replicas}"
    dead = [r for r in replicas if r not in live]
    if dead:
        return INVALID_REPLICA_ASSIGNMENT, f"brokers {dead} are not alive"
    current = topics[topic].replicas(partition)
    if not allow_rf_change and len(replicas) != len(current):
        return (
            INVALID_REPLICATION_FACTOR,
            f"the replication factor would change from {len(current)} to {len(replicas)}",
        )
    return None


@defer.inlineCallbacks
def handle_alter_partition_reassignments(ctx, request):
    broker = ctx.broker
    allow_rf_change = request.get("allow_replication_factor_change", True)
    response = {
        "throttle_time_ms": 0,
        "allow_replication_factor_change": allow_rf_change,
        "error_code": NONE,
        "error_message": None,
        "responses": [],
    }
    refused = _not_controller(broker)
    if refused is not None:
        response["error_code"], response["error_message"] = NOT_CONTROLLER, refused
        return response
    live = {node for node, _host, _port, _rack in broker.coordinator.brokers()}
    topics = broker.coordinator.topics()
    results = {}
    moves = {}
    for topic in request["topics"]:
        for want in topic["partitions"]:
            tp = (topic["name"], want["partition_index"])
            replicas = want["replicas"]
            problem = _check_assignment(topics, *tp, replicas, allow_rf_change, live)
            results[tp] = problem or (NONE, None)
            if problem is None:
                moves[tp] = None if replicas is None else list(replicas)
    if moves:
        moved = yield _ask_controller(
            lambda: broker.coordinator.reassign_partitions(moves),
            list(moves),
            "AlterPartitionReassignments",
        )
        results.update(moved)
    response["responses"] = _group_by_topic(
        results,
        "name",
        "partitions",
        lambda p, r: {"partition_index": p, "error_code": r[0], "error_message": r[1]},
    )
    return response


def handle_list_partition_reassignments(ctx, request):
    broker = ctx.broker
    response = {
        "throttle_time_ms": 0,
        "error_code": NONE,
        "error_message": None,
        "topics": [],
    }
    refused = _not_controller(broker)
    if refused is not None:
        response["error_code"], response["error_message"] = NOT_CONTROLLER, refused
        return response
    ongoing = {
        tp: _reassignment_entry(v) for tp, v in broker.coordinator.list_reassignments().items()
    }
    wanted = request["topics"]
    if wanted is not None:
        keys = {(t["name"], p) for t in wanted for p in t["partition_indexes"]}
        ongoing = {tp: v for tp, v in ongoing.items() if tp in keys}
    response["topics"] = _group_by_topic(
        dict(sorted(ongoing.items())),
        "name",
        "partitions",
        lambda p, v: {
            "partition_index": p,
            "replicas": list(v[0]),
            "adding_replicas": list(v[1]),
            "removing_replicas": list(v[2]),
        },
    )
    return response


HANDLERS = {
    codec.DESCRIBE_CLUSTER: handle_describe_cluster,
    codec.ALTER_REPLICA_LOG_DIRS: handle_alter_replica_log_dirs,
    codec.DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
    codec.ELECT_LEADERS: handle_elect_leaders,
    codec.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
    codec.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
}
