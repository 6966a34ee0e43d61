"""Authorization of the transaction APIs, as Kafka's KafkaApis checks them.

* FindCoordinator for a transactional id, AddPartitionsToTxn,
  AddOffsetsToTxn, EndTxn, TxnOffsetCommit, and Produce with a
  transactional id need WRITE (FindCoordinator: DESCRIBE) on the
  TRANSACTIONAL_ID resource, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
* AddPartitionsToTxn also needs WRITE on each topic (denied topics get
  TOPIC_AUTHORIZATION_FAILED, the rest OPERATION_NOT_ATTEMPTED);
  AddOffsetsToTxn and TxnOffsetCommit READ on the group, TxnOffsetCommit
  READ on each topic;
* WriteTxnMarkers is for brokers: CLUSTER_ACTION on the cluster;
* DescribeTransactions answers ids without DESCRIBE with
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ListTransactions lists only those
  the principal may DESCRIBE, DescribeProducers needs READ on the topic.
"""

from pluglog.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    OPERATION_NOT_ATTEMPTED,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
)
from pluglog.security.acls import CLUSTER, CLUSTER_NAME, DESCRIBE, GROUP, READ, TOPIC, WRITE
from pluglog.server.authorization import allowed
from pluglog.server.checks import CLUSTER_ACTION, TRANSACTIONAL_ID, _then
from pluglog.server.handlers.txn import describe_entry

_TXN_DENIED = TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _txn_ok(ctx, txn_id, operation=WRITE):
    return allowed(ctx, operation, TRANSACTIONAL_ID, txn_id)


def _add_partitions(ctx, request, handler):
    topics = request["v3_and_below_topics"]
    txn_ok = _txn_ok(ctx, request["v3_and_below_transactional_id"])
    denied = {t["name"] for t in topics if not allowed(ctx, WRITE, TOPIC, t["name"])}
    if txn_ok and not denied:
        return handler(ctx, request)

    def code_of(name):
        if not txn_ok:
            return _TXN_DENIED
        return TOPIC_AUTHORIZATION_FAILED if name in denied else OPERATION_NOT_ATTEMPTED

    return {
        "throttle_time_ms": 0,
        "results_by_topic_v3_and_below": [
            {
                "name": t["name"],
                "results_by_partition": [
                    {"partition_index": p, "partition_error_code": code_of(t["name"])}
                    for p in t["partitions"]
                ],
            }
            for t in topics
        ],
    }


def _add_offsets(ctx, request, handler):
    if not _txn_ok(ctx, request["transactional_id"]):
        code = _TXN_DENIED
    elif not allowed(ctx, READ, GROUP, request["group_id"]):
        code = GROUP_AUTHORIZATION_FAILED
    else:
        return handler(ctx, request)
    return {"throttle_time_ms": 0, "error_code": code}


def _end_txn(ctx, request, handler):
    if _txn_ok(ctx, request["transactional_id"]):
        return handler(ctx, request)
    return {"throttle_time_ms": 0, "error_code": _TXN_DENIED}


def _txn_offset_commit(ctx, request, handler):
    if not _txn_ok(ctx, request["transactional_id"]):
        whole = _TXN_DENIED
    elif not allowed(ctx, READ, GROUP, request["group_id"]):
        whole = GROUP_AUTHORIZATION_FAILED
    else:
        whole = None
    denied = {t["name"] for t in request["topics"] if not allowed(ctx, READ, TOPIC, t["name"])}
    if whole is None and not denied:
        return handler(ctx, request)

    def entry(t, code):
        parts = t["partitions"]
        out = [{"partition_index": p["partition_index"], "error_code": code} for p in parts]
        return {"name": t["name"], "partitions": out}

    if whole is not None:
        return {"throttle_time_ms": 0, "topics": [entry(t, whole) for t in request["topics"]]}
    topics = request["topics"]
    extra = [entry(t, TOPIC_AUTHORIZATION_FAILED) for t in topics if t["name"] in denied]
    request["topics"] = [t for t in request["topics"] if t["name"] not in denied]

    def fix(body):
        body["topics"] = list(body["topics"]) + extra
        return body

    return _then(handler(ctx, request), fix)


def _write_txn_markers(ctx, request, handler):
    if allowed(ctx, CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
        return handler(ctx, request)
    return {
        "markers": [
            {
                "producer_id": m["producer_id"],
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [
                            {"partition_index": p, "error_code": CLUSTER_AUTHORIZATION_FAILED}
                            for p in t["partition_indexes"]
                        ],
                    }
                    for t in m["topics"]
                ],
            }
            for m in request["markers"]
        ]
    }


def _describe_transactions(ctx, request, handler):
    ids = request["transactional_ids"]
    denied = [i for i in ids if not _txn_ok(ctx, i, DESCRIBE)]
    if not denied:
        return handler(ctx, request)
    request["transactional_ids"] = [i for i in ids if i not in denied]

    def fix(body):
        for txn_id in denied:
            body["transaction_states"].append(describe_entry(txn_id, _TXN_DENIED))
        return body

    return _then(handler(ctx, request), fix)


def _list_transactions(ctx, request, handler):
    def fix(body):
        body["transaction_states"] = [
            s for s in body["transaction_states"] if _txn_ok(ctx, s["transactional_id"], DESCRIBE)
        ]
        return body

    return _then(handler(ctx, request), fix)


def _describe_producers(ctx, request, handler):
    denied = [t for t in request["topics"] if not allowed(ctx, READ, TOPIC, t["name"])]
    if not denied:
        return handler(ctx, request)
    request["topics"] = [t for t in request["topics"] if t not in denied]
    extra = [
        {
            "name": t["name"],
            "partitions": [
                {
                    "partition_index": p,
                    "error_code": TOPIC_AUTHORIZATION_FAILED,
                    "error_message": None,
                    "active_producers": [],
                }
                for p in t["partition_indexes"]
            ],
        }
        for t in denied
    ]

    def fix(body):
        body["topics"] = list(body["topics"]) + extra
        return body

    return _then(handler(ctx, request), fix)


TXN_CHECKS = {
    24: _add_partitions,
    25: _add_offsets,
    26: _end_txn,
    27: _write_txn_markers,
    28: _txn_offset_commit,
    61: _describe_producers,
    65: _describe_transactions,
    66: _list_transactions,
}
