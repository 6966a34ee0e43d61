"""pluglog.server.dispatch: the epoll reactor's events without the log context."""

import gc
import socket

from twisted.internet import epollreactor, selectreactor
from twisted.internet.interfaces import IReadDescriptor
from twisted.internet.testing import MemoryReactor
from zope.interface import implementer

from pluglog.server import dispatch


@implementer(IReadDescriptor)
class Reader:
    def __init__(self, sock, fail=False):
        self.sock = sock
        self.fail = fail
        self.got = []
        self.lost = []

    def fileno(self):
        return self.sock.fileno()

    def logPrefix(self):
        return "Reader"

    def doRead(self):
        if self.fail:
            raise RuntimeError("handler bug")
        self.got.append(self.sock.recv(100))

    def connectionLost(self, reason):
        self.lost.append(reason)


def _reactor_with_reader(fail=False):
    reactor = epollreactor.EPollReactor()
    left, right = socket.socketpair()
    reader = Reader(left, fail)
    reactor.addReader(reader)
    return reactor, reader, right


def test_lean_dispatch_delivers_reads():
    reactor, reader, peer = _reactor_with_reader()
    try:
        assert dispatch.install(reactor)
        assert reactor.doIteration is reactor.doPoll
        peer.send(b"hello")
        for _ in range(20):
            reactor.doIteration(0.05)
            if reader.got:
                break
        assert reader.got == [b"hello"]
        # Nothing ready: returns after the timeout without dispatching.
        reactor.doIteration(0)
        assert reader.got == [b"hello"]
    finally:
        reactor.removeAll()
        reader.sock.close()
        peer.close()
        reactor._poller.close()


def test_a_failing_handler_loses_its_connection_not_the_loop():
    reactor, reader, peer = _reactor_with_reader(fail=True)
    try:
        assert dispatch.install(reactor)
        peer.send(b"x")
        reactor.doIteration(0.5)  # must not raise
        assert len(reader.lost) == 1
        assert reader.lost[0].check(RuntimeError)
    finally:
        reactor.removeAll()
        reader.sock.close()
        peer.close()
        reactor._poller.close()
        gc.collect()


def test_other_reactors_are_left_alone():
    memory = MemoryReactor()
    assert not dispatch.install(memory)
    select = selectreactor.SelectReactor()
    before = select.doIteration
    assert not dispatch.install(select)
    assert select.doIteration == before
