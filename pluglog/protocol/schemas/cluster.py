"""Schemas for the cluster operator's APIs: AlterReplicaLogDirs (34),
DescribeLogDirs (35), ElectLeaders (43), AlterPartitionReassignments (45),
ListPartitionReassignments (46).

DescribeCluster (60) lives with Metadata in :mod:`.core`.
"""

from pluglog.protocol.schema import Api, F

DESCRIBE_LOG_DIRS = Api(
    35,
    "DescribeLogDirs",
    "0-4",  # v0 and v1 are the same layout; v5 only adds IsCordoned
    "2+",
    request=[
        F(
            "topics",
            [F("topic", "string"), F("partitions", "[]int32")],
            nullable="0+",
        ),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "3+"),
        F(
            "results",
            [
                F("error_code", "int16"),
                F("log_dir", "string"),
                F(
                    "topics",
                    [
                        F("name", "string"),
                        F(
                            "partitions",
                            [
                                F("partition_index", "int32"),
                                F("partition_size", "int64"),
                                F("offset_lag", "int64"),
                                F("is_future_key", "bool"),
                            ],
                        ),
                    ],
                ),
                F("total_bytes", "int64", "4+", default=-1),
                F("usable_bytes", "int64", "4+", default=-1),
            ],
        ),
    ],
)

ALTER_REPLICA_LOG_DIRS = Api(
    34,
    "AlterReplicaLogDirs",
    "1-2",  # Kafka 4 dropped v0; kafka-python sends v1+
    "2+",
    request=[
        F(
            "dirs",
            [
                F("path", "string"),
                F("topics", [F("name", "string"), F("partitions", "[]int32")]),
            ],
        ),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F(
            "results",
            [
                F("topic_name", "string"),
                F("partitions", [F("partition_index", "int32"), F("error_code", "int16")]),
            ],
        ),
    ],
)

ELECT_LEADERS = Api(
    43,
    "ElectLeaders",
    "0-2",
    "2+",
    request=[
        F("election_type", "int8", "1+"),  # 0 preferred, 1 unclean; v0 is preferred
        F(
            "topic_partitions",
            [F("topic", "string"), F("partitions", "[]int32")],
            nullable="0+",
        ),
        F("timeout_ms", "int32", default=60000),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "1+"),
        F(
            "replica_election_results",
            [
                F("topic", "string"),
                F(
                    "partition_result",
                    [
                        F("partition_id", "int32"),
                        F("error_code", "int16"),
                        F("error_message", "string", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)

ALTER_PARTITION_REASSIGNMENTS = Api(
    45,
    "AlterPartitionReassignments",
    "0-1",
    "0+",
    request=[
        F("timeout_ms", "int32", default=60000),
        F("allow_replication_factor_change", "bool", "1+", default=True),
        F(
            "topics",
            [
                F("name", "string"),
                F(
                    "partitions",
                    [
                        F("partition_index", "int32"),
                        # null cancels a pending reassignment
                        F("replicas", "[]int32", nullable="0+", default=None),
                    ],
                ),
            ],
        ),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("allow_replication_factor_change", "bool", "1+", default=True),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F(
            "responses",
            [
                F("name", "string"),
                F(
                    "partitions",
                    [
                        F("partition_index", "int32"),
                        F("error_code", "int16"),
                        F("error_message", "string", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)

LIST_PARTITION_REASSIGNMENTS = Api(
    46,
    "ListPartitionReassignments",
    "0",
    "0+",
    request=[
        F("timeout_ms", "int32", default=60000),
        F(
            "topics",
            [F("name", "string"), F("partition_indexes", "[]int32")],
            nullable="0+",
            default=None,
        ),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F(
            "topics",
            [
                F("name", "string"),
                F(
                    "partitions",
                    [
                        F("partition_index", "int32"),
                        F("replicas", "[]int32"),
                        F("adding_replicas", "[]int32"),
                        F("removing_replicas", "[]int32"),
                    ],
                ),
            ],
        ),
    ],
)

APIS = [
    ALTER_REPLICA_LOG_DIRS,
    DESCRIBE_LOG_DIRS,
    ELECT_LEADERS,
    ALTER_PARTITION_REASSIGNMENTS,
    LIST_PARTITION_REASSIGNMENTS,
]
