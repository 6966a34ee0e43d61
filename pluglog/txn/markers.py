"""Sending COMMIT and ABORT markers to the partitions of a transaction.

Kafka's TransactionMarkerChannelManager: once a transaction is prepared
(PrepareCommit or PrepareAbort is in ``__transaction_state``) the
coordinator writes a marker to every partition in it, on whichever broker
leads that partition now. A partition led here is written directly
(:meth:`pluglog.broker.core.Broker.write_txn_markers`, the same code that
serves WriteTxnMarkers); other leaders get a WriteTxnMarkers request over an
inter-broker connection (``connect``, given by the broker: the replica
fetcher's, with the inter-broker listener's TLS and SASL).

A partition that answers with an error (its leader moved, too few in-sync
replicas, a connection failed) is retried after a backoff against its
current leader, until every partition has its marker or the coordinator no
longer owns the transaction (``wanted()`` turns false; the next coordinator
resends from the prepared state). A partition whose topic was deleted is
done. Markers are idempotent for the partition: a second copy of a marker
the partition already has ends nothing twice.
"""

from twisted.internet import defer, task
from twisted.logger import Logger

from pluglog.coordination.state import NO_LEADER
from pluglog.errors import NONE
from pluglog.protocol.api_keys import WRITE_TXN_MARKERS

log = Logger()

RETRY_BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0
CONNECT_TIMEOUT_S = 10.0


class MarkerChannel:
    """Writes markers for one coordinator, to local and remote leaders."""

    def __init__(self, broker, connect=None):
        self.broker = broker
        self.reactor = broker.reactor
        self.connect = connect
        self._protos = {}  # node id -> KafkaClientProtocol

    def close(self):
        for proto in self._protos.values():
            proto.close()
        self._protos.clear()

    @defer.inlineCallbacks
    def send(self, producer_id, producer_epoch, commit, coordinator_epoch, partitions, wanted):
        """Write the marker to every ``(topic, partition)``; fires True when
        all have it, False when ``wanted()`` turned false first."""
        pending = set(partitions)
        backoff = RETRY_BACKOFF_S
        while pending:
            if not wanted():
                return False
            by_leader = {}
            topics = self.broker.coordinator.topics()
            for topic, index in list(pending):
                meta = topics.get(topic)
                if meta is None or index >= meta.num_partitions:
                    pending.discard((topic, index))  # deleted: nothing to end
                    continue
                state = self.broker.coordinator.partition_state(topic, index)
                if state is None or state.leader == NO_LEADER:
                    continue
                by_leader.setdefault(state.leader, []).append((topic, index))
            calls = [
                self._write(leader, parts, producer_id, producer_epoch, commit, coordinator_epoch)
                for leader, parts in by_leader.items()
            ]
            for codes in (yield defer.gatherResults(calls)):
                for key, code in codes.items():
                    if code == NONE:
                        pending.discard(key)
            if pending:
                yield task.deferLater(self.reactor, backoff, lambda: None)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        return True

    def _write(self, leader, parts, producer_id, producer_epoch, commit, coordinator_epoch):
        marker = {
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "transaction_result": commit,
            "coordinator_epoch": coordinator_epoch,
            "topics": _topics(parts),
        }
        if leader == self.broker.node_id:
            d = self.broker.write_txn_markers([marker])
        else:
            d = self._remote(leader, marker)
        d.addCallback(_codes)
        return d.addErrback(self._failed, leader, parts)

    def _failed(self, failure, leader, parts):
        log.info(
            "writing transaction markers via broker {leader} failed: {why}",
            leader=leader,
            why=failure.getErrorMessage(),
        )
        self._drop(leader)
        return {key: -1 for key in parts}

    @defer.inlineCallbacks
    def _remote(self, leader, marker):
        proto = self._protos.get(leader)
        if proto is None or not proto.connected:
            address = _address(self.broker, leader)
            if address is None or self.connect is None:
                raise ConnectionError(f"no address for broker {leader}")
            proto = yield self.connect(
                self.reactor,
                self.broker.config,
                address[0],
                address[1],
                f"txn-markers-{self.broker.node_id}",
                CONNECT_TIMEOUT_S,
            )
            self._protos[leader] = proto
        response = yield proto.request(WRITE_TXN_MARKERS, 1, {"markers": [marker]})
        return response

    def _drop(self, node_id):
        proto = self._protos.pop(node_id, None)
        if proto is not None:
            proto.close()


def _topics(parts):
    by_topic = {}
    for topic, index in parts:
        by_topic.setdefault(topic, []).append(index)
    return [{"name": t, "partition_indexes": sorted(i)} for t, i in sorted(by_topic.items())]


def _codes(response):
    out = {}
    for marker in response["markers"]:
        for topic in marker["topics"]:
            for p in topic["partitions"]:
                out[(topic["name"], p["partition_index"])] = p["error_code"]
    return out


def _address(broker, node_id):
    for node, host, port, _rack in broker.coordinator.brokers():
        if node == node_id:
            return host, port
    return None
