"""InitProducerId and the transaction APIs.

InitProducerId without a transactional id hands out a fresh producer id
(idempotence); with one it goes to the transaction coordinator, as do
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and
ListTransactions. TxnOffsetCommit goes to the group coordinator.
WriteTxnMarkers (from another broker's coordinator) writes markers into the
partitions led here. DescribeProducers reads the partitions' producer state.

Older request versions get INVALID_PRODUCER_EPOCH where the coordinator
says PRODUCER_FENCED, as Kafka's KafkaApis does: the code is new in
InitProducerId v4, AddPartitionsToTxn/AddOffsetsToTxn/EndTxn v2.
"""

from pluglog import protocol as codec
from pluglog.errors import (
    COORDINATOR_NOT_AVAILABLE,
    INVALID_PRODUCER_EPOCH,
    NONE,
    PRODUCER_FENCED,
)
from pluglog.server.handlers.common import leader_error
from pluglog.server.handlers.groups import coordinator as group_coordinator


def _fenced(code, version, first_version):
    if code == PRODUCER_FENCED and version < first_version:
        return INVALID_PRODUCER_EPOCH
    return code


def _txn_coordinator(broker):
    tc = broker.txn_coordinator
    return tc if tc is not None and tc.active else None


def handle_init_producer_id(ctx, request):
    broker = ctx.broker
    txn_id = request["transactional_id"]

    def answer(code, pid=-1, epoch=-1):
        return {
            "throttle_time_ms": 0,
            "error_code": _fenced(code, ctx.version, 4),
            "producer_id": pid,
            "producer_epoch": epoch,
        }

    if txn_id is None:
        return answer(NONE, broker.allocate_producer_id(), 0)
    tc = _txn_coordinator(broker)
    if tc is None:
        return answer(COORDINATOR_NOT_AVAILABLE)
    d = tc.init_producer_id(
        txn_id,
        request["transaction_timeout_ms"],
        request.get("producer_id", -1),
        request.get("producer_epoch", -1),
    )
    return d.addCallback(lambda result: answer(*result))


def handle_add_partitions_to_txn(ctx, request):
    wanted = [
        (topic["name"], index)
        for topic in request["v3_and_below_topics"]
        for index in topic["partitions"]
    ]

    def answer(codes):
        by_topic = {}
        for (name, index), code in codes.items():
            by_topic.setdefault(name, []).append(
                {"partition_index": index, "partition_error_code": _fenced(code, ctx.version, 2)}
            )
        return {
            "throttle_time_ms": 0,
            "results_by_topic_v3_and_below": [
                {"name": name, "results_by_partition": parts} for name, parts in by_topic.items()
            ],
        }

    tc = _txn_coordinator(ctx.broker)
    if tc is None:
        return answer({key: COORDINATOR_NOT_AVAILABLE for key in wanted})
    d = tc.add_partitions(
        request["v3_and_below_transactional_id"],
        request["v3_and_below_producer_id"],
        request["v3_and_below_producer_epoch"],
        wanted,
    )
    return d.addCallback(answer)


def _coordinator_code(ctx, method, *args):
    """Call the transaction coordinator's ``method``; answer its error code."""
    tc = _txn_coordinator(ctx.broker)
    if tc is None:
        return {"throttle_time_ms": 0, "error_code": COORDINATOR_NOT_AVAILABLE}
    d = getattr(tc, method)(*args)
    return d.addCallback(
        lambda code: {"throttle_time_ms": 0, "error_code": _fenced(code, ctx.version, 2)}
    )


def handle_add_offsets_to_txn(ctx, request):
    r = request
    args = (r["transactional_id"], r["producer_id"], r["producer_epoch"], r["group_id"])
    return _coordinator_code(ctx, "add_offsets", *args)


def handle_end_txn(ctx, request):
    r = request
    args = (r["transactional_id"], r["producer_id"], r["producer_epoch"], r["committed"])
    return _coordinator_code(ctx, "end_txn", *args)


def handle_write_txn_markers(ctx, request):
    return ctx.broker.write_txn_markers(request["markers"])


def handle_txn_offset_commit(ctx, request):
    d = group_coordinator(ctx.broker).txn_commit_offsets(
        request["group_id"],
        request["producer_id"],
        request["producer_epoch"],
        request.get("generation_id", -1),
        request.get("member_id", ""),
        request.get("group_instance_id"),
        request["topics"],
    )
    return d.addCallback(lambda topics: {"throttle_time_ms": 0, "topics": topics})


def describe_entry(txn_id, code):
    """A DescribeTransactions entry that carries only ``code``."""
    return {
        "error_code": code,
        "transactional_id": txn_id,
        "transaction_state": "",
        "transaction_timeout_ms": 0,
        "transaction_start_time_ms": -1,
        "producer_id": -1,
        "producer_epoch": -1,
        "topics": [],
    }


def handle_describe_transactions(ctx, request):
    tc = _txn_coordinator(ctx.broker)
    states = []
    for txn_id in request["transactional_ids"]:
        entry = describe_entry(txn_id, COORDINATOR_NOT_AVAILABLE if tc is None else NONE)
        if tc is not None:
            entry.update(tc.describe(txn_id))
        states.append(entry)
    return {"throttle_time_ms": 0, "transaction_states": states}


def handle_list_transactions(ctx, request):
    tc = _txn_coordinator(ctx.broker)
    if tc is None:
        return {
            "throttle_time_ms": 0,
            "error_code": COORDINATOR_NOT_AVAILABLE,
            "unknown_state_filters": [],
            "transaction_states": [],
        }
    unknown, listed = tc.list_transactions(
        request["state_filters"],
        request["producer_id_filters"],
        request.get("duration_filter", -1),
    )
    return {
        "throttle_time_ms": 0,
        "error_code": NONE,
        "unknown_state_filters": unknown,
        "transaction_states": listed,
    }


def handle_describe_producers(ctx, request):
    broker = ctx.broker
    topics = []
    for topic in request["topics"]:
        parts = []
        for index in topic["partition_indexes"]:
            part = broker.partitions.get((topic["name"], index))
            code = leader_error(broker, topic["name"], part, {}, index)
            entry = {
                "partition_index": index,
                "error_code": code,
                "error_message": None,
                "active_producers": [],
            }
            if code == NONE:
                entry["active_producers"] = [
                    {
                        "producer_id": pid,
                        "producer_epoch": epoch,
                        "last_sequence": last_seq,
                        "last_timestamp": last_ts,
                        "coordinator_epoch": -1,
                        "current_txn_start_offset": part.ongoing_transaction(pid),
                    }
                    for pid, epoch, last_seq, last_ts in part.producer_states()
                ]
            parts.append(entry)
        topics.append({"name": topic["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


HANDLERS = {
    codec.INIT_PRODUCER_ID: handle_init_producer_id,
    codec.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    codec.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    codec.END_TXN: handle_end_txn,
    codec.WRITE_TXN_MARKERS: handle_write_txn_markers,
    codec.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    codec.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    codec.LIST_TRANSACTIONS: handle_list_transactions,
    codec.DESCRIBE_PRODUCERS: handle_describe_producers,
}
