"""SocketWriter over real loopback sockets and the real reactor.

A Twisted server protocol writes mixed parts (bytes and file ranges) through
a :class:`~pluglog.server.sendfile.SocketWriter`; a blocking client thread
on 127.0.0.1 reads everything and the bytes must equal the concatenation, in
order, including when the client reads slowly so that output queues.
"""

import os
import socket
import tempfile
import threading

from twisted.internet import defer, protocol, reactor
from twisted.internet.testing import StringTransport
from twisted.trial import unittest

from pluglog.errors import KafkaStorageError
from pluglog.server import sendfile
from pluglog.server.sendfile import SocketWriter, supports_direct
from pluglog.storage.results import FileRange


class _Sender(protocol.Protocol):
    def connectionMade(self):
        self.factory.connected.callback(self)

    def connectionLost(self, reason):
        if self.writer is not None:
            self.writer.close()
        self.factory.lost.callback(None)


class _Factory(protocol.Factory):
    protocol = _Sender

    def __init__(self):
        self.connected = defer.Deferred()
        self.lost = defer.Deferred()


def _reader(port, out, delay):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    chunks = []
    if delay:
        threading.Event().wait(delay)
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            break  # an aborted connection: what came before it is kept
        if not data:
            break
        chunks.append(data)
    sock.close()
    out.append(b"".join(chunks))


class SocketWriterTests(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.NamedTemporaryFile(delete=False)
        self.content = os.urandom(6 * 1024 * 1024)
        self.tmp.write(self.content)
        self.tmp.close()
        self.fd = os.open(self.tmp.name, os.O_RDONLY)
        self.factory = _Factory()
        self.port = reactor.listenTCP(0, self.factory, interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.addCleanup(os.unlink, self.tmp.name)

    def _range(self, position, size):
        return FileRange(lambda: self.fd, position, size)

    @defer.inlineCallbacks
    def _roundtrip(self, batches, delay=0.0):
        out = []
        thread = threading.Thread(
            target=_reader, args=(self.port.getHost().port, out, delay), daemon=True
        )
        thread.start()
        proto = yield self.factory.connected
        self.assertTrue(supports_direct(proto.transport))
        proto.writer = SocketWriter(proto.transport)
        for parts in batches:
            proto.writer.write(parts)
        # Queued ranges hold no descriptor: they ask fileno() when they send.
        self.assertEqual(self._file_descriptors(), 1)
        proto.writer.lose_connection()
        yield self.factory.lost
        os.close(self.fd)
        self.fd = None
        thread.join(10)
        self.assertFalse(thread.is_alive())
        return out[0]

    def _file_descriptors(self):
        """This process's descriptors on the test's file."""
        count = 0
        for name in os.listdir("/proc/self/fd"):
            try:
                count += os.readlink(f"/proc/self/fd/{name}") == self.tmp.name
            except OSError:
                pass
        return count

    def _expected(self, batches):
        data = []
        for parts in batches:
            for part in parts:
                if isinstance(part, bytes):
                    data.append(part)
                else:
                    data.append(self.content[part.position : part.position + part.size])
        return b"".join(data)

    @defer.inlineCallbacks
    def test_order_with_fast_reader(self):
        batches = [
            [b"head-%d" % i, self._range(i * 1000, 5000 + i), b"tail-%d" % i] for i in range(50)
        ]
        expected = self._expected(batches)
        got = yield self._roundtrip(batches)
        self.assertEqual(len(got), len(expected))
        self.assertEqual(got, expected)

    @defer.inlineCallbacks
    def test_order_when_output_queues(self):
        # Larger than any socket buffer, and the client waits before reading:
        # the writer must queue bytes and ranges and finish them in order.
        batches = [
            [b"a" * 100, self._range(0, 3 * 1024 * 1024), b"b" * 70000],
            [b"c" * 10],
            [self._range(1024 * 1024, 2 * 1024 * 1024), b"d"],
        ]
        expected = self._expected(batches)
        got = yield self._roundtrip(batches, delay=0.3)
        self.assertEqual(len(got), len(expected))
        self.assertEqual(got, expected)

    def test_string_transport_not_direct(self):
        self.assertFalse(supports_direct(StringTransport()))
        os.close(self.fd)

    def test_disabled_by_environment_flag(self):
        self.patch(sendfile, "ENABLED", False)
        self.assertFalse(supports_direct(object()))
        os.close(self.fd)

    @defer.inlineCallbacks
    def test_a_queued_range_whose_file_is_gone_drops_the_connection(self):
        # A segment closed while its range waits behind a slow reader: its
        # fileno() raises a storage error, and the connection is dropped
        # rather than the frame sent short (or the error escaping).
        gone = []

        def fileno():
            if gone:
                raise KafkaStorageError("orders-0/00000000000000000000.log is closed")
            return self.fd

        out = []
        thread = threading.Thread(
            target=_reader, args=(self.port.getHost().port, out, 0.3), daemon=True
        )
        thread.start()
        proto = yield self.factory.connected
        proto.writer = SocketWriter(proto.transport)
        size = len(self.content)
        proto.writer.write([FileRange(fileno, 0, size) for _ in range(4)])
        self.assertGreater(proto.writer.pending, size)
        gone.append(True)
        yield self.factory.lost
        thread.join(10)
        self.assertFalse(thread.is_alive())
        self.assertLess(len(out[0]), 4 * size)
        self.assertEqual(out[0], (self.content * 4)[: len(out[0])])
        os.close(self.fd)

    @defer.inlineCallbacks
    def test_many_small_ranges_queued_go_out_in_order(self):
        # A fetch answer over thousands of partitions: a header before each
        # small range, more than the socket holds, a slow reader: in order,
        # whether sent at once or queued.
        small = 64 * 1024
        parts = []
        for i in range(3000):
            parts.append(b"h%d" % i)
            size = (small, 1, 2300, small + 1)[i % 4] if i % 50 else 200_000
            parts.append(self._range((i * 997) % (len(self.content) - 200_000), size))
        parts.append(b"end")
        batches = [parts, [b"x" * 10, self._range(5, 7)]]
        expected = self._expected(batches)
        got = yield self._roundtrip(batches, delay=0.3)
        self.assertEqual(len(got), len(expected))
        self.assertEqual(got, expected)

    @defer.inlineCallbacks
    def test_a_small_range_cut_short_drops_the_connection(self):
        # The file is shorter than a range promises (truncated): the frame
        # would be corrupt, so the connection is closed instead.
        out = []
        thread = threading.Thread(
            target=_reader, args=(self.port.getHost().port, out, 0.0), daemon=True
        )
        thread.start()
        proto = yield self.factory.connected
        proto.writer = SocketWriter(proto.transport)
        size = len(self.content)
        proto.writer.write([b"head", self._range(size - 10, 100), b"tail"])
        yield self.factory.lost
        thread.join(10)
        self.assertFalse(thread.is_alive())
        self.assertNotIn(b"tail", out[0])
        os.close(self.fd)

    @defer.inlineCallbacks
    def test_backlog_is_reported_past_high_water_and_cleared_below_low(self):
        # More than HIGH_WATER queued behind a slow reader: reading pauses
        # (on_backlog(True)) once, and resumes once the queue drained.
        flags = []
        out = []
        thread = threading.Thread(
            target=_reader, args=(self.port.getHost().port, out, 0.3), daemon=True
        )
        thread.start()
        proto = yield self.factory.connected
        proto.writer = SocketWriter(proto.transport, on_backlog=flags.append)
        size = len(self.content)
        parts = []
        for i in range(sendfile.HIGH_WATER // size + 2):
            parts += [b"head-%d" % i, self._range(0, size)]
        proto.writer.write(parts)
        self.assertEqual(flags, [True])
        proto.writer.lose_connection()
        yield self.factory.lost
        thread.join(10)
        self.assertEqual(flags, [True, False])
        expected = b"".join(b"head-%d" % i + self.content for i in range(len(parts) // 2))
        self.assertEqual(out[0], expected)
        os.close(self.fd)
