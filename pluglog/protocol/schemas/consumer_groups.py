"""Schemas of the consumer group protocol of KIP-848: ConsumerGroupHeartbeat (68)
and ConsumerGroupDescribe (69), both flexible from v0.

Assignments name topics by id (KIP-516); ConsumerGroupDescribe names them by
id and name. ConsumerGroupHeartbeat v1 adds the subscription regex,
ConsumerGroupDescribe v1 (Kafka 4.0, KIP-1099) each member's type.
"""

from pluglog.protocol.schema import Api, F, Struct

_TOPIC_PARTITIONS = [F("topic_id", "uuid"), F("partitions", "[]int32")]
_DESCRIBED_PARTITIONS = [
    F("topic_id", "uuid"),
    F("topic_name", "string"),
    F("partitions", "[]int32"),
]

CONSUMER_GROUP_HEARTBEAT = Api(
    68,
    "ConsumerGroupHeartbeat",
    "0-1",
    "0+",
    request=[
        F("group_id", "string"),
        F("member_id", "string"),
        # 0 joins, -1 leaves, -2 a static member leaving to come back.
        F("member_epoch", "int32"),
        F("instance_id", "string", nullable="0+", default=None),
        F("rack_id", "string", nullable="0+", default=None),
        F("rebalance_timeout_ms", "int32", default=-1),
        # null: unchanged since the last heartbeat.
        F("subscribed_topic_names", "[]string", nullable="0+", default=None),
        F("subscribed_topic_regex", "string", "1+", nullable="1+", default=None),
        F("server_assignor", "string", nullable="0+", default=None),
        F("topic_partitions", _TOPIC_PARTITIONS, nullable="0+", default=None),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("member_id", "string", nullable="0+", default=None),
        F("member_epoch", "int32"),
        F("heartbeat_interval_ms", "int32"),
        F(
            "assignment",
            Struct([F("topic_partitions", _TOPIC_PARTITIONS)]),
            nullable="0+",
            default=None,
        ),
    ],
)

_ASSIGNMENT = Struct([F("topic_partitions", _DESCRIBED_PARTITIONS)])

CONSUMER_GROUP_DESCRIBE = Api(
    69,
    "ConsumerGroupDescribe",
    "0-1",
    "0+",
    request=[F("group_ids", "[]string"), F("include_authorized_operations", "bool")],
    response=[
        F("throttle_time_ms", "int32"),
        F(
            "groups",
            [
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
                F("group_id", "string"),
                F("group_state", "string"),
                F("group_epoch", "int32"),
                F("assignment_epoch", "int32"),
                F("assignor_name", "string"),
                F(
                    "members",
                    [
                        F("member_id", "string"),
                        F("instance_id", "string", nullable="0+", default=None),
                        F("rack_id", "string", nullable="0+", default=None),
                        F("member_epoch", "int32"),
                        F("client_id", "string"),
                        F("client_host", "string"),
                        F("subscribed_topic_names", "[]string"),
                        F("subscribed_topic_regex", "string", nullable="0+", default=None),
                        F("assignment", _ASSIGNMENT),
                        F("target_assignment", _ASSIGNMENT),
                        # KIP-1099: 0 a classic member, 1 a consumer one, -1 unknown.
                        F("member_type", "int8", "1+", default=-1),
                    ],
                ),
                F("authorized_operations", "int32", default=-(2**31)),
            ],
        ),
    ],
)

APIS = [CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE]
