"""Schemas for connection-level and cluster APIs.

ApiVersions (18), Metadata (3), SaslHandshake (17), DescribeCluster (60).
"""

from pluglog.protocol.schema import Api, F

AUTHORIZED_OPERATIONS_UNKNOWN = -(2**31)

API_VERSIONS = Api(
    18,
    "ApiVersions",
    "0-4",  # v4's body is identical to v3's (it only changed SupportedFeatures' min)
    "3+",
    request=[
        F("client_software_name", "string", "3+"),
        F("client_software_version", "string", "3+"),
    ],
    response=[
        F("error_code", "int16"),
        F(
            "api_keys",
            [
                F("api_key", "int16"),
                F("min_version", "int16"),
                F("max_version", "int16"),
            ],
        ),
        F("throttle_time_ms", "int32", "1+"),
        F(
            "supported_features",
            [
                F("name", "string", "3+"),
                F("min_version", "int16", "3+"),
                F("max_version", "int16", "3+"),
            ],
            "3+",
            tag=0,
        ),
        F("finalized_features_epoch", "int64", "3+", tag=1, default=-1),
        F(
            "finalized_features",
            [
                F("name", "string", "3+"),
                F("max_version_level", "int16", "3+"),
                F("min_version_level", "int16", "3+"),
            ],
            "3+",
            tag=2,
        ),
        F("zk_migration_ready", "bool", "3+", tag=3, default=False),
    ],
)

METADATA = Api(
    3,
    "Metadata",
    "0-13",
    "9+",
    request=[
        # v0: empty list means all topics; v1+: null means all, empty means none.
        # v10+ may name a topic by id (and a null name); Kafka answers that from v12.
        F(
            "topics",
            [F("topic_id", "uuid", "10+"), F("name", "string", nullable="10+")],
            nullable="1+",
        ),
        F("allow_auto_topic_creation", "bool", "4+", default=True),
        F("include_cluster_authorized_operations", "bool", "8-10"),
        F("include_topic_authorized_operations", "bool", "8+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+"),
        F(
            "brokers",
            [
                F("node_id", "int32"),
                F("host", "string"),
                F("port", "int32"),
                F("rack", "string", "1+", nullable="1+", default=None),
            ],
        ),
        F("cluster_id", "string", "2+", nullable="2+", default=None),
        F("controller_id", "int32", "1+", default=-1),
        F(
            "topics",
            [
                F("error_code", "int16"),
                F("name", "string", nullable="12+"),
                F("topic_id", "uuid", "10+"),
                F("is_internal", "bool", "1+", default=False),
                F(
                    "partitions",
                    [
                        F("error_code", "int16"),
                        F("partition_index", "int32"),
                        F("leader_id", "int32"),
                        F("leader_epoch", "int32", "7+", default=-1),
                        F("replica_nodes", "[]int32"),
                        F("isr_nodes", "[]int32"),
                        F("offline_replicas", "[]int32", "5+"),
                    ],
                ),
                F(
                    "topic_authorized_operations",
                    "int32",
                    "8+",
                    default=AUTHORIZED_OPERATIONS_UNKNOWN,
                ),
            ],
        ),
        F(
            "cluster_authorized_operations",
            "int32",
            "8-10",
            default=AUTHORIZED_OPERATIONS_UNKNOWN,
        ),
        # v13 (KIP-1102): REBOOTSTRAP_REQUIRED would go here; pluglog sends 0.
        F("error_code", "int16", "13+", default=0),
    ],
)

SASL_HANDSHAKE = Api(
    17,
    "SaslHandshake",
    "0-1",
    None,
    request=[F("mechanism", "string")],
    response=[F("error_code", "int16"), F("mechanisms", "[]string")],
)

DESCRIBE_CLUSTER = Api(
    60,
    "DescribeCluster",
    "0-2",
    "0+",
    request=[
        F("include_cluster_authorized_operations", "bool"),
        F("endpoint_type", "int8", "1+", default=1),  # 1 brokers, 2 controllers
        F("include_fenced_brokers", "bool", "2+"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("endpoint_type", "int8", "1+", default=1),
        F("cluster_id", "string"),
        F("controller_id", "int32", default=-1),
        F(
            "brokers",
            [
                F("broker_id", "int32"),
                F("host", "string"),
                F("port", "int32"),
                F("rack", "string", nullable="0+", default=None),
                F("is_fenced", "bool", "2+"),
            ],
        ),
        F("cluster_authorized_operations", "int32", default=AUTHORIZED_OPERATIONS_UNKNOWN),
    ],
)

APIS = [API_VERSIONS, METADATA, SASL_HANDSHAKE, DESCRIBE_CLUSTER]
