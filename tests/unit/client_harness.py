"""A scripted broker for client unit tests: StringTransports and a task.Clock.

:class:`ScriptedCluster` replaces :func:`pluglog.client.cluster.connect`: each
connection the client opens is a real :class:`KafkaClientProtocol` on a
``StringTransport``; :meth:`ScriptedCluster.pump` decodes what the client
wrote with pluglog's codec and answers through ``handlers[api_key]`` (a
function ``(conn, version, body) -> response dict``, or None to leave the
request unanswered). ``refuse`` makes the next connection attempts fail.
"""

import struct

from twisted.internet import defer
from twisted.internet.error import ConnectionLost
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from pluglog import protocol as codec
from pluglog.client import cluster as cluster_module
from pluglog.client.connection import KafkaClientProtocol
from pluglog.client.errors import KafkaConnectionError
from pluglog.protocol.apis import SUPPORTED

BROKER = {"node_id": 1, "host": "b1", "port": 9092, "rack": None}


def metadata_answer(topics, leader=1, brokers=(BROKER,)):
    """topics: {name: partition count}."""
    return {
        "throttle_time_ms": 0,
        "brokers": list(brokers),
        "cluster_id": "unit",
        "controller_id": 1,
        "topics": [
            {
                "error_code": 0,
                "name": name,
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": p,
                        "leader_id": leader,
                        "leader_epoch": 0,
                        "replica_nodes": [leader],
                        "isr_nodes": [leader],
                        "offline_replicas": [],
                    }
                    for p in range(count)
                ],
                "topic_authorized_operations": 0,
            }
            for name, count in topics.items()
        ],
        "cluster_authorized_operations": 0,
    }


class ScriptedConn:
    def __init__(self, proto, transport, address):
        self.proto = proto
        self.transport = transport
        self.address = address
        self.unanswered = []

    def drop(self):
        self.proto.connectionLost(Failure(ConnectionLost("scripted drop")))


class ScriptedCluster:
    def __init__(self, topics=None):
        self.clock = Clock()
        self.clock.advance(1_000)
        self.topics = dict(topics or {"t": 1})
        self.conns = []
        self.connect_attempts = []
        self.refuse = 0
        self.requests = []  # (api_key, version, body)
        self.handlers = {
            codec.METADATA: lambda conn, v, body: metadata_answer(self.topics),
            codec.INIT_PRODUCER_ID: lambda conn, v, body: {
                "throttle_time_ms": 0,
                "error_code": 0,
                "producer_id": 4000,
                "producer_epoch": 0,
            },
        }

    def install(self, test):
        test.patch(cluster_module, "connect", self.connect)

    def connect(self, reactor, host, port, client_id="pluglog", timeout=30, request_timeout=30):
        self.connect_attempts.append((self.clock.seconds(), host, port))
        if self.refuse:
            self.refuse -= 1
            return defer.fail(KafkaConnectionError(f"cannot connect to {host}:{port}: refused"))
        proto = KafkaClientProtocol(
            self.clock, client_id=client_id, request_timeout=request_timeout
        )
        transport = StringTransport()
        proto.makeConnection(transport)
        proto.api_versions = dict(SUPPORTED)
        conn = ScriptedConn(proto, transport, (host, port))
        self.conns.append(conn)
        return defer.succeed(proto)

    def pump(self, rounds=5):
        """Answer everything the client wrote (repeat: answers cause requests)."""
        for _ in range(rounds):
            busy = False
            for conn in list(self.conns):
                data = conn.transport.value()
                conn.transport.clear()
                pos = 0
                while pos < len(data):
                    busy = True
                    (size,) = struct.unpack_from(">i", data, pos)
                    frame = memoryview(data)[pos + 4 : pos + 4 + size]
                    pos += 4 + size
                    header = codec.parse_request_header(frame)
                    body = codec.decode_request(header, frame)
                    self.requests.append((header.api_key, header.api_version, body))
                    if header.api_key == codec.PRODUCE and body["acks"] == 0:
                        continue
                    handler = self.handlers.get(header.api_key)
                    answer = handler(conn, header.api_version, body) if handler else None
                    if answer is None:
                        conn.unanswered.append(header)
                        continue
                    self.answer(conn, header, answer)
            if not busy:
                return

    def answer(self, conn, header, body):
        parts = codec.encode_response(
            header.api_key, header.api_version, header.correlation_id, body
        )
        payload = b"".join(bytes(p) if not isinstance(p, bytes) else p for p in parts)
        if not conn.proto.closed:
            conn.proto.dataReceived(struct.pack(">i", len(payload)) + payload)

    def of(self, api_key):
        return [body for key, _, body in self.requests if key == api_key]


def produce_answer(body, base_offsets, errors=None):
    """An answer to a Produce request: ``base_offsets``/``errors`` by (topic, partition)."""
    errors = errors or {}
    return {
        "responses": [
            {
                "name": t["name"],
                "partition_responses": [
                    {
                        "index": p["index"],
                        "error_code": errors.get((t["name"], p["index"]), 0),
                        "base_offset": base_offsets.get((t["name"], p["index"]), 0),
                        "log_append_time_ms": -1,
                        "log_start_offset": 0,
                        "record_errors": [],
                        "error_message": None,
                    }
                    for p in t["partition_data"]
                ],
            }
            for t in body["topic_data"]
        ],
        "throttle_time_ms": 0,
    }
