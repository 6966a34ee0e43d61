"""Schemas for the data path: Produce (0), Fetch (1), ListOffsets (2),
DeleteRecords (21), InitProducerId (22), OffsetForLeaderEpoch (23).

RECORDS fields stay opaque: decoded as zero-copy memoryviews, encoded from bytes,
memoryviews or file ranges.  Produce v0-2 carry legacy message sets in the same
``records`` field; telling formats apart is the record layer's job.
"""

from pluglog.protocol.schema import Api, F

PRODUCE = Api(
    0,
    "Produce",
    "0-8",
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
                    ],
                ),
            ],
        ),
        F("throttle_time_ms", "int32", "1+", default=0),
    ],
)

FETCH = Api(
    1,
    "Fetch",
    "4-11",
    "12+",
    request=[
        F("replica_id", "int32", "0-14", default=-1),
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
                F(
                    "partitions",
                    [
                        F("partition", "int32"),
                        F("current_leader_epoch", "int32", "9+", default=-1),
                        F("fetch_offset", "int64"),
                        F("log_start_offset", "int64", "5+", default=-1),
                        F("partition_max_bytes", "int32"),
                    ],
                ),
            ],
        ),
        F(
            "forgotten_topics_data",
            [
                F("topic", "string", "7-12"),
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
                F(
                    "partitions",
                    [
                        F("partition_index", "int32"),
                        F("error_code", "int16"),
                        F("high_watermark", "int64"),
                        F("last_stable_offset", "int64", "4+", default=-1),
                        F("log_start_offset", "int64", "5+", default=-1),
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
    ],
)

LIST_OFFSETS = Api(
    2,
    "ListOffsets",
    "0-8",
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
    "0-4",
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
