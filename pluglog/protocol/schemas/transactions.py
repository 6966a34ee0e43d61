"""Schemas for transactions: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27), TxnOffsetCommit (28), DescribeProducers (61),
DescribeTransactions (65), ListTransactions (66).

Defined up to the last version before KIP-890's batched/verify-only AddPartitionsToTxn
(v4) and the transaction-version 2 fields (EndTxn v5, WriteTxnMarkers v2); see
docs/protocol.rst for why those are not advertised.
"""

from pluglog.protocol.schema import Api, F

_TXN_TOPIC = [F("name", "string"), F("partitions", "[]int32")]

ADD_PARTITIONS_TO_TXN = Api(
    24,
    "AddPartitionsToTxn",
    "0-3",
    "3+",
    request=[
        # Kafka's names: v4+ batches several transactions (KIP-890), not served.
        F("v3_and_below_transactional_id", "string"),
        F("v3_and_below_producer_id", "int64"),
        F("v3_and_below_producer_epoch", "int16"),
        F("v3_and_below_topics", _TXN_TOPIC),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F(
            "results_by_topic_v3_and_below",
            [
                F("name", "string"),
                F(
                    "results_by_partition",
                    [F("partition_index", "int32"), F("partition_error_code", "int16")],
                ),
            ],
        ),
    ],
)

ADD_OFFSETS_TO_TXN = Api(
    25,
    "AddOffsetsToTxn",
    "0-3",
    "3+",
    request=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("group_id", "string"),
    ],
    response=[F("throttle_time_ms", "int32"), F("error_code", "int16")],
)

END_TXN = Api(
    26,
    "EndTxn",
    "0-3",
    "3+",
    request=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("committed", "bool"),
    ],
    response=[F("throttle_time_ms", "int32"), F("error_code", "int16")],
)

WRITE_TXN_MARKERS = Api(
    27,
    "WriteTxnMarkers",
    "0-1",
    "1+",
    request=[
        F(
            "markers",
            [
                F("producer_id", "int64"),
                F("producer_epoch", "int16"),
                F("transaction_result", "bool"),
                F("topics", [F("name", "string"), F("partition_indexes", "[]int32")]),
                F("coordinator_epoch", "int32"),
            ],
        )
    ],
    response=[
        F(
            "markers",
            [
                F("producer_id", "int64"),
                F(
                    "topics",
                    [
                        F("name", "string"),
                        F("partitions", [F("partition_index", "int32"), F("error_code", "int16")]),
                    ],
                ),
            ],
        )
    ],
)

TXN_OFFSET_COMMIT = Api(
    28,
    "TxnOffsetCommit",
    "0-3",
    "3+",
    request=[
        F("transactional_id", "string"),
        F("group_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        # KIP-447 (v3+): the consumer's group metadata fences a stale member.
        F("generation_id", "int32", "3+", default=-1),
        F("member_id", "string", "3+", default=""),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
        F(
            "topics",
            [
                F("name", "string"),
                F(
                    "partitions",
                    [
                        F("partition_index", "int32"),
                        F("committed_offset", "int64"),
                        F("committed_leader_epoch", "int32", "2+", default=-1),
                        F("committed_metadata", "string", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
    response=[
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

DESCRIBE_PRODUCERS = Api(
    61,
    "DescribeProducers",
    "0",
    "0+",
    request=[F("topics", [F("name", "string"), F("partition_indexes", "[]int32")])],
    response=[
        F("throttle_time_ms", "int32"),
        F(
            "topics",
            [
                F("name", "string"),
                F(
                    "partitions",
                    [
                        F("partition_index", "int32"),
                        F("error_code", "int16"),
                        F("error_message", "string", nullable="0+", default=None),
                        F(
                            "active_producers",
                            [
                                F("producer_id", "int64"),
                                F("producer_epoch", "int32"),
                                F("last_sequence", "int32", default=-1),
                                F("last_timestamp", "int64", default=-1),
                                F("coordinator_epoch", "int32"),
                                F("current_txn_start_offset", "int64", default=-1),
                            ],
                        ),
                    ],
                ),
            ],
        ),
    ],
)

DESCRIBE_TRANSACTIONS = Api(
    65,
    "DescribeTransactions",
    "0",
    "0+",
    request=[F("transactional_ids", "[]string")],
    response=[
        F("throttle_time_ms", "int32"),
        F(
            "transaction_states",
            [
                F("error_code", "int16"),
                F("transactional_id", "string"),
                F("transaction_state", "string"),
                F("transaction_timeout_ms", "int32"),
                F("transaction_start_time_ms", "int64"),
                F("producer_id", "int64"),
                F("producer_epoch", "int16"),
                F("topics", [F("topic", "string"), F("partitions", "[]int32")]),
            ],
        ),
    ],
)

LIST_TRANSACTIONS = Api(
    66,
    "ListTransactions",
    "0-1",
    "0+",
    request=[
        F("state_filters", "[]string"),
        F("producer_id_filters", "[]int64"),
        F("duration_filter", "int64", "1+", default=-1),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("unknown_state_filters", "[]string"),
        F(
            "transaction_states",
            [
                F("transactional_id", "string"),
                F("producer_id", "int64"),
                F("transaction_state", "string"),
            ],
        ),
    ],
)

APIS = [
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    WRITE_TXN_MARKERS,
    TXN_OFFSET_COMMIT,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    LIST_TRANSACTIONS,
]
