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


# (id, api key, version, body(topic, group), ACLs granted for both calls,
#  the ACL the check needs, the error of the answer, the code without it)
CASES = [
    (
        "ListOffsets",
        2,
        1,
        lambda t, g: {"replica_id": -1, "topics": partitions(t, timestamp=-1)},
        [],
        (TOPIC, "{t}", "DESCRIBE"),
        first_partition(),
        TOPIC_DENIED,
    ),
    (
        "OffsetForLeaderEpoch",
        23,
        3,
        _epoch_body(-1),
        [],
        (TOPIC, "{t}", "DESCRIBE"),
        lambda r: r["topics"][0]["partitions"][0]["error_code"],
        TOPIC_DENIED,
    ),
    (
        "OffsetForLeaderEpoch-replica",
        23,
        3,
        _epoch_body(0),
        [(TOPIC, "{t}", "DESCRIBE")],
        (CLUSTER, "kafka-cluster", "CLUSTER_ACTION"),
        lambda r: r["topics"][0]["partitions"][0]["error_code"],
        CLUSTER_DENIED,
    ),
    (
        "Fetch-replica",
        1,
        11,
        _fetch_replica,
        [(TOPIC, "{t}", "READ")],
        (CLUSTER, "kafka-cluster", "CLUSTER_ACTION"),
        _top,
        CLUSTER_DENIED,
    ),
    (
        "DeleteRecords",
        21,
        1,
        lambda t, g: {"topics": partitions(t, offset=0), "timeout_ms": 5000},
        [],
        (TOPIC, "{t}", "DELETE"),
        first_partition(),
        TOPIC_DENIED,
    ),
    (
        "CreatePartitions",
        37,
        1,
        lambda t, g: {
            "topics": [{"name": t, "count": 2, "assignments": None}],
            "timeout_ms": 5000,
            "validate_only": True,
        },
        [],
        (TOPIC, "{t}", "ALTER"),
        lambda r: r["results"][0]["error_code"],
        TOPIC_DENIED,
    ),
    (
        "DeleteGroups",
        42,
        1,
        lambda t, g: {"groups_names": [g]},
        [],
        (GROUP, "{g}", "DELETE"),
        lambda r: r["results"][0]["error_code"],
        GROUP_DENIED,
    ),
    (
        "OffsetDelete-group",
        47,
        0,
        lambda t, g: {"group_id": g, "topics": partitions(t)},
        [(TOPIC, "{t}", "READ")],
        (GROUP, "{g}", "DELETE"),
        _top,
        GROUP_DENIED,
    ),
    (
        "OffsetDelete-topic",
        47,
        0,
        lambda t, g: {"group_id": g, "topics": partitions(t)},
        [(GROUP, "{g}", "DELETE")],
        (TOPIC, "{t}", "READ"),
        _partition_else_top,
        TOPIC_DENIED,
    ),
    (
        "DescribeGroups",
        15,
        3,
        lambda t, g: {"groups": [g], "include_authorized_operations": False},
        [],
        (GROUP, "{g}", "DESCRIBE"),
        lambda r: r["groups"][0]["error_code"],
        GROUP_DENIED,
    ),
    (
        "OffsetCommit-group",
        8,
        2,
        commit,
        [(TOPIC, "{t}", "READ")],
        (GROUP, "{g}", "READ"),
        first_partition(),
        GROUP_DENIED,
    ),
    (
        "OffsetCommit-topic",
        8,
        2,
        commit,
        [(GROUP, "{g}", "READ")],
        (TOPIC, "{t}", "READ"),
        first_partition(),
        TOPIC_DENIED,
    ),
    (
        "InitProducerId-idempotent",
        22,
        1,
        lambda t, g: {"transactional_id": None, "transaction_timeout_ms": 60000},
        [],
        (CLUSTER, "kafka-cluster", "IDEMPOTENT_WRITE"),
        _top,
        CLUSTER_DENIED,
    ),
    (
        "InitProducerId-write-on-a-topic",
        22,
        1,
        lambda t, g: {"transactional_id": None, "transaction_timeout_ms": 60000},
        [],
        (TOPIC, "{t}", "WRITE"),
        _top,
        CLUSTER_DENIED,
    ),
    (
        "InitProducerId-transactional",
        22,
        1,
        lambda t, g: {"transactional_id": f"tx-{g}", "transaction_timeout_ms": 60000},
        [],
        (TXN, "tx-{g}", "WRITE"),
        _top,
        TXN_DENIED,
    ),
    (
        "DescribeLogDirs",
        35,
        3,
        lambda t, g: {"topics": None},
        [],
        (CLUSTER, "kafka-cluster", "DESCRIBE"),
        _top,
        CLUSTER_DENIED,
    ),
    (
        "ElectLeaders",
        43,
        1,
        lambda t, g: {
            "election_type": 0,
            "topic_partitions": [{"topic": t, "partitions": [0]}],
            "timeout_ms": 5000,
        },
        [],
        (CLUSTER, "kafka-cluster", "ALTER"),
        _top,
        CLUSTER_DENIED,
    ),
    (
        "AlterPartitionReassignments",
        45,
        0,
        lambda t, g: {"timeout_ms": 5000, "topics": []},
        [],
        (CLUSTER, "kafka-cluster", "ALTER"),
        _top,
        CLUSTER_DENIED,
    ),
    (
        "ListPartitionReassignments",
        46,
        0,
        lambda t, g: {"timeout_ms": 5000, "topics": None},
        [],
        (CLUSTER, "kafka-cluster", "DESCRIBE"),
        _top,
        CLUSTER_DENIED,
    ),
    (
        "DescribeClientQuotas",
        48,
        0,
        lambda t, g: {"components": [], "strict": False},
        [],
        (CLUSTER, "kafka-cluster", "DESCRIBE_CONFIGS"),
        _top,
        CLUSTER_DENIED,
    ),
    (
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
        [],
        (CLUSTER, "kafka-cluster", "ALTER_CONFIGS"),
        lambda r: r["entries"][0]["error_code"],
        CLUSTER_DENIED,
    ),
    (
        "CreateTopics",
        19,
        4,
        _create_topic,
        [],
        (TOPIC, "c-{g}", "CREATE"),
        lambda r: r["topics"][0]["error_code"],
        TOPIC_DENIED,
    ),
    (
        "CreateTopics-cluster",
        19,
        4,
        _create_topic,
        [],
        (CLUSTER, "kafka-cluster", "CREATE"),
        lambda r: r["topics"][0]["error_code"],
        TOPIC_DENIED,
    ),
    (
        "DescribeUserScramCredentials",
        50,
        0,
        lambda t, g: {"users": None},
        [],
        (CLUSTER, "kafka-cluster", "DESCRIBE"),
        _top,
        CLUSTER_DENIED,
    ),
    (
        "AlterUserScramCredentials",
        51,
        0,
        lambda t, g: {"deletions": [{"name": g, "mechanism": 1}], "upsertions": []},
        [],
        (CLUSTER, "kafka-cluster", "ALTER"),
        lambda r: r["results"][0]["error_code"],
        CLUSTER_DENIED,
    ),
]
