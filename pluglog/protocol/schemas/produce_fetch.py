"""Schemas for the data path: Produce (0), Fetch (1), ListOffsets (2),
DeleteRecords (21), InitProducerId (22), OffsetForLeaderEpoch (23).

RECORDS fields stay opaque: decoded as zero-copy memoryviews, encoded from bytes,
memoryviews or file ranges.  Produce v0-2 carry legacy message sets in the same
``records`` field; telling formats apart is the record layer's job.
"""

from pluglog.protocol.schema import Api, F, Struct

#: KIP-951 (Produce v10+, Fetch v16+): where a partition's leader is, sent
#: with NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH so clients skip a Metadata round.
_NODE_ENDPOINTS = [
    F("node_id", "int32"),
    F("host", "string"),
    F("port", "int32"),
    F("rack", "string", nullable="0+", default=None),
]


_LEADER_ID_AND_EPOCH = Struct(
    [F("leader_id", "int32", default=-1), F("leader_epoch", "int32", default=-1)]
)


PRODUCE = Api(
    0,
    "Produce",
    "0-11",  # v12 needs KIP-890's transaction version 2, v13 names topics by id
    "9+",
    request=[
        F("transactional_id", "string", "3+", nullable="3+", default=None),
        F("acks", "int16"),
        F("timeout_ms", "int32"),
        F(
            "topic_data",
            [
                F("name", "string", "0-12"),
                F(
                    "partition_data",
                    [
                        F("index", "int32"),
                        F("records", "records", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
    response=[
        F(
            "responses",
            [
                F("name", "string", "0-12"),
                F(
                    "partition_responses",
                    [
                        F("index", "int32"),
                        F("error_code", "int16"),
                        F("base_offset", "int64"),
                        F("log_append_time_ms", "int64", "2+", default=-1),
                        F("log_start_offset", "int64", "5+", default=-1),
                        F(
                            "record_errors",
                            [
                                F("batch_index", "int32", "8+"),
                                F(
                                    "batch_index_error_message",
                                    "string",
                                    "8+",
                                    nullable="8+",
                                    default=None,
                                ),
                            ],
                            "8+",
                        ),
                        F("error_message", "string", "8+", nullable="8+", default=None),
                        F(
                            "current_leader",
                            _LEADER_ID_AND_EPOCH,
                            "10+",
                            tag=0,
                            default=None,
                        ),
                    ],
                ),
            ],
        ),
        F("throttle_time_ms", "int32", "1+", default=0),
        F("node_endpoints", _NODE_ENDPOINTS, "10+", tag=0, default=None),
    ],
)

FETCH = Api(
    1,
    "Fetch",
    "4-17",
    "12+",
    request=[
        F("cluster_id", "string", "12+", nullable="12+", default=None, tag=0),
        F("replica_id", "int32", "0-14", default=-1),
        # KIP-903 (v15+): the follower's id moves into a tagged struct.
        F(
            "replica_state",
            Struct(
                [F("replica_id", "int32", default=-1), F("replica_epoch", "int64", default=-1)]
            ),
            "15+",
            tag=1,
            default=None,
        ),
        F("max_wait_ms", "int32"),
        F("min_bytes", "int32"),
        F("max_bytes", "int32", "3+", default=0x7FFFFFFF),
        F("isolation_level", "int8", "4+", default=0),
        F("session_id", "int32", "7+", default=0),
        F("session_epoch", "int32", "7+", default=-1),
        F(
            "topics",
            [
                F("topic", "string", "0-12"),
                F("topic_id", "uuid", "13+"),
                F(
                    "partitions",
                    [
                        F("partition", "int32"),
                        F("current_leader_epoch", "int32", "9+", default=-1),
                        F("fetch_offset", "int64"),
                        F("last_fetched_epoch", "int32", "12+", default=-1),
                        F("log_start_offset", "int64", "5+", default=-1),
                        F("partition_max_bytes", "int32"),
                        F("replica_directory_id", "uuid", "17+", tag=0),
                    ],
                ),
            ],
        ),
        F(
            "forgotten_topics_data",
            [
                F("topic", "string", "7-12"),
                F("topic_id", "uuid", "13+"),
                F("partitions", "[]int32", "7+"),
            ],
            "7+",
        ),
        F("rack_id", "string", "11+", default=""),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "7+"),
        F("session_id", "int32", "7+", default=0),
        F(
            "responses",
            [
                F("topic", "string", "0-12"),
                F("topic_id", "uuid", "13+"),
                F(
                    "partitions",
                    [
                        F("partition_index", "int32"),
                        F("error_code", "int16"),
                        F("high_watermark", "int64"),
                        F("last_stable_offset", "int64", "4+", default=-1),
                        F("log_start_offset", "int64", "5+", default=-1),
                        # v12+: the follower's (or consumer's) log diverged
                        # from the leader's at this epoch's end (KIP-595/KIP-320).
                        F(
                            "diverging_epoch",
                            Struct(
                                [
                                    F("epoch", "int32", default=-1),
                                    F("end_offset", "int64", default=-1),
                                ]
                            ),
                            "12+",
                            tag=0,
                            default=None,
                        ),
                        F("current_leader", _LEADER_ID_AND_EPOCH, "12+", tag=1, default=None),
                        F(
                            "snapshot_id",
                            Struct(
                                [
                                    F("end_offset", "int64", default=-1),
                                    F("epoch", "int32", default=-1),
                                ]
                            ),
                            "12+",
                            tag=2,
                            default=None,
                        ),
                        F(
                            "aborted_transactions",
                            [
                                F("producer_id", "int64", "4+"),
                                F("first_offset", "int64", "4+"),
                            ],
                            "4+",
                            nullable="4+",
                        ),
                        F("preferred_read_replica", "int32", "11+", default=-1),
                        F("records", "records", nullable="0+"),
                    ],
                ),
            ],
        ),
        F("node_endpoints", _NODE_ENDPOINTS, "16+", tag=0, default=None),
    ],
)

LIST_OFFSETS = Api(
    2,
    "ListOffsets",
    "0-9",
    "6+",
    request=[
        F("replica_id", "int32"),
        F("isolation_level", "int8", "2+"),
        F(
            "topics",
            [
                F("name", "string"),
                F(
                    "partitions",
                    [
                        F("partition_index", "int32"),
                        F("current_leader_epoch", "int32", "4+", default=-1),
                        F("timestamp", "int64"),
                        F("max_num_offsets", "int32", "0", default=1),
                    ],
                ),
            ],
        ),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        F(
            "topics",
            [
                F("name", "string"),
                F(
                    "partitions",
                    [
                        F("partition_index", "int32"),
                        F("error_code", "int16"),
                        F("old_style_offsets", "[]int64", "0"),
                        F("timestamp", "int64", "1+", default=-1),
                        F("offset", "int64", "1+", default=-1),
                        F("leader_epoch", "int32", "4+", default=-1),
                    ],
                ),
            ],
        ),
    ],
)

DELETE_RECORDS = Api(
    21,
    "DeleteRecords",
    "0-1",
    "2+",
    request=[
        F(
            "topics",
            [
                F("name", "string"),
                F("partitions", [F("partition_index", "int32"), F("offset", "int64")]),
            ],
        ),
        F("timeout_ms", "int32"),
    ],
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
                        F("low_watermark", "int64"),
                        F("error_code", "int16"),
                    ],
                ),
            ],
        ),
    ],
)

INIT_PRODUCER_ID = Api(
    22,
    "InitProducerId",
    "0-5",  # v5 only says the client knows TRANSACTION_ABORTABLE (KIP-890); v6 is 2PC
    "2+",
    request=[
        F("transactional_id", "string", nullable="0+"),
        F("transaction_timeout_ms", "int32"),
        # KIP-360 (v3+): the producer's current id and epoch, to bump it.
        F("producer_id", "int64", "3+", default=-1),
        F("producer_epoch", "int16", "3+", default=-1),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("producer_id", "int64", default=-1),
        F("producer_epoch", "int16"),
    ],
)

OFFSET_FOR_LEADER_EPOCH = Api(
    23,
    "OffsetForLeaderEpoch",
    "0-3",
    "4+",
    request=[
        F("replica_id", "int32", "3+", default=-2),
        F(
            "topics",
            [
                F("topic", "string"),
                F(
                    "partitions",
                    [
                        F("partition", "int32"),
                        F("current_leader_epoch", "int32", "2+", default=-1),
                        F("leader_epoch", "int32"),
                    ],
                ),
            ],
        ),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        F(
            "topics",
            [
                F("topic", "string"),
                F(
                    "partitions",
                    [
                        F("error_code", "int16"),
                        F("partition", "int32"),
                        F("leader_epoch", "int32", "1+", default=-1),
                        F("end_offset", "int64", default=-1),
                    ],
                ),
            ],
        ),
    ],
)

APIS = [PRODUCE, FETCH, LIST_OFFSETS, DELETE_RECORDS, INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH]
