"""Produce: append client batches as received, answer in the request's version.

v3+ carry exactly one magic-2 batch per partition; the broker checks its
header and CRC-32C, patches baseOffset and partitionLeaderEpoch and appends
the bytes unchanged (compressed batches stay compressed). Produce v0-2
(legacy magic 0/1 message sets) are advertised only because librdkafka <
2.11.1 enables compression when Produce's range starts at 0; like Kafka 4
(KAFKA-18659) the broker refuses them with UNSUPPORTED_VERSION per
partition, and docs/protocol.rst says so.
"""

from twisted.internet import defer
from twisted.logger import Logger

from pluglog import protocol as codec
from pluglog.broker.log_dirs import write_failed
from pluglog.errors import (
    FENCED_LEADER_EPOCH,
    INVALID_RECORD,
    INVALID_REQUIRED_ACKS,
    NONE,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
    UNSUPPORTED_VERSION,
    KafkaError,
    KafkaStorageError,
)
from pluglog.server.handlers.common import NO_RESPONSE, CloseConnection, error_code
from pluglog.server.handlers.leaders import current_leader, leader_endpoints

log = Logger()
_BATCH_LENGTH_AT = 8


def one_batch(records):
    """True when ``records`` is exactly one v2 batch (Produce v3+ rule)."""
    if len(records) < 61:
        return False
    length = int.from_bytes(records[_BATCH_LENGTH_AT : _BATCH_LENGTH_AT + 4], "big", signed=True)
    return length + 12 == len(records)


def partition_result(index, code, base_offset=-1, append_time=-1, log_start=-1, message=None):
    return {
        "index": index,
        "error_code": code,
        "base_offset": base_offset,
        "log_append_time_ms": append_time,
        "log_start_offset": log_start,
        "record_errors": [],
        "error_message": message,
    }


def error_result(index, exc):
    """The partition result of a refused append; an InvalidRecordsError's
    records are named by batch index (KIP-467, Produce v8+)."""
    result = partition_result(index, error_code(exc), message=str(exc))
    for batch_index, message in getattr(exc, "record_errors", ()):
        result["record_errors"].append(
            {"batch_index": batch_index, "batch_index_error_message": message}
        )
    return result


def handle_produce(ctx, request):
    broker = ctx.broker
    version = ctx.version
    acks = request["acks"]
    now = broker.now_ms()
    reactor = broker.reactor
    timeout = max(request.get("timeout_ms", 30000), 0) / 1000.0
    responses = []
    waits = []
    failed = False
    for topic in request["topic_data"]:
        name = topic["name"]
        results = []
        for part in topic["partition_data"]:
            index = part["index"]
            records = part["records"]
            if acks not in (-1, 0, 1):
                results.append(
                    partition_result(index, INVALID_REQUIRED_ACKS, message=f"acks={acks}")
                )
                failed = True
                continue
            if version < 3:
                results.append(
                    partition_result(
                        index,
                        UNSUPPORTED_VERSION,
                        message="legacy message sets (Produce v0-2) are not accepted; "
                        "use record batch format v2 (Produce v3+)",
                    )
                )
                failed = True
                continue
            if records is None or not one_batch(records):
                results.append(
                    partition_result(
                        index,
                        INVALID_RECORD,
                        message="Produce v3+ must carry exactly one v2 record batch per partition",
                    )
                )
                failed = True
                continue
            if records[22] & 0x10 and broker.txn_coordinator is not None:
                # Transactional: the partition must be in the producer's open
                # transaction (Kafka 3.6's verification, where this broker
                # coordinates the id; another coordinator's are not asked).
                code, message = broker.txn_coordinator.verify(
                    request.get("transactional_id"), records, name, index
                )
                if code != NONE:
                    failed = True
                    results.append(partition_result(index, code, message=message))
                    continue
            try:
                partition = broker.partition(name, index)
                info = partition.append(records, now, acks)
            except KafkaError as exc:
                failed = True
                result = error_result(index, exc)
                if version >= 10 and result["error_code"] in _MOVED:
                    result["current_leader"] = current_leader(broker, name, index)
                results.append(result)
                continue
            except OSError as exc:
                failed = True
                write_failed(broker, name, index, exc)
                results.append(error_result(index, KafkaStorageError(str(exc))))
                continue
            # A stored append and a deduplicated retry (DuplicateAppend) answer alike.
            result = partition_result(
                index, NONE, info.first_offset, info.log_append_time, info.log_start_offset
            )
            results.append(result)
            if acks == -1 and partition.high_watermark <= info.last_offset:
                waits.append(
                    (result, partition.wait_for_hw(info.last_offset + 1, timeout, reactor))
                )
        responses.append({"name": name, "partition_responses": results})
    if acks == 0:
        if failed:
            # Kafka closes an acks=0 connection on error: the client has no
            # response slot to receive one in.
            raise CloseConnection("produce with acks=0 failed")
        return NO_RESPONSE
    response = {"responses": responses, "throttle_time_ms": 0}
    if version >= 10 and failed:
        response["node_endpoints"] = leader_endpoints(
            broker, ctx.session, responses, "partition_responses"
        )
    if not waits:
        return response
    return _delayed(response, waits)


def _delayed(response, waits):
    """acks=all: answer once every partition's HW has passed its batch
    (Kafka's DelayedProduce); a partition that times out or loses its
    leadership first reports that instead of success."""

    def settle(codes):
        for (result, _), (_ok, code) in zip(waits, codes):
            if code != NONE:
                result["error_code"] = code
                result["error_message"] = _WAIT_MESSAGES.get(code)
        return response

    return defer.DeferredList([d for _, d in waits]).addCallback(settle)


#: errors answered with the partition's current leader (KIP-951)
_MOVED = (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH)

_WAIT_MESSAGES = {
    NOT_ENOUGH_REPLICAS_AFTER_APPEND: "written, but the ISR shrank below min.insync.replicas",
    REQUEST_TIMED_OUT: "the in-sync replicas did not confirm the write within the timeout",
    NOT_LEADER_OR_FOLLOWER: "leadership moved before the in-sync replicas confirmed the write",
}


HANDLERS = {codec.PRODUCE: handle_produce}
