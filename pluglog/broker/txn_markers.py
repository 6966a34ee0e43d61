"""Writing transaction markers into the partitions this broker leads (WriteTxnMarkers).

Used by the WriteTxnMarkers handler (a coordinator on another broker) and
by this broker's own transaction coordinator for partitions led here. Each
marker is appended with acks=all semantics: a partition's answer is NONE
only once its high watermark covers the marker, as Kafka's
WriteTxnMarkers appends with ``requiredAcks=-1``. A marker in a
``__consumer_offsets`` partition also makes the group coordinator publish
(COMMIT) or drop (ABORT) the offsets the transaction committed there.
"""

from twisted.internet import defer

from pluglog.errors import NONE, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, KafkaError

OFFSETS_TOPIC = "__consumer_offsets"


def write_txn_markers(broker, markers, timeout_s=30.0):
    """A Deferred of a WriteTxnMarkers response body for ``markers``."""
    results = []
    waits = []
    for marker in markers:
        topics = []
        for topic in marker["topics"]:
            partitions = []
            for index in topic["partition_indexes"]:
                entry = {"partition_index": index, "error_code": NONE}
                partitions.append(entry)
                waits.append(_write_one(broker, marker, topic["name"], index, entry, timeout_s))
            topics.append({"name": topic["name"], "partitions": partitions})
        results.append({"producer_id": marker["producer_id"], "topics": topics})
    return defer.gatherResults(waits).addCallback(lambda _: {"markers": results})


def _write_one(broker, marker, topic, index, entry, timeout_s):
    part = broker.partitions.get((topic, index))
    if part is None:
        meta = broker.coordinator.topics().get(topic)
        hosted_elsewhere = meta is not None and 0 <= index < meta.num_partitions
        entry["error_code"] = (
            NOT_LEADER_OR_FOLLOWER if hosted_elsewhere else (UNKNOWN_TOPIC_OR_PARTITION)
        )
        return defer.succeed(None)
    commit = marker["transaction_result"]
    pid = marker["producer_id"]
    try:
        info = part.write_marker(
            pid, marker["producer_epoch"], commit, marker["coordinator_epoch"], broker.now_ms()
        )
    except KafkaError as exc:
        entry["error_code"] = exc.error_code
        return defer.succeed(None)

    def acknowledged(code):
        entry["error_code"] = code
        if code == NONE and topic == OFFSETS_TOPIC and broker.group_coordinator is not None:
            broker.group_coordinator.complete_txn(index, pid, commit)

    d = part.wait_for_hw(info.last_offset + 1, timeout_s, broker.reactor)
    return d.addCallback(acknowledged)
