"""Schemas of the security APIs, from Kafka's JSON specs: SaslAuthenticate
(36), the ACL APIs (29-31) and the SCRAM credential APIs (50, 51).

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

# DescribeUserScramCredentials (50), AlterUserScramCredentials (51): v0, flexible.
DESCRIBE_USER_SCRAM_CREDENTIALS = Api(
    50,
    "DescribeUserScramCredentials",
    "0",
    "0+",
    request=[F("users", [F("name", "string")], nullable="0+")],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F(
            "results",
            [
                F("user", "string"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
                F("credential_infos", [F("mechanism", "int8"), F("iterations", "int32")]),
            ],
        ),
    ],
)

ALTER_USER_SCRAM_CREDENTIALS = Api(
    51,
    "AlterUserScramCredentials",
    "0",
    "0+",
    request=[
        F("deletions", [F("name", "string"), F("mechanism", "int8")]),
        F(
            "upsertions",
            [
                F("name", "string"),
                F("mechanism", "int8"),
                F("iterations", "int32"),
                F("salt", "bytes"),
                F("salted_password", "bytes"),
            ],
        ),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F(
            "results",
            [
                F("user", "string"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
            ],
        ),
    ],
)

APIS = [
    SASL_AUTHENTICATE,
    DESCRIBE_ACLS,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    ALTER_USER_SCRAM_CREDENTIALS,
]
