"""Schemas of the security APIs: SaslAuthenticate (36), from Kafka's JSON specs.

SaslHandshake (17) lives with the connection-level APIs in :mod:`.core`.
"""

from pluglog.protocol.schema import Api, F

SASL_AUTHENTICATE = Api(
    36,
    "SaslAuthenticate",
    "0-2",
    "2+",
    request=[F("auth_bytes", "bytes")],
    response=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("auth_bytes", "bytes"),
        F("session_lifetime_ms", "int64", "1+", default=0),
    ],
)


# DescribeAcls (29), CreateAcls (30), DeleteAcls (31): v0-1 (v2+ is flexible).
_ACL_FILTER = [
    F("resource_type_filter", "int8"),
    F("resource_name_filter", "string", nullable="0+"),
    F("pattern_type_filter", "int8", "1+", default=3),
    F("principal_filter", "string", nullable="0+"),
    F("host_filter", "string", nullable="0+"),
    F("operation", "int8"),
    F("permission_type", "int8"),
]

DESCRIBE_ACLS = Api(
    29,
    "DescribeAcls",
    "0-1",
    "2+",
    request=_ACL_FILTER,
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F(
            "resources",
            [
                F("resource_type", "int8"),
                F("resource_name", "string"),
                F("pattern_type", "int8", "1+", default=3),
                F(
                    "acls",
                    [
                        F("principal", "string"),
                        F("host", "string"),
                        F("operation", "int8"),
                        F("permission_type", "int8"),
                    ],
                ),
            ],
        ),
    ],
)

CREATE_ACLS = Api(
    30,
    "CreateAcls",
    "0-1",
    "2+",
    request=[
        F(
            "creations",
            [
                F("resource_type", "int8"),
                F("resource_name", "string"),
                F("resource_pattern_type", "int8", "1+", default=3),
                F("principal", "string"),
                F("host", "string"),
                F("operation", "int8"),
                F("permission_type", "int8"),
            ],
        )
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F(
            "results",
            [F("error_code", "int16"), F("error_message", "string", nullable="0+", default=None)],
        ),
    ],
)

DELETE_ACLS = Api(
    31,
    "DeleteAcls",
    "0-1",
    "2+",
    request=[F("filters", _ACL_FILTER)],
    response=[
        F("throttle_time_ms", "int32"),
        F(
            "filter_results",
            [
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
                F(
                    "matching_acls",
                    [
                        F("error_code", "int16"),
                        F("error_message", "string", nullable="0+", default=None),
                        F("resource_type", "int8"),
                        F("resource_name", "string"),
                        F("pattern_type", "int8", "1+", default=3),
                        F("principal", "string"),
                        F("host", "string"),
                        F("operation", "int8"),
                        F("permission_type", "int8"),
                    ],
                ),
            ],
        ),
    ],
)

APIS = [SASL_AUTHENTICATE, DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS]
