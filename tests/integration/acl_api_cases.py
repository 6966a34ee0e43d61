"""The table of tests/integration/test_acl_apis.py: one row per API with the
request body, the ACL the check needs and Kafka's error code without it."""

TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53


def partitions(topic, **fields):
    return [{"name": topic, "partitions": [dict({"partition_index": 0}, **fields)]}]


def first_partition(key="topics"):
    return lambda r: r[key][0]["partitions"][0]["error_code"]


def _top(r):
    return r["error_code"]


def _partition_else_top(r):
    # OffsetDelete of an unknown group answers GROUP_ID_NOT_FOUND with no topics.
    return r["topics"][0]["partitions"][0]["error_code"] if r["topics"] else r["error_code"]


def _epoch_body(replica_id):
    def body(t, _g):
        return {
            "replica_id": replica_id,
            "topics": [
                {
                    "topic": t,
                    "partitions": [
                        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}
                    ],
                }
            ],
        }

    return body


def _fetch_replica(t, _g):
    from pluglog.client.blocking import fetch_body

    return dict(fetch_body(t, {0: 0}), replica_id=7)


def commit(t, g):
    return {
        "group_id": g,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "retention_time_ms": -1,
        "topics": partitions(t, committed_offset=0, committed_metadata=""),
    }


def _create_topic(_t, g):
    topic = {
        "name": f"c-{g}",
        "num_partitions": 1,
        "replication_factor": 1,
        "assignments": [],
        "configs": [],
    }
    return {"topics": [topic], "timeout_ms": 10000, "validate_only": True}


def case(name, api_key, version, body, needed, denied, error=_top, pre=()):
    """A row of :data:`CASES`: the API, its request ``body(topic, group)``,
    the ACL ``needed`` (``{t}``/``{g}`` stand for the topic and group), the
    code ``denied`` without it as ``error(answer)`` reads it, and the ACLs
    ``pre`` granted for both calls."""
    return (name, api_key, version, body, list(pre), needed, error, denied)


def cluster(operation):
    return (CLUSTER, "kafka-cluster", operation)


def _results(r):
    return r["results"][0]["error_code"]


def _topics(r):
    return r["topics"][0]["error_code"]


def _txn(transactional_id):
    return lambda t, g: {
        "transactional_id": transactional_id and transactional_id.format(g=g),
        "transaction_timeout_ms": 60000,
    }


CASES = [
    case(
        "ListOffsets",
        2,
        1,
        lambda t, g: {"replica_id": -1, "topics": partitions(t, timestamp=-1)},
        (TOPIC, "{t}", "DESCRIBE"),
        TOPIC_DENIED,
        first_partition(),
    ),
    case(
        "OffsetForLeaderEpoch",
        23,
        3,
        _epoch_body(-1),
        (TOPIC, "{t}", "DESCRIBE"),
        TOPIC_DENIED,
        first_partition(),
    ),
    case(
        "OffsetForLeaderEpoch-replica",
        23,
        3,
        _epoch_body(0),
        cluster("CLUSTER_ACTION"),
        CLUSTER_DENIED,
        first_partition(),
        pre=[(TOPIC, "{t}", "DESCRIBE")],
    ),
    case(
        "Fetch-replica",
        1,
        11,
        _fetch_replica,
        cluster("CLUSTER_ACTION"),
        CLUSTER_DENIED,
        pre=[(TOPIC, "{t}", "READ")],
    ),
    case(
        "DeleteRecords",
        21,
        1,
        lambda t, g: {"topics": partitions(t, offset=0), "timeout_ms": 5000},
        (TOPIC, "{t}", "DELETE"),
        TOPIC_DENIED,
        first_partition(),
    ),
    case(
        "CreatePartitions",
        37,
        1,
        lambda t, g: {
            "topics": [{"name": t, "count": 2, "assignments": None}],
            "timeout_ms": 5000,
            "validate_only": True,
        },
        (TOPIC, "{t}", "ALTER"),
        TOPIC_DENIED,
        _results,
    ),
    case(
        "DeleteGroups",
        42,
        1,
        lambda t, g: {"groups_names": [g]},
        (GROUP, "{g}", "DELETE"),
        GROUP_DENIED,
        _results,
    ),
    case(
        "OffsetDelete-group",
        47,
        0,
        lambda t, g: {"group_id": g, "topics": partitions(t)},
        (GROUP, "{g}", "DELETE"),
        GROUP_DENIED,
        pre=[(TOPIC, "{t}", "READ")],
    ),
    case(
        "OffsetDelete-topic",
        47,
        0,
        lambda t, g: {"group_id": g, "topics": partitions(t)},
        (TOPIC, "{t}", "READ"),
        TOPIC_DENIED,
        _partition_else_top,
        pre=[(GROUP, "{g}", "DELETE")],
    ),
    case(
        "ConsumerGroupHeartbeat",
        68,
        0,
        lambda t, g: {
            "group_id": g,
            "member_id": "m",
            "member_epoch": 0,
            "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": [t],
            "topic_partitions": [],
        },
        (GROUP, "{g}", "READ"),
        GROUP_DENIED,
    ),
    case(
        "ConsumerGroupDescribe",
        69,
        0,
        lambda t, g: {"group_ids": [g], "include_authorized_operations": False},
        (GROUP, "{g}", "DESCRIBE"),
        GROUP_DENIED,
        lambda r: r["groups"][0]["error_code"],
    ),
    case(
        "FindCoordinator-batched",
        10,
        4,
        lambda t, g: {"key_type": 0, "coordinator_keys": [g]},
        (GROUP, "{g}", "DESCRIBE"),
        GROUP_DENIED,
        lambda r: r["coordinators"][0]["error_code"],
    ),
    case(
        "OffsetFetch-groups",
        9,
        8,
        lambda t, g: {"groups": [{"group_id": g, "topics": None}], "require_stable": False},
        (GROUP, "{g}", "DESCRIBE"),
        GROUP_DENIED,
        lambda r: r["groups"][0]["error_code"],
    ),
    case(
        "DescribeGroups",
        15,
        3,
        lambda t, g: {"groups": [g], "include_authorized_operations": False},
        (GROUP, "{g}", "DESCRIBE"),
        GROUP_DENIED,
        lambda r: r["groups"][0]["error_code"],
    ),
    case(
        "OffsetCommit-group",
        8,
        2,
        commit,
        (GROUP, "{g}", "READ"),
        GROUP_DENIED,
        first_partition(),
        pre=[(TOPIC, "{t}", "READ")],
    ),
    case(
        "OffsetCommit-topic",
        8,
        2,
        commit,
        (TOPIC, "{t}", "READ"),
        TOPIC_DENIED,
        first_partition(),
        pre=[(GROUP, "{g}", "READ")],
    ),
    case(
        "InitProducerId-idempotent",
        22,
        1,
        _txn(None),
        cluster("IDEMPOTENT_WRITE"),
        CLUSTER_DENIED,
    ),
    case(
        "InitProducerId-write-on-a-topic",
        22,
        1,
        _txn(None),
        (TOPIC, "{t}", "WRITE"),
        CLUSTER_DENIED,
    ),
    case(
        "InitProducerId-transactional", 22, 1, _txn("tx-{g}"), (TXN, "tx-{g}", "WRITE"), TXN_DENIED
    ),
    case(
        "DescribeLogDirs",
        35,
        3,
        lambda t, g: {"topics": None},
        cluster("DESCRIBE"),
        CLUSTER_DENIED,
    ),
    case(
        "ElectLeaders",
        43,
        1,
        lambda t, g: {
            "election_type": 0,
            "topic_partitions": [{"topic": t, "partitions": [0]}],
            "timeout_ms": 5000,
        },
        cluster("ALTER"),
        CLUSTER_DENIED,
    ),
    case(
        "AlterPartitionReassignments",
        45,
        0,
        lambda t, g: {"timeout_ms": 5000, "topics": []},
        cluster("ALTER"),
        CLUSTER_DENIED,
    ),
    case(
        "ListPartitionReassignments",
        46,
        0,
        lambda t, g: {"timeout_ms": 5000, "topics": None},
        cluster("DESCRIBE"),
        CLUSTER_DENIED,
    ),
    case(
        "DescribeClientQuotas",
        48,
        0,
        lambda t, g: {"components": [], "strict": False},
        cluster("DESCRIBE_CONFIGS"),
        CLUSTER_DENIED,
    ),
    case(
        "AlterClientQuotas",
        49,
        0,
        lambda t, g: {
            "entries": [
                {
                    "entity": [{"entity_type": "user", "entity_name": g}],
                    "ops": [{"key": "consumer_byte_rate", "value": 1024.0, "remove": False}],
                }
            ],
            "validate_only": True,
        },
        cluster("ALTER_CONFIGS"),
        CLUSTER_DENIED,
        lambda r: r["entries"][0]["error_code"],
    ),
    case("CreateTopics", 19, 4, _create_topic, (TOPIC, "c-{g}", "CREATE"), TOPIC_DENIED, _topics),
    case("CreateTopics-cluster", 19, 4, _create_topic, cluster("CREATE"), TOPIC_DENIED, _topics),
    case(
        "DescribeUserScramCredentials",
        50,
        0,
        lambda t, g: {"users": None},
        cluster("DESCRIBE"),
        CLUSTER_DENIED,
    ),
    case(
        "AlterUserScramCredentials",
        51,
        0,
        lambda t, g: {"deletions": [{"name": g, "mechanism": 1}], "upsertions": []},
        cluster("ALTER"),
        CLUSTER_DENIED,
        _results,
    ),
]
