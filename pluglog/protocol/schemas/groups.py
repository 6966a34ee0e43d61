"""Schemas for the classic consumer-group protocol and committed offsets, up to
Kafka 4.0's versions (OffsetCommit/OffsetFetch v10, topic ids, are not defined).

FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), DescribeGroups (15), ListGroups (16), OffsetCommit (8),
OffsetFetch (9), DeleteGroups (42), OffsetDelete (47).
"""

from pluglog.protocol.schema import Api, F

FIND_COORDINATOR = Api(
    10,
    "FindCoordinator",
    "0-6",
    "3+",
    request=[
        F("key", "string", "0-3"),
        F("key_type", "int8", "1+", default=0),  # 0 group, 1 transaction, 2 share
        F("coordinator_keys", "[]string", "4+"),  # v4+: batched lookups
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "0-3"),
        F("error_message", "string", "1-3", nullable="1-3"),
        F("node_id", "int32", "0-3"),
        F("host", "string", "0-3"),
        F("port", "int32", "0-3"),
        F(
            "coordinators",
            [
                F("key", "string", "4+"),
                F("node_id", "int32", "4+"),
                F("host", "string", "4+"),
                F("port", "int32", "4+"),
                F("error_code", "int16", "4+"),
                F("error_message", "string", "4+", nullable="4+"),
            ],
            "4+",
        ),
    ],
)

JOIN_GROUP = Api(
    11,
    "JoinGroup",
    "0-9",
    "6+",
    request=[
        F("group_id", "string"),
        F("session_timeout_ms", "int32"),
        F("rebalance_timeout_ms", "int32", "1+", default=-1),
        F("member_id", "string"),
        F("group_instance_id", "string", "5+", nullable="5+", default=None),
        F("protocol_type", "string"),
        F("protocols", [F("name", "string"), F("metadata", "bytes")]),
        F("reason", "string", "8+", nullable="8+", default=None),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        F("error_code", "int16"),
        F("generation_id", "int32", default=-1),
        F("protocol_type", "string", "7+", nullable="7+", default=None),
        F("protocol_name", "string", nullable="7+"),
        F("leader", "string"),
        F("skip_assignment", "bool", "9+", default=False),
        F("member_id", "string"),
        F(
            "members",
            [
                F("member_id", "string"),
                F("group_instance_id", "string", "5+", nullable="5+", default=None),
                F("metadata", "bytes"),
            ],
        ),
    ],
)

HEARTBEAT = Api(
    12,
    "Heartbeat",
    "0-4",
    "4+",
    request=[
        F("group_id", "string"),
        F("generation_id", "int32"),
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
    ],
    response=[F("throttle_time_ms", "int32", "1+"), F("error_code", "int16")],
)

LEAVE_GROUP = Api(
    13,
    "LeaveGroup",
    "0-5",
    "4+",
    request=[
        F("group_id", "string"),
        F("member_id", "string", "0-2"),
        F(
            "members",
            [
                F("member_id", "string", "3+"),
                F("group_instance_id", "string", "3+", nullable="3+", default=None),
                F("reason", "string", "5+", nullable="5+", default=None),
            ],
            "3+",
        ),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F(
            "members",
            [
                F("member_id", "string", "3+"),
                F("group_instance_id", "string", "3+", nullable="3+"),
                F("error_code", "int16", "3+"),
            ],
            "3+",
        ),
    ],
)

SYNC_GROUP = Api(
    14,
    "SyncGroup",
    "0-5",
    "4+",
    request=[
        F("group_id", "string"),
        F("generation_id", "int32"),
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
        F("protocol_type", "string", "5+", nullable="5+", default=None),
        F("protocol_name", "string", "5+", nullable="5+", default=None),
        F("assignments", [F("member_id", "string"), F("assignment", "bytes")]),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F("protocol_type", "string", "5+", nullable="5+", default=None),
        F("protocol_name", "string", "5+", nullable="5+", default=None),
        F("assignment", "bytes"),
    ],
)

DESCRIBE_GROUPS = Api(
    15,
    "DescribeGroups",
    "0-6",
    "5+",
    request=[
        F("groups", "[]string"),
        F("include_authorized_operations", "bool", "3+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F(
            "groups",
            [
                F("error_code", "int16"),
                F("error_message", "string", "6+", nullable="6+", default=None),
                F("group_id", "string"),
                F("group_state", "string"),
                F("protocol_type", "string"),
                F("protocol_data", "string"),  # the chosen protocol *name*, not bytes
                F(
                    "members",
                    [
                        F("member_id", "string"),
                        F("group_instance_id", "string", "4+", nullable="4+", default=None),
                        F("client_id", "string"),
                        F("client_host", "string"),
                        F("member_metadata", "bytes"),
                        F("member_assignment", "bytes"),
                    ],
                ),
                F("authorized_operations", "int32", "3+", default=-(2**31)),
            ],
        ),
    ],
)

LIST_GROUPS = Api(
    16,
    "ListGroups",
    "0-5",
    "3+",
    request=[
        F("states_filter", "[]string", "4+"),  # v4+: only groups in these states
        F("types_filter", "[]string", "5+"),  # v5+: "classic", "consumer"
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F(
            "groups",
            [
                F("group_id", "string"),
                F("protocol_type", "string"),
                F("group_state", "string", "4+"),
                F("group_type", "string", "5+"),
            ],
        ),
    ],
)

OFFSET_COMMIT = Api(
    8,
    "OffsetCommit",
    "0-9",
    "8+",
    request=[
        F("group_id", "string"),
        # Kafka 4's JSON renamed GenerationId to GenerationIdOrMemberEpoch (KIP-848).
        F("generation_id_or_member_epoch", "int32", "1+", default=-1),
        F("member_id", "string", "1+"),
        F("group_instance_id", "string", "7+", nullable="7+", default=None),
        F("retention_time_ms", "int64", "2-4", default=-1),
        F(
            "topics",
            [
                F("name", "string", "0-9"),
                F(
                    "partitions",
                    [
                        F("partition_index", "int32"),
                        F("committed_offset", "int64"),
                        F("committed_leader_epoch", "int32", "6+", default=-1),
                        F("commit_timestamp", "int64", "1", default=-1),
                        F("committed_metadata", "string", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+"),
        F(
            "topics",
            [
                F("name", "string", "0-9"),
                F("partitions", [F("partition_index", "int32"), F("error_code", "int16")]),
            ],
        ),
    ],
)

OFFSET_FETCH = Api(
    9,
    "OffsetFetch",
    "1-9",
    "6+",
    request=[
        F("group_id", "string", "0-7"),
        F(
            "topics",
            [F("name", "string", "0-7"), F("partition_indexes", "[]int32", "0-7")],
            "0-7",
            nullable="2-7",  # v2+: null means every partition the group committed
        ),
        # v8+: several groups in one request; v9 names the (KIP-848) member.
        F(
            "groups",
            [
                F("group_id", "string", "8+"),
                F("member_id", "string", "9+", nullable="9+", default=None),
                F("member_epoch", "int32", "9+", default=-1),
                F(
                    "topics",
                    [F("name", "string", "8+"), F("partition_indexes", "[]int32", "8+")],
                    "8+",
                    nullable="8+",
                ),
            ],
            "8+",
        ),
        F("require_stable", "bool", "7+", default=False),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+"),
        F(
            "topics",
            [
                F("name", "string", "0-7"),
                F(
                    "partitions",
                    [
                        F("partition_index", "int32", "0-7"),
                        F("committed_offset", "int64", "0-7"),
                        F("committed_leader_epoch", "int32", "5-7", default=-1),
                        F("metadata", "string", "0-7", nullable="0-7"),
                        F("error_code", "int16", "0-7"),
                    ],
                    "0-7",
                ),
            ],
            "0-7",
        ),
        # Comes after the topics on the wire, unlike most top-level error codes.
        F("error_code", "int16", "2-7", default=0),
        F(
            "groups",
            [
                F("group_id", "string", "8+"),
                F(
                    "topics",
                    [
                        F("name", "string", "8+"),
                        F(
                            "partitions",
                            [
                                F("partition_index", "int32", "8+"),
                                F("committed_offset", "int64", "8+"),
                                F("committed_leader_epoch", "int32", "8+", default=-1),
                                F("metadata", "string", "8+", nullable="8+"),
                                F("error_code", "int16", "8+"),
                            ],
                            "8+",
                        ),
                    ],
                    "8+",
                ),
                F("error_code", "int16", "8+", default=0),
            ],
            "8+",
        ),
    ],
)

DELETE_GROUPS = Api(
    42,
    "DeleteGroups",
    "0-2",
    "2+",
    request=[F("groups_names", "[]string")],  # sic: "GroupsNames" in the JSON
    response=[
        F("throttle_time_ms", "int32"),
        F("results", [F("group_id", "string"), F("error_code", "int16")]),
    ],
)

OFFSET_DELETE = Api(
    47,
    "OffsetDelete",
    "0",
    None,
    request=[
        F("group_id", "string"),
        F("topics", [F("name", "string"), F("partitions", [F("partition_index", "int32")])]),
    ],
    response=[
        # ErrorCode precedes ThrottleTimeMs here, unlike every other response.
        F("error_code", "int16"),
        F("throttle_time_ms", "int32"),
        F(
            "topics",
            [
                F("name", "string"),
                F("partitions", [F("partition_index", "int32"), F("error_code", "int16")]),
            ],
        ),
    ],
)

APIS = [
    FIND_COORDINATOR,
    JOIN_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    SYNC_GROUP,
    DESCRIBE_GROUPS,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    DELETE_GROUPS,
    OFFSET_DELETE,
]
