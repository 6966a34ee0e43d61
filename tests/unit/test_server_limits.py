"""Connection limits with StringTransport and a Clock: caps, timeouts, request memory."""

import shutil
import struct
import tempfile

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from pluglog import protocol as codec
from pluglog.config import parse_settings
from pluglog.server.protocol import KafkaServerFactory
from tests.unit.test_server_protocol import make_broker, req, responses

API_VERSIONS = req(codec.API_VERSIONS, 0, 1, {})


class LimitTests(SynchronousTestCase):
    def setUp(self):
        data_dir = tempfile.mkdtemp(prefix="pluglog-limits-test-")
        self.addCleanup(shutil.rmtree, data_dir, True)
        self.broker = make_broker(data_dir)

    def factory(self, **settings):
        self.broker.config = parse_settings(settings, self.broker.config)
        factory = KafkaServerFactory(self.broker)
        self.addCleanup(factory.guard.stop)
        return factory

    def connect(self, factory, host="10.0.0.1"):
        proto = factory.buildProtocol(None)
        transport = StringTransport(peerAddress=IPv4Address("TCP", host, 40000))
        proto.makeConnection(transport)
        return proto, transport

    def test_max_connections_closes_the_one_over(self):
        factory = self.factory(**{"max.connections": "2"})
        first, t1 = self.connect(factory, "10.0.0.1")
        _, t2 = self.connect(factory, "10.0.0.2")
        _, t3 = self.connect(factory, "10.0.0.3")
        assert not t1.disconnecting and not t2.disconnecting
        assert t3.disconnecting
        # A closed connection frees its place.
        first.connectionLost(None)
        _, t4 = self.connect(factory, "10.0.0.4")
        assert not t4.disconnecting
        assert factory.guard.refused["max.connections"] == 1

    def test_max_connections_per_ip_with_overrides(self):
        factory = self.factory(
            **{
                "max.connections.per.ip": "1",
                "max.connections.per.ip.overrides": "10.0.0.9:3",
            }
        )
        _, t1 = self.connect(factory, "10.0.0.1")
        _, t2 = self.connect(factory, "10.0.0.1")
        assert not t1.disconnecting and t2.disconnecting
        others = [self.connect(factory, "10.0.0.9")[1] for _ in range(4)]
        assert [t.disconnecting for t in others] == [False, False, False, True]
        assert factory.guard.per_ip == {"10.0.0.1": 1, "10.0.0.9": 3}

    def test_idle_connection_is_closed_busy_one_is_not(self):
        factory = self.factory(**{"connections.max.idle.ms": "1000"})
        clock = self.broker.reactor
        idle, t_idle = self.connect(factory)
        busy, t_busy = self.connect(factory)
        for _ in range(8):
            busy.dataReceived(API_VERSIONS)
            clock.advance(0.25)
        assert t_idle.disconnecting
        assert "connections.max.idle.ms" in idle.expired
        assert not t_busy.disconnecting
        assert len(responses(t_busy, [(codec.API_VERSIONS, 0)] * 8)) == 8

    def test_incomplete_request_times_out_even_if_bytes_trickle(self):
        factory = self.factory(**{"request.read.timeout.ms": "2000"})
        clock = self.broker.reactor
        slow, transport = self.connect(factory)
        frame = struct.pack(">i", 1000) + b"\0" * 40  # 4.4 s of trickle
        for i in range(len(frame)):
            slow.dataReceived(frame[i : i + 1])  # one byte every 100 ms: "active"
            clock.advance(0.1)
        assert transport.disconnecting
        assert "request.read.timeout.ms" in slow.expired

    def test_complete_requests_reset_the_read_timeout(self):
        factory = self.factory(**{"request.read.timeout.ms": "1000"})
        clock = self.broker.reactor
        proto, transport = self.connect(factory)
        for _ in range(10):
            # Each request arrives in two halves 0.3 s apart: never 1 s incomplete.
            proto.dataReceived(API_VERSIONS[:6])
            clock.advance(0.3)
            proto.dataReceived(API_VERSIONS[6:])
            clock.advance(0.3)
        assert not transport.disconnecting
        assert len(responses(transport, [(codec.API_VERSIONS, 0)] * 10)) == 10

    def test_queued_max_request_bytes_pauses_readers_until_memory_is_free(self):
        factory = self.factory(**{"queued.max.request.bytes": "1000"})
        guard = factory.guard
        big, t_big = self.connect(factory, "10.0.0.1")
        other, t_other = self.connect(factory, "10.0.0.2")
        late, t_late = self.connect(factory, "10.0.0.3")
        # 1000-byte frames (ApiVersions v0 with padding) whose tails have not arrived.
        frame = struct.pack(">i", 1000) + API_VERSIONS[4:] + b"\0" * (1004 - len(API_VERSIONS))
        big.dataReceived(frame[:100])
        assert guard.reserved == 1000 and t_big.producerState == "producing"
        # The pool is used up: the next frame's reader is paused, nothing reserved.
        other.dataReceived(frame[:50])
        late.dataReceived(frame[:10])
        assert t_other.producerState == "paused" and t_late.producerState == "paused"
        assert guard.reserved == 1000 and list(guard.waiting) == [other, late]
        # The first frame completes: its memory goes to the first waiter.
        big.dataReceived(frame[100:])
        assert t_other.producerState == "producing" and t_late.producerState == "paused"
        assert guard.reserved == 1000
        # A waiter that goes away leaves the queue; a finished frame frees its bytes.
        late.connectionLost(None)
        assert not guard.waiting
        other.dataReceived(frame[50:])
        assert guard.reserved == 0
        # One frame larger than the whole pool is still read (Kafka grants while any is left).
        huge = struct.pack(">i", 5000) + API_VERSIONS[4:] + b"\0" * (5004 - len(API_VERSIONS))
        fresh, t_fresh = self.connect(factory, "10.0.0.4")
        fresh.dataReceived(huge[:10])
        assert guard.reserved == 5000 and t_fresh.producerState == "producing"

    def test_reader_paused_for_memory_is_not_timed_out(self):
        factory = self.factory(
            **{"queued.max.request.bytes": "1000", "request.read.timeout.ms": "1000"}
        )
        clock = self.broker.reactor
        frame = struct.pack(">i", 1000) + API_VERSIONS[4:] + b"\0" * (1004 - len(API_VERSIONS))
        holder, t_holder = self.connect(factory, "10.0.0.1")
        waiter, t_waiter = self.connect(factory, "10.0.0.2")
        holder.dataReceived(frame[:100])
        waiter.dataReceived(frame[:10])
        assert t_waiter.producerState == "paused"
        for _ in range(10):
            clock.advance(0.25)
        # The holder is slow and is cut off; the waiter, paused by the broker, is not.
        assert t_holder.disconnecting and not t_waiter.disconnecting
