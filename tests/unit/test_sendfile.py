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
        data = sock.recv(65536)
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
        # The fd may be closed right away: queued ranges hold their own dup.
        os.close(self.fd)
        self.fd = None
        proto.writer.lose_connection()
        yield self.factory.lost
        thread.join(10)
        self.assertFalse(thread.is_alive())
        return out[0]

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
