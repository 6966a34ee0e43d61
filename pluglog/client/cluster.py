"""The client's view of a cluster: bootstrap, metadata, connections, routing.

:class:`ClusterClient` is what Producer, Consumer and AdminClient share (like
aiokafka's AIOKafkaClient): it bootstraps from ``bootstrap.servers``, keeps
the Metadata answer (brokers, partition leaders, the controller), owns one
connection per broker and purpose (``"default"``, ``"group"`` for the group
coordinator, ``"fetch"`` so long polls do not delay produce answers) and
reconnects with exponential backoff on the reactor clock. Requests go to a
node id; :meth:`ClusterClient.send` picks the version both sides speak from
the ApiVersions the connection negotiated.
"""

import random

from twisted.internet import defer, task
from twisted.logger import Logger
from twisted.python.failure import Failure

from pluglog.client.config import ms
from pluglog.client.connection import connect
from pluglog.client.errors import (
    BrokerResponseError,
    KafkaConnectionError,
    NoBrokersAvailableError,
    RequestTimedOutError,
)
from pluglog.config import split_host_port
from pluglog.errors import ConfigError
from pluglog.protocol.api_keys import FIND_COORDINATOR, METADATA

log = Logger()

METADATA_VERSION = 8


class TopicPartition(tuple):
    """``(topic, partition)`` with names, like aiokafka's and kafka-python's."""

    __slots__ = ()

    def __new__(cls, topic, partition):
        return tuple.__new__(cls, (topic, partition))

    topic = property(lambda self: self[0])
    partition = property(lambda self: self[1])

    def __repr__(self):
        return f"TopicPartition(topic={self[0]!r}, partition={self[1]})"


class _Node:
    __slots__ = ("host", "port", "failures", "next_attempt")

    def __init__(self, host, port):
        self.host = host
        self.port = port
        self.failures = 0
        self.next_attempt = 0.0


class ClusterClient:
    """Metadata and connections for one client (see module docstring)."""

    def __init__(self, reactor, config):
        self.reactor = reactor
        self.config = config
        self.client_id = config["client.id"]
        self.request_timeout = ms(config["request.timeout.ms"])
        self.bootstrap = []
        for server in config["bootstrap.servers"]:
            try:
                self.bootstrap.append(split_host_port(server))
            except ValueError as exc:
                raise ConfigError(f"bootstrap.servers: {exc}") from None
        self.nodes = {}
        self.leaders = {}  # TopicPartition -> node id (-1: no leader)
        self.leader_epochs = {}
        self.partitions = {}  # topic -> sorted partition ids
        self.topic_errors = {}
        self.controller_id = -1
        self.cluster_id = None
        self.last_refresh = None
        #: reactor time until which the metadata counts as fresh
        self.fresh_until = float("-inf")
        self._conns = {}  # (node id or address, purpose) -> connected protocol
        self._connecting = {}  # same key -> Deferreds waiting for the connection
        self._refreshing = None
        self._closed = False
        #: Producers ask the broker to create topics they name (Kafka's behaviour).
        self.allow_auto_topic_creation = False

    # -- metadata -------------------------------------------------------

    def start(self):
        """Bootstrap: one Metadata answer from any bootstrap server."""
        return self.refresh_metadata()

    def refresh_metadata(self, topics=None):
        """Refresh metadata (all topics, or ``topics`` plus the known ones);
        concurrent callers share one request."""
        if self._refreshing is not None and topics is None:
            d = defer.Deferred()
            self._refreshing.addBoth(lambda r: (d.callback(None), r)[1])
            return d
        d = self._refresh(topics)
        if topics is None:
            self._refreshing = d

            def done(result):
                self._refreshing = None
                return result

            d.addBoth(done)
        return d

    @defer.inlineCallbacks
    def _refresh(self, topics):
        body = {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": self.allow_auto_topic_creation and topics is not None,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        candidates = list(self.nodes) or [None]
        random.shuffle(candidates)
        errors = []
        for node_id in candidates + [None]:
            try:
                response = yield self.send(node_id, METADATA, METADATA_VERSION, body)
            except (KafkaConnectionError, RequestTimedOutError) as exc:
                errors.append(str(exc))
                continue
            self._apply_metadata(response, full=topics is None)
            return response
        raise NoBrokersAvailableError(
            "no broker answered ("
            + ", ".join(f"{h}:{p}" for h, p in self.bootstrap)
            + "): "
            + "; ".join(errors[-3:])
        )

    def _apply_metadata(self, response, full):
        seen = set()
        for broker in response["brokers"]:
            node = self.nodes.get(broker["node_id"])
            address = (broker["host"], broker["port"])
            if node is None or (node.host, node.port) != address:
                self.nodes[broker["node_id"]] = _Node(*address)
            seen.add(broker["node_id"])
        for node_id in list(self.nodes):
            if node_id not in seen:
                del self.nodes[node_id]
        self.controller_id = response.get("controller_id", -1)
        self.cluster_id = response.get("cluster_id")
        if full:
            self.partitions.clear()
            self.leaders.clear()
        for topic in response["topics"]:
            name = topic["name"]
            self.topic_errors[name] = topic["error_code"]
            for tp in [tp for tp in self.leaders if tp[0] == name]:
                del self.leaders[tp]
            if topic["error_code"] and not topic["partitions"]:
                self.partitions.pop(name, None)
                continue
            ids = []
            for part in topic["partitions"]:
                tp = TopicPartition(name, part["partition_index"])
                ids.append(tp.partition)
                self.leaders[tp] = part["leader_id"] if not part["error_code"] else -1
                if part["error_code"] and part["leader_id"] >= 0:
                    self.leaders[tp] = part["leader_id"]
                self.leader_epochs[tp] = part.get("leader_epoch", -1)
            self.partitions[name] = sorted(ids)
        self.last_refresh = self.reactor.seconds()
        self.fresh_until = self.last_refresh + ms(self.config["metadata.max.age.ms"])

    def leader_for(self, tp):
        """Node id leading ``tp`` per the last metadata, or -1 if none is known."""
        return self.leaders.get(tp, -1)

    def metadata_stale(self):
        return self.reactor.seconds() >= self.fresh_until

    @defer.inlineCallbacks
    def partitions_for(self, topic, wait=True):
        """Partition ids of ``topic``, fetching metadata if it is not known yet;
        raises BrokerResponseError(UNKNOWN_TOPIC_OR_PARTITION) when it does not exist."""
        if topic not in self.partitions or self.metadata_stale():
            yield self.refresh_metadata([topic, *self.partitions])
        if topic not in self.partitions:
            code = self.topic_errors.get(topic) or 3
            raise BrokerResponseError(code, where=f"topic {topic!r}")
        return self.partitions[topic]

    @defer.inlineCallbacks
    def find_coordinator(self, key, key_type=0):
        """Node id of the group (key_type 0) or transaction coordinator."""
        body = {"key": key, "key_type": key_type}
        response = yield self.send(None, FIND_COORDINATOR, 2, body)
        if response["error_code"]:
            raise BrokerResponseError(
                response["error_code"], response.get("error_message"), f"coordinator for {key}"
            )
        node_id = response["node_id"]
        node = self.nodes.get(node_id)
        if node is None or (node.host, node.port) != (response["host"], response["port"]):
            self.nodes[node_id] = _Node(response["host"], response["port"])
        return node_id

    # -- connections ----------------------------------------------------

    def _address(self, node_id):
        if node_id is None:
            if self.nodes:
                node_id = random.choice(list(self.nodes))
            else:
                return random.choice(self.bootstrap), ("bootstrap", None)
        node = self.nodes.get(node_id)
        if node is None:
            raise KafkaConnectionError(f"unknown broker node {node_id}")
        return (node.host, node.port), node_id

    def connection(self, node_id, purpose="default"):
        """A Deferred connected protocol to ``node_id`` (None: any broker)."""
        if self._closed:
            return defer.fail(KafkaConnectionError("client is closed"))
        try:
            address, key_id = self._address(node_id)
        except KafkaConnectionError:
            return defer.fail()
        key = (key_id if key_id != ("bootstrap", None) else address, purpose)
        existing = self._conns.get(key)
        if existing is not None and not existing.closed:
            return defer.succeed(existing)
        waiter = defer.Deferred()
        waiting = self._connecting.get(key)
        if waiting is None:
            self._connecting[key] = [waiter]
            self._connect(key, address, self.nodes.get(key_id)).addBoth(self._connected, key)
        else:
            waiting.append(waiter)
        return waiter

    def _connected(self, result, key):
        waiters = self._connecting.pop(key, [])
        if not isinstance(result, Failure):
            self._conns[key] = result
            result.lost.addCallback(lambda _: self._forget(key, result))
        for waiter in waiters:
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                waiter.callback(result)

    @defer.inlineCallbacks
    def _connect(self, key, address, node):
        if node is not None:
            delay = node.next_attempt - self.reactor.seconds()
            if delay > 0:
                yield task.deferLater(self.reactor, delay, lambda: None)
        timeout = ms(self.config["socket.connection.setup.timeout.ms"])
        try:
            conn = yield connect(
                self.reactor,
                address[0],
                address[1],
                client_id=self.client_id,
                timeout=timeout,
                request_timeout=self.request_timeout,
            )
        except Exception:
            if node is not None:
                node.failures += 1
                base = self.config["reconnect.backoff.ms"] * 2 ** min(node.failures - 1, 10)
                backoff = min(base, self.config["reconnect.backoff.max.ms"])
                # Kafka's jitter: +-20 % so a fleet does not reconnect in step.
                node.next_attempt = self.reactor.seconds() + ms(backoff) * random.uniform(0.8, 1.2)
            raise
        if node is not None:
            node.failures = 0
        return conn

    def _forget(self, key, conn):
        if self._conns.get(key) is conn:
            del self._conns[key]

    @defer.inlineCallbacks
    def send(self, node_id, api_key, max_version, body, timeout=None, purpose="default", **kw):
        """Send to ``node_id`` (None: any) at the best common version <= max_version.

        ``body`` may be a callable ``body(version)`` for APIs whose fields
        differ between the versions a broker might pick."""
        conn = yield self.connection(node_id, purpose)
        version = conn.version_for(api_key, max_version)
        payload = body(version) if callable(body) else body
        response = yield conn.request(api_key, version, payload, timeout=timeout, **kw)
        return response

    def connected_nodes(self):
        return list(self._conns)

    def close(self):
        """Close every connection; a Deferred fires when all are gone."""
        self._closed = True
        waits = [conn.close() for conn in self._conns.values()]
        self._conns.clear()
        return defer.DeferredList(waits, consumeErrors=True)
