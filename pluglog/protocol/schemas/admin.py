"""Schemas for topic and config administration: CreateTopics (19), DeleteTopics (20),
CreatePartitions (37), DescribeConfigs (32), AlterConfigs (33),
IncrementalAlterConfigs (44).
"""

from pluglog.protocol.schema import Api, F

CREATE_TOPICS = Api(
    19,
    "CreateTopics",
    "0-7",
    "5+",
    request=[
        F(
            "topics",
            [
                F("name", "string"),
                F("num_partitions", "int32"),  # -1 (v4+) means the broker default
                F("replication_factor", "int16"),
                F(
                    "assignments",
                    [F("partition_index", "int32"), F("broker_ids", "[]int32")],
                ),
                F("configs", [F("name", "string"), F("value", "string", nullable="0+")]),
            ],
        ),
        # The JSON spells these two in lowerCamelCase (timeoutMs, validateOnly).
        F("timeout_ms", "int32", default=60000),
        F("validate_only", "bool", "1+", default=False),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        F(
            "topics",
            [
                F("name", "string"),
                F("topic_id", "uuid", "7+"),
                F("error_code", "int16"),
                F("error_message", "string", "1+", nullable="0+"),
                F("topic_config_error_code", "int16", "5+", tag=0, default=0),
                # v5+ (KIP-525): what was created, with its effective configs.
                F("num_partitions", "int32", "5+", default=-1),
                F("replication_factor", "int16", "5+", default=-1),
                F(
                    "configs",
                    [
                        F("name", "string"),
                        F("value", "string", nullable="0+"),
                        F("read_only", "bool"),
                        F("config_source", "int8", default=-1),
                        F("is_sensitive", "bool"),
                    ],
                    "5+",
                    nullable="5+",
                    default=None,
                ),
            ],
        ),
    ],
)

DELETE_TOPICS = Api(
    20,
    "DeleteTopics",
    "0-6",
    "4+",
    request=[
        # v6 names each topic by name or by id (KIP-516).
        F(
            "topics",
            [F("name", "string", nullable="6+", default=None), F("topic_id", "uuid")],
            "6+",
        ),
        F("topic_names", "[]string", "0-5"),
        F("timeout_ms", "int32"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F(
            "responses",
            [
                F("name", "string", nullable="6+"),
                F("topic_id", "uuid", "6+"),
                F("error_code", "int16"),
                F("error_message", "string", "5+", nullable="5+", default=None),
            ],
        ),
    ],
)

CREATE_PARTITIONS = Api(
    37,
    "CreatePartitions",
    "0-1",
    "2+",
    request=[
        F(
            "topics",
            [
                F("name", "string"),
                F("count", "int32"),
                F("assignments", [F("broker_ids", "[]int32")], nullable="0+"),
            ],
        ),
        F("timeout_ms", "int32"),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F(
            "results",
            [
                F("name", "string"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
            ],
        ),
    ],
)

DESCRIBE_CONFIGS = Api(
    32,
    "DescribeConfigs",
    "0-4",
    "4+",
    request=[
        F(
            "resources",
            [
                F("resource_type", "int8"),
                F("resource_name", "string"),
                F("configuration_keys", "[]string", nullable="0+"),
            ],
        ),
        F("include_synonyms", "bool", "1+", default=False),
        F("include_documentation", "bool", "3+", default=False),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F(
            "results",
            [
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
                F("resource_type", "int8"),
                F("resource_name", "string"),
                F(
                    "configs",
                    [
                        F("name", "string"),
                        F("value", "string", nullable="0+"),
                        F("read_only", "bool"),
                        F("config_source", "int8", "1+", default=-1),
                        F("is_default", "bool", "0"),  # v1+ replaced it by config_source
                        F("is_sensitive", "bool"),
                        F(
                            "synonyms",
                            [
                                F("name", "string", "1+"),
                                F("value", "string", "1+", nullable="0+"),
                                F("source", "int8", "1+"),
                            ],
                            "1+",
                        ),
                        F("config_type", "int8", "3+", default=0),
                        F("documentation", "string", "3+", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)

_ALTER_CONFIGS_RESPONSE = [
    F("throttle_time_ms", "int32"),
    F(
        "responses",
        [
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
        ],
    ),
]

ALTER_CONFIGS = Api(
    33,
    "AlterConfigs",
    "0-1",
    "2+",
    request=[
        F(
            "resources",
            [
                F("resource_type", "int8"),
                F("resource_name", "string"),
                F("configs", [F("name", "string"), F("value", "string", nullable="0+")]),
            ],
        ),
        F("validate_only", "bool"),
    ],
    response=_ALTER_CONFIGS_RESPONSE,
)

INCREMENTAL_ALTER_CONFIGS = Api(
    44,
    "IncrementalAlterConfigs",
    "0-1",
    "1+",  # v1 is flexible (compact strings, tag buffers)
    request=[
        F(
            "resources",
            [
                F("resource_type", "int8"),
                F("resource_name", "string"),
                F(
                    "configs",
                    [
                        F("name", "string"),
                        F("config_operation", "int8"),  # 0 set, 1 delete, 2 append, 3 subtract
                        F("value", "string", nullable="0+"),
                    ],
                ),
            ],
        ),
        F("validate_only", "bool"),
    ],
    response=list(_ALTER_CONFIGS_RESPONSE),
)

APIS = [
    CREATE_TOPICS,
    DELETE_TOPICS,
    CREATE_PARTITIONS,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
]
