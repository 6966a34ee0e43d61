"""KafkaServerProtocol framing of reads that hold several frames, and their answers.

A read can hold several requests (pipelining clients; 50 producers on one
broker send ~2 frames per 64 KB read) and end inside one. The protocol frames
whole requests in place and answers every request of one read with one write
to its socket writer. These tests split the same pipeline of requests at
random points and require the same answer bytes as one request per read, and
one write per read on the socket-writer path.
"""

import random
import shutil
import socket
import struct
import tempfile

from twisted.internet import defer, reactor, threads
from twisted.internet.testing import StringTransport
from twisted.trial import unittest
from twisted.trial.unittest import SynchronousTestCase

from pluglog import protocol as codec
from pluglog.server.protocol import KafkaServerFactory
from tests.unit.test_server_protocol import connect, make_broker, produce_body, req


class RecordingWriter:
    """Stands in for the connection's SocketWriter: each call is one send."""

    closed = False

    def __init__(self):
        self.writes = []
        self.lost = False

    def write(self, parts):
        assert not self.lost, "written after lose_connection"
        data = (p if isinstance(p, bytes | memoryview) else p.read() for p in parts)
        self.writes.append(b"".join(data))

    def write_bytes(self, data):
        assert not self.lost, "written after lose_connection"
        assert isinstance(data, bytes)
        self.writes.append(data)

    def lose_connection(self):
        self.lost = True

    def close(self):
        self.closed = True


LIST_OFFSETS = {
    "replica_id": -1,
    "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
}


def pipeline():
    """Requests of every path: fast-lane Produce (v8 and flexible v9),
    general-path Produce (two partitions), ListOffsets, ApiVersions (not
    Metadata: its cluster id differs between brokers)."""
    two = produce_body("t", 0, [b"p"])
    two["topic_data"][0]["partition_data"].append(dict(two["topic_data"][0]["partition_data"][0]))
    two["topic_data"][0]["partition_data"][1]["index"] = 1
    frames = []
    for i in range(12):
        kind = i % 5
        if kind == 0:
            frames.append(req(codec.PRODUCE, 8, i, produce_body("t", i % 2, [b"v%d" % i] * 3)))
        elif kind == 1:
            frames.append(req(codec.PRODUCE, 9, i, produce_body("t", 0, [b"w" * 300])))
        elif kind == 2:
            frames.append(req(codec.PRODUCE, 8, i, two))
        elif kind == 3:
            frames.append(req(codec.LIST_OFFSETS, 5, i, LIST_OFFSETS))
        else:
            frames.append(req(codec.API_VERSIONS, 3, i, {"client_software_name": "t"}))
    return frames


class FramingTests(SynchronousTestCase):
    def setUp(self):
        self.dirs = []

    def tearDown(self):
        for path in self.dirs:
            shutil.rmtree(path, True)

    def broker(self):
        path = tempfile.mkdtemp(prefix="pluglog-framing-test-")
        self.dirs.append(path)
        return make_broker(path)

    def connect(self, writer):
        broker = self.broker()
        proto, transport = connect(broker)
        if writer:
            proto._writer = RecordingWriter()
        return broker, proto, transport

    def output(self, proto, transport):
        if proto._writer is not None:
            assert transport.value() == b""
            return b"".join(proto._writer.writes)
        return transport.value()

    def test_any_split_of_a_pipeline_gives_the_same_answers(self):
        frames = pipeline()
        stream = b"".join(frames)
        for writer in (False, True):
            _, proto, transport = self.connect(writer)
            for frame in frames:
                proto.dataReceived(frame)
            expected = self.output(proto, transport)
            (size,) = struct.unpack_from(">i", expected, 0)
            assert len(expected) > 4 + size  # every frame answered, not just one
            rng = random.Random(7)
            for trial in range(24):
                broker, proto, transport = self.connect(writer)
                cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 30)))
                if trial % 4 == 0:
                    cuts = sorted({*range(1, 12), *cuts})  # a size prefix read in pieces
                for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
                    proto.dataReceived(stream[start:end])
                assert self.output(proto, transport) == expected, (writer, cuts)
                assert not proto._buf and proto._need is None
                assert proto.guard.reserved == 0
                assert not transport.disconnecting

    def test_one_read_of_many_frames_gets_one_write(self):
        frames = pipeline()
        _, proto, _ = self.connect(True)
        proto.dataReceived(b"".join(frames))
        assert len(proto._writer.writes) == 1
        answers = proto._writer.writes[0]
        pos = ids = 0
        while pos < len(answers):
            (size, cid) = struct.unpack_from(">ii", answers, pos)
            assert cid == ids
            pos += 4 + size
            ids += 1
        assert (pos, ids) == (len(answers), len(frames))

    def test_a_read_completing_a_frame_and_holding_more_gets_one_write(self):
        frames = pipeline()
        _, proto, _ = self.connect(True)
        proto.dataReceived(frames[0][:50])
        assert proto._writer.writes == []
        proto.dataReceived(frames[0][50:] + frames[1] + frames[2][:7])
        assert len(proto._writer.writes) == 1
        proto.dataReceived(frames[2][7:])
        assert len(proto._writer.writes) == 2
        cids = [struct.unpack_from(">i", w, 4)[0] for w in proto._writer.writes]
        assert cids == [0, 2]

    def test_answers_before_a_bad_frame_leave_before_the_close(self):
        frames = pipeline()
        for bad in (
            struct.pack(">i", 1 << 30),  # over socket.request.max.bytes
            struct.pack(">ihhih", 10, 999, 0, 1, -1),  # unknown api key
        ):
            _, proto, transport = self.connect(True)
            proto.dataReceived(frames[0] + frames[3] + bad + frames[4])
            writer = proto._writer
            assert writer.lost and len(writer.writes) == 1
            cids = []
            pos = 0
            while pos < len(writer.writes[0]):
                size, cid = struct.unpack_from(">ii", writer.writes[0], pos)
                cids.append(cid)
                pos += 4 + size
            assert cids == [0, 3]

    def test_a_frame_that_raises_still_lets_earlier_answers_out(self):
        # An exception escaping a frame's handling (a bug; Twisted then
        # closes the connection) must not strand the read's earlier answers
        # in the held list, nor leave the list in place for later writes.
        frames = pipeline()
        for first_read in (b"", frames[0][:30]):
            _, proto, _ = self.connect(True)
            handle = proto._handle_frame
            seen = []

            def crash_on_second(frame, handle=handle, seen=seen):
                seen.append(frame)
                if len(seen) == 2:
                    raise RuntimeError("handler bug")
                handle(frame)

            proto._handle_frame = crash_on_second
            if first_read:
                proto.dataReceived(first_read)
            rest = b"".join(frames[:3])[len(first_read) :]
            with self.assertRaises(RuntimeError):
                proto.dataReceived(rest)
            assert proto._cork is None
            [answer] = proto._writer.writes
            assert struct.unpack_from(">i", answer, 4)[0] == 0

    def test_string_transport_path_is_unchanged(self):
        # No socket writer (TLS, tests): answers go to the transport as before.
        _, proto, transport = self.connect(False)
        assert isinstance(transport, StringTransport) and proto._writer is None
        proto.dataReceived(b"".join(pipeline()[:3]))
        assert proto._cork is None
        assert transport.value().count(struct.pack(">i", 1)) >= 1


def _exchange(port, stream, answers):
    """Blocking client: send ``stream`` in one go, read ``answers`` frames."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(stream)
        data = b""
        count = pos = 0
        while count < answers:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            data += chunk
            while len(data) - pos >= 4:
                (size,) = struct.unpack_from(">i", data, pos)
                if len(data) - pos < 4 + size:
                    break
                pos += 4 + size
                count += 1
        return data


class LoopbackTests(unittest.TestCase):
    """A real TCP connection: the socket-writer path (sendmsg)."""

    def setUp(self):
        self.dirs = []
        for _ in range(2):
            self.dirs.append(tempfile.mkdtemp(prefix="pluglog-framing-test-"))
        self.broker = make_broker(self.dirs[0])
        self.factory = KafkaServerFactory(self.broker)
        self.port = reactor.listenTCP(0, self.factory, interface="127.0.0.1")

    def tearDown(self):
        for path in self.dirs:
            shutil.rmtree(path, True)
        return self.port.stopListening()

    @defer.inlineCallbacks
    def test_pipelined_requests_over_loopback(self):
        frames = pipeline() * 20  # several reads' worth, cut anywhere by TCP
        reference, transport = connect(make_broker(self.dirs[1]))
        for frame in frames:
            reference.dataReceived(frame)
        expected = transport.value()
        protos = []
        build = self.factory.buildProtocol
        self.factory.buildProtocol = lambda addr: protos.append(build(addr)) or protos[-1]
        got = yield threads.deferToThread(
            _exchange, self.port.getHost().port, b"".join(frames), len(frames)
        )
        assert got == expected
        [proto] = protos
        assert proto._writer is not None
