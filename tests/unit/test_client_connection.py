"""KafkaClientProtocol with StringTransport, MemoryReactor and task.Clock."""

import random
import struct

from twisted.internet import defer
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from pluglog import protocol as codec
from pluglog.client.connection import KafkaClientProtocol, connect
from pluglog.client.errors import (
    CorrelationIdMismatchError,
    KafkaConnectionError,
    NotConnectedError,
    RequestTimedOutError,
    UnsupportedApiVersionError,
)
from pluglog.protocol.api_keys import API_VERSIONS, FETCH, METADATA

META_REQ = {"topics": None, "allow_auto_topic_creation": False}


def meta_resp(name="t"):
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [
            {
                "error_code": 0,
                "name": name,
                "is_internal": False,
                "partitions": [],
                "topic_authorized_operations": 0,
            }
        ],
        "cluster_authorized_operations": 0,
    }


def answer(key, version, correlation_id, body):
    parts = codec.encode_response(key, version, correlation_id, body)
    payload = b"".join(bytes(p) for p in parts)
    return struct.pack(">i", len(payload)) + payload


def sent_requests(transport):
    """Parse the frames written so far into request headers."""
    data = transport.value()
    transport.clear()
    out = []
    pos = 0
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        out.append(codec.parse_request_header(memoryview(data)[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    return out


class ConnectionTests(SynchronousTestCase):
    def setUp(self):
        self.clock = Clock()
        self.proto = KafkaClientProtocol(self.clock, client_id="unit", request_timeout=5)
        self.transport = StringTransport()
        self.proto.makeConnection(self.transport)

    def test_response_fed_one_byte_at_a_time(self):
        d = self.proto.request(METADATA, 8, META_REQ)
        (header,) = sent_requests(self.transport)
        self.assertEqual((header.api_key, header.api_version), (METADATA, 8))
        self.assertEqual(header.client_id, "unit")
        data = answer(METADATA, 8, header.correlation_id, meta_resp("bytewise"))
        for i in range(len(data) - 1):
            self.proto.dataReceived(data[i : i + 1])
            self.assertNoResult(d)
        self.proto.dataReceived(data[-1:])
        self.assertEqual(self.successResultOf(d)["topics"][0]["name"], "bytewise")
        self.assertEqual(self.proto.in_flight, 0)

    def test_pipelined_requests_answered_in_order(self):
        ds = [self.proto.request(METADATA, 8, META_REQ) for _ in range(3)]
        headers = sent_requests(self.transport)
        ids = [h.correlation_id for h in headers]
        self.assertEqual(len(set(ids)), 3)
        self.assertEqual(self.proto.in_flight, 3)
        # All three answers in one read, split across two reads unevenly.
        data = b"".join(answer(METADATA, 8, cid, meta_resp(f"t{cid}")) for cid in ids)
        self.proto.dataReceived(data[:7])
        self.proto.dataReceived(data[7:])
        names = [self.successResultOf(d)["topics"][0]["name"] for d in ds]
        self.assertEqual(names, [f"t{cid}" for cid in ids])

    def test_out_of_order_correlation_id_refused(self):
        d1 = self.proto.request(METADATA, 8, META_REQ)
        d2 = self.proto.request(METADATA, 8, META_REQ)
        first, second = sent_requests(self.transport)
        self.proto.dataReceived(answer(METADATA, 8, second.correlation_id, meta_resp()))
        self.failureResultOf(d1, CorrelationIdMismatchError)
        self.failureResultOf(d2, CorrelationIdMismatchError)
        self.assertTrue(self.transport.disconnecting)
        self.failureResultOf(self.proto.request(METADATA, 8, META_REQ), NotConnectedError)

    def test_unsolicited_response_closes(self):
        self.proto.dataReceived(answer(METADATA, 8, 99, meta_resp()))
        self.assertTrue(self.transport.disconnecting)

    def test_timeout_on_the_reactor_clock(self):
        d1 = self.proto.request(METADATA, 8, META_REQ, timeout=2)
        d2 = self.proto.request(METADATA, 8, META_REQ)  # default 5 s
        self.clock.advance(1.9)
        self.assertNoResult(d1)
        self.clock.advance(0.2)
        failure = self.failureResultOf(d1, RequestTimedOutError)
        self.assertIn("Metadata v8", str(failure.value))
        # The connection is not trusted after a timeout: the rest fail too.
        self.failureResultOf(d2, KafkaConnectionError)
        self.assertTrue(self.transport.disconnecting)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_answer_cancels_timer(self):
        d = self.proto.request(METADATA, 8, META_REQ)
        (header,) = sent_requests(self.transport)
        self.proto.dataReceived(answer(METADATA, 8, header.correlation_id, meta_resp()))
        self.successResultOf(d)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_no_timeout(self):
        d = self.proto.request(METADATA, 8, META_REQ, timeout=0)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertNoResult(d)

    def test_connection_lost_fails_every_pending_request(self):
        ds = [self.proto.request(METADATA, 8, META_REQ) for _ in range(2)]
        lost = []
        self.proto.lost.addCallback(lost.append)
        self.proto.connectionLost(Failure(ConnectionDone("bye")))
        for d in ds:
            failure = self.failureResultOf(d, KafkaConnectionError)
            self.assertIn("bye", str(failure.value))
        self.assertEqual(len(lost), 1)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.failureResultOf(self.proto.request(METADATA, 8, META_REQ), NotConnectedError)

    def test_close_returns_lost(self):
        d = self.proto.close()
        self.assertTrue(self.transport.disconnecting)
        self.assertNoResult(d)
        self.proto.connectionLost(Failure(ConnectionDone()))
        self.successResultOf(d)

    def test_no_response_expected(self):
        d = self.proto.request(0, 8, produce_acks0(), expect_response=False)
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual(self.proto.in_flight, 0)
        self.assertEqual(len(sent_requests(self.transport)), 1)

    def test_cancelled_request_answer_dropped(self):
        d1 = self.proto.request(METADATA, 8, META_REQ)
        d2 = self.proto.request(METADATA, 8, META_REQ)
        a, b = sent_requests(self.transport)
        d1.cancel()
        self.failureResultOf(d1, defer.CancelledError)
        self.proto.dataReceived(answer(METADATA, 8, a.correlation_id, meta_resp("a")))
        self.proto.dataReceived(answer(METADATA, 8, b.correlation_id, meta_resp("b")))
        self.assertEqual(self.successResultOf(d2)["topics"][0]["name"], "b")
        self.assertFalse(self.transport.disconnecting)

    def test_undecodable_answer_fails_only_its_request(self):
        d1 = self.proto.request(METADATA, 8, META_REQ)
        d2 = self.proto.request(METADATA, 8, META_REQ)
        a, b = sent_requests(self.transport)
        self.proto.dataReceived(struct.pack(">ii", 6, a.correlation_id) + b"\x00\x01")
        self.failureResultOf(d1, codec.DecodeError)
        self.proto.dataReceived(answer(METADATA, 8, b.correlation_id, meta_resp("b")))
        self.assertEqual(self.successResultOf(d2)["topics"][0]["name"], "b")

    def test_bad_frame_size_closes(self):
        d = self.proto.request(METADATA, 8, META_REQ)
        self.proto.dataReceived(struct.pack(">i", -5))
        self.failureResultOf(d, KafkaConnectionError)
        self.assertTrue(self.transport.disconnecting)

    def test_encode_error_fails_the_deferred(self):
        d = self.proto.request(METADATA, 8, {"topics": 5})
        self.failureResultOf(d)
        self.assertEqual(self.proto.in_flight, 0)

    def test_negotiate_and_version_for(self):
        self.assertEqual(self.proto.version_for(METADATA, 8), 8)
        d = self.proto.negotiate()
        (header,) = sent_requests(self.transport)
        self.assertEqual((header.api_key, header.api_version), (API_VERSIONS, 3))
        body = {
            "error_code": 0,
            "api_keys": [
                {"api_key": METADATA, "min_version": 0, "max_version": 5},
                {"api_key": 1, "min_version": 12, "max_version": 13},
            ],
            "throttle_time_ms": 0,
        }
        self.proto.dataReceived(answer(API_VERSIONS, 3, header.correlation_id, body))
        self.assertEqual(self.successResultOf(d)[METADATA], (0, 5))
        self.assertEqual(self.proto.version_for(METADATA, 8), 5)
        self.assertEqual(self.proto.version_for(METADATA, 3), 3)
        self.assertRaises(UnsupportedApiVersionError, self.proto.version_for, 1, 11)
        self.assertRaises(UnsupportedApiVersionError, self.proto.version_for, 19, 4)

    def test_negotiate_falls_back_on_unsupported_version(self):
        d = self.proto.negotiate()
        (header,) = sent_requests(self.transport)
        parts = codec.api_versions_fallback_response(header.correlation_id)
        payload = b"".join(bytes(p) for p in parts)
        # A broker that serves ApiVersions v0-2 only.
        payload = payload.replace(b"\x00\x12\x00\x00\x00\x04", b"\x00\x12\x00\x00\x00\x02")
        self.proto.dataReceived(struct.pack(">i", len(payload)) + payload)
        (retry,) = sent_requests(self.transport)
        self.assertEqual(retry.api_version, 2)
        body = {
            "error_code": 0,
            "api_keys": [{"api_key": API_VERSIONS, "min_version": 0, "max_version": 2}],
            "throttle_time_ms": 0,
        }
        self.proto.dataReceived(answer(API_VERSIONS, 2, retry.correlation_id, body))
        self.assertEqual(self.successResultOf(d), {API_VERSIONS: (0, 2)})


def produce_acks0():
    return {"transactional_id": None, "acks": 0, "timeout_ms": 1000, "topic_data": []}


class ConnectTests(SynchronousTestCase):
    def test_connect_with_memory_reactor(self):
        reactor = MemoryReactorClock()
        d = connect(reactor, "127.0.0.1", 9092, client_id="mem", negotiate=False)
        host, port, factory, timeout, _ = reactor.tcpClients[0]
        self.assertEqual((host, port), ("127.0.0.1", 9092))
        transport = StringTransport()
        proto = factory.buildProtocol(None)
        proto.makeConnection(transport)
        conn = self.successResultOf(d)
        self.assertIsInstance(conn, KafkaClientProtocol)
        self.assertEqual(conn.client_id, "mem")
        self.assertTrue(conn.connected)

    def test_connect_failure_names_the_address(self):
        reactor = MemoryReactorClock()
        d = connect(reactor, "127.0.0.1", 9, negotiate=False, timeout=3)
        _, _, factory, _, _ = reactor.tcpClients[0]
        factory.clientConnectionFailed(None, Failure(ConnectionRefusedError()))
        reactor.advance(3)
        failure = self.failureResultOf(d, KafkaConnectionError)
        self.assertIn("127.0.0.1:9", str(failure.value))


def test_connections_send_up_to_4_mib_per_reactor_turn():
    from twisted.internet import tcp

    class TcpLikeTransport(StringTransport):
        SEND_LIMIT = tcp.Connection.SEND_LIMIT  # Twisted's 128 KiB

        def setTcpNoDelay(self, enabled):
            self.no_delay = enabled

    transport = TcpLikeTransport()
    KafkaClientProtocol(Clock()).makeConnection(transport)
    assert transport.SEND_LIMIT == 4 << 20
    assert transport.no_delay
    assert tcp.Connection.SEND_LIMIT == 128 * 1024  # the class is left alone


def _big_meta(prefix, topics):
    body = meta_resp()
    body["topics"] = [
        dict(body["topics"][0], name=f"{prefix}-{i:05d}-" + "x" * 60) for i in range(topics)
    ]
    return body


def test_big_frames_among_small_ones_in_any_split():
    """Frames of >= BIG_FRAME go through their own buffer: pipelined answers
    small, big, big, small, cut at random points (some reads holding the end
    of one frame and the start of the next), decode as when read whole, and
    the transport reads 1 MiB at a time only while a big frame comes in."""
    from twisted.internet import tcp

    from pluglog.client import connection

    for seed in range(12):
        rng = random.Random(seed)
        transport = StringTransport()
        transport.bufferSize = tcp.Connection.bufferSize  # 64 KiB, as Twisted's TCP
        proto = KafkaClientProtocol(Clock(), request_timeout=0)
        proto.makeConnection(transport)
        ds = [proto.request(METADATA, 8, META_REQ) for _ in range(4)]
        ids = [h.correlation_id for h in sent_requests(transport)]
        bodies = [meta_resp("a"), _big_meta("b", 4000), _big_meta("c", 3600), meta_resp("d")]
        frames = [answer(METADATA, 8, cid, body) for cid, body in zip(ids, bodies)]
        assert [len(f) >= connection.BIG_FRAME for f in frames] == [False, True, True, False]
        data = b"".join(frames)
        cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, 60)))
        sizes = []
        for start, end in zip([0, *cuts], [*cuts, len(data)]):
            proto.dataReceived(data[start:end])
            sizes.append(transport.bufferSize)
        got = [successResultOf(d) for d in ds]
        assert [[t["name"] for t in g["topics"]] for g in got] == [
            [t["name"] for t in b["topics"]] for b in bodies
        ]
        assert transport.bufferSize == tcp.Connection.bufferSize
        # A big frame goes to its own buffer when a read ends inside it
        # with its size known; only then is the read size raised.
        starts = [sum(len(f) for f in frames[:k]) for k in range(4)]
        inside = any(
            starts[k] + 4 <= cut < starts[k] + len(frames[k]) for k in (1, 2) for cut in cuts
        )
        assert (connection.BIG_READ in sizes) == inside, seed
        assert proto.in_flight == 0 and not proto.closed


def test_a_connection_lost_inside_a_big_frame_fails_its_request():
    proto = KafkaClientProtocol(Clock(), request_timeout=0)
    transport = StringTransport()
    proto.makeConnection(transport)
    d = proto.request(METADATA, 8, META_REQ)
    (header,) = sent_requests(transport)
    frame = answer(METADATA, 8, header.correlation_id, _big_meta("b", 4000))
    proto.dataReceived(frame[: len(frame) // 2])
    assert proto._big is not None
    proto.connectionLost(Failure(ConnectionDone()))
    assert isinstance(failureResultOf(d).value, KafkaConnectionError)
    assert proto._big is None


def successResultOf(d):
    out = []
    d.addBoth(out.append)
    assert out and not isinstance(out[0], Failure), out
    return out[0]


def failureResultOf(d):
    out = []
    d.addBoth(out.append)
    assert out and isinstance(out[0], Failure), out
    return out[0]


def _fetch_answer(correlation_id, fill, size=400_000):
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": 1,
                        "last_stable_offset": 1,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": bytes([fill]) * size,
                    }
                ],
            }
        ],
    }
    return answer(FETCH, 11, correlation_id, body)


FETCH_REQ = {
    "replica_id": -1,
    "max_wait_ms": 0,
    "min_bytes": 1,
    "max_bytes": 1 << 20,
    "isolation_level": 0,
    "session_id": 0,
    "session_epoch": -1,
    "topics": [],
    "forgotten_topics_data": [],
    "rack_id": "",
}


def _records(response):
    return response["responses"][0]["partitions"][0]["records"]


def test_a_big_frame_buffer_is_reused_only_when_nothing_refers_to_it():
    proto = KafkaClientProtocol(Clock(), request_timeout=0)
    transport = StringTransport()
    proto.makeConnection(transport)
    kept, seen = [], []

    def receive(fill, keep=False):
        d = proto.request(FETCH, 11, FETCH_REQ)
        (header,) = sent_requests(transport)

        def consume(response):  # as the replica fetcher: read, then drop
            records = _records(response)
            seen.append(bytes(records))
            if keep:
                kept.append(records)

        d.addCallback(consume)
        frame = _fetch_answer(header.correlation_id, fill)
        for start in range(0, len(frame), 65536):  # never the whole frame at once
            proto.dataReceived(frame[start : start + 65536])
        assert seen[-1] == bytes([fill]) * 400_000

    receive(1, keep=True)  # its records kept: its buffer stays theirs
    assert proto._spare is None
    receive(2)  # a new buffer, free again once read
    # (ids, not references: a reference held here would keep it from reuse)
    spare = id(proto._spare)
    assert proto._spare is not None and spare != id(kept[0].obj)
    receive(3)
    assert id(proto._spare) == spare  # the same buffer served the third frame
    receive(4, keep=True)
    assert proto._spare is None and id(kept[1].obj) == spare
    receive(5)
    assert bytes(kept[0]) == b"\x01" * 400_000  # never overwritten
    assert bytes(kept[1]) == b"\x04" * 400_000
