"""Schemas for client quotas: DescribeClientQuotas (48) and AlterClientQuotas (49).

From Kafka's DescribeClientQuotas*/AlterClientQuotas* JSON specs (v0-1, v1 flexible).
"""

from pluglog.protocol.schema import Api, F

_ENTITY = [F("entity_type", "string"), F("entity_name", "string", nullable="0+")]

DESCRIBE_CLIENT_QUOTAS = Api(
    48,
    "DescribeClientQuotas",
    "0-1",
    "1+",
    request=[
        F(
            "components",
            [
                F("entity_type", "string"),
                F("match_type", "int8"),
                F("match", "string", nullable="0+"),
            ],
        ),
        F("strict", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F(
            "entries",
            [
                F("entity", _ENTITY),
                F("values", [F("key", "string"), F("value", "float64")]),
            ],
            nullable="0+",
        ),
    ],
)

ALTER_CLIENT_QUOTAS = Api(
    49,
    "AlterClientQuotas",
    "0-1",
    "1+",
    request=[
        F(
            "entries",
            [
                F("entity", _ENTITY),
                F(
                    "ops",
                    [F("key", "string"), F("value", "float64"), F("remove", "bool")],
                ),
            ],
        ),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F(
            "entries",
            [
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
                F("entity", _ENTITY),
            ],
        ),
    ],
)

APIS = [DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS]
