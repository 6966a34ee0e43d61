"""Ordered zero-copy output for plain TCP connections: ``sendmsg`` + ``os.sendfile``.

A response is a list of parts: bytes-likes (frame size, headers, small
bodies) and file ranges (``fileno()``, ``position``, ``size``; see
:class:`pluglog.interfaces.IFileRange`). :class:`SocketWriter` sends them on
the connection's socket in order without copying record data through
Python: runs of buffers go out in one gathering ``sendmsg`` (``MSG_MORE``
when a file range follows, so the kernel packs the header with the data),
file ranges with ``os.sendfile`` straight from the segment's page cache.

Everything is tried immediately on the reactor thread, so a response that
fits the socket buffer costs one or two system calls and no reactor
iteration (Twisted's ``transport.write`` only queues and sends on the next
writability event). What does not fit is queued and finished from
:meth:`SocketWriter.doWrite` when the socket becomes writable again.

Recipe and caveats (docs: environment notes §5):

* The writer registers a ``dup`` of the socket fd with the reactor: epoll
  reactors key selectables by fd number, so registering the transport's own
  fd would steal its read events.
* Ordering: the transport's own buffer must be empty before the writer
  sends; a connection that uses a writer sends *everything* through it, so
  nothing can overtake. If the transport ever holds data (it should not),
  the writer queues and waits for it to drain.
* A queued file range keeps the range's ``fileno`` callable, not a
  descriptor, and calls it each time it sends from it, so it never reads a
  descriptor number that was closed and reused meanwhile, and queued
  answers hold no descriptors: a fetch answer over 10,000 partitions queued
  behind a slow socket held 10,000 ``dup`` descriptors, beyond the storage's
  descriptor budget (:mod:`pluglog.storage.openfiles`), whose segments
  reopen their file on ``fileno()`` when the budget had closed it. A range
  whose file is gone (its segment deleted more than
  ``file.delete.delay.ms`` ago, or closed) or that turns out shorter than
  promised (the file was truncated) would corrupt the frame, so the
  connection is closed instead, as Kafka does.
* Only plain TCP qualifies (:func:`supports_direct`); TLS transports, test
  transports such as ``StringTransport`` and anything else use the
  protocol's copy-through path (``FileRange.read()`` + ``transport.write``).
  ``PLUGLOG_SENDFILE=0`` in the environment forces copy-through (for A/B
  measurements).

Threading: reactor thread only.
"""

import os
import socket
from collections import deque

from twisted.internet import tcp
from twisted.logger import Logger

from pluglog.errors import KafkaError

log = Logger()

ENABLED = os.environ.get("PLUGLOG_SENDFILE", "1") != "0" and hasattr(os, "sendfile")
#: Cork the socket while a multi-part answer goes out (see :meth:`SocketWriter._corked`).
CORK = os.environ.get("PLUGLOG_TCP_CORK", "1") != "0" and hasattr(socket, "TCP_CORK")
#: ... when it has at least this many parts (one range and its headers need none)
CORK_PARTS = 8
_MSG_MORE = getattr(socket, "MSG_MORE", 0)
_BUFFERS = (bytes, bytearray, memoryview)
# sendmsg takes at most IOV_MAX buffers; stay well below it.
_MAX_IOV = 512
# One sendfile call at most this much: bounds the time one connection holds
# the reactor when the socket buffer keeps draining (loopback).
_SENDFILE_CHUNK = 4 * 1024 * 1024
#: queued output (buffers + file ranges) above which reading is paused
HIGH_WATER = 32 * 1024 * 1024
#: ... and below which it is resumed
LOW_WATER = 8 * 1024 * 1024


def supports_direct(transport):
    """True when ``transport`` is a plain (non-TLS) TCP connection we may bypass."""
    return (
        ENABLED
        and isinstance(transport, tcp.Connection)
        and not getattr(transport, "TLS", False)
        and transport.getHandle() is not None
    )


class _QueuedRange:
    """The unsent rest of a file range: its ``fileno`` callable, asked at send time."""

    __slots__ = ("fileno", "position", "remaining")

    def __init__(self, fileno, position, remaining):
        self.fileno = fileno
        self.position = position
        self.remaining = remaining


def _descriptor(fileno):
    """``fileno()``, with a storage error (the segment closed) as an OSError:
    the connection is dropped, as for a file cut short."""
    try:
        return fileno()
    except KafkaError as exc:
        raise OSError(f"file range unavailable: {exc}") from exc


class SocketWriter:
    """Sends response parts on a plain TCP transport's socket, in order.

    ``on_backlog(flag)`` is called with True when queued output passes
    :data:`HIGH_WATER` and with False once it is back under
    :data:`LOW_WATER`; the protocol pauses reading meanwhile.
    """

    def __init__(self, transport, on_backlog=None):
        self.transport = transport
        self.reactor = transport.reactor
        self._sock = transport.getHandle()
        self._sockfd = self._sock.fileno()
        self._fd = None
        self._registered = False
        self._queue = deque()
        self._queued = 0
        self._backlogged = False
        self._on_backlog = on_backlog
        self._lose_when_done = False
        self.closed = False

    # -- IWriteDescriptor (the dup'd fd) --------------------------------------

    def fileno(self):
        return self._fd if self._fd is not None else -1

    def logPrefix(self):
        return "SocketWriter"

    def doWrite(self):
        if self.closed:
            return None
        if not self._transport_idle():
            return None
        try:
            self._drain()
        except OSError as exc:
            self._fail(exc)
            return None
        if not self._queue:
            self._stop_waiting()
            if self._lose_when_done:
                self.transport.loseConnection()
        return None

    def connectionLost(self, reason):
        # The reactor gave up on our registration (EPOLLHUP/ERR); the
        # transport sees the same socket error and closes the connection.
        self.close()

    # -- public ---------------------------------------------------------------

    @property
    def pending(self):
        """Bytes (buffers and file ranges) queued but not yet sent."""
        return self._queued

    def write(self, parts):
        """Send ``parts`` after everything written before; never blocks."""
        if self.closed:
            return
        if self._queue or not self._transport_idle():
            self._enqueue(parts, 0)
            self._wait()
            return
        try:
            done = self._send_now(parts)
        except OSError as exc:
            self._fail(exc)
            return
        if done < len(parts):
            self._wait()

    def write_bytes(self, data):
        """:meth:`write` for one bytes object (the produce fast lane's whole
        response frame): a plain ``send``, no parts to walk."""
        if self.closed:
            return
        if self._queue or not self._transport_idle():
            self.write((data,))
            return
        try:
            sent = self._sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self._fail(exc)
            return
        if sent < len(data):
            self._enqueue_buffers((data,), sent)
            self._wait()

    def lose_connection(self):
        """Close the connection once the queued output has been sent."""
        if self.closed:
            return
        if self._queue:
            self._lose_when_done = True
        else:
            self.transport.loseConnection()

    def close(self):
        """Drop queued output and release descriptors (connection lost)."""
        if self.closed:
            return
        self.closed = True
        self._stop_waiting()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._queue.clear()
        self._queued = 0

    # -- internals ------------------------------------------------------------

    def _transport_idle(self):
        transport = self.transport
        return not (
            len(transport.dataBuffer) - transport.offset or getattr(transport, "_tempDataLen", 0)
        )

    def _corked(self, parts):
        """Cork the socket (``TCP_CORK``) for an answer of many parts; returns
        whether it did (the caller uncorks, which sends what is left).

        Each ``sendfile`` ends by pushing a segment out, so a fetch answer
        over 10,000 partitions went out as 10,000 short segments
        (``sendfile`` was about a third of the broker's time in that
        consume). Corked, the kernel sends full segments, for two
        ``setsockopt`` calls per write; measured, the rate rose and the CPU
        change was within the noise (bench/RESULTS.md)."""
        if not CORK or parts < CORK_PARTS:
            return False
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        return True

    def _uncork(self):
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)

    def _send_now(self, parts):
        """Send as much of ``parts`` as the socket takes; queue the rest.
        Returns the number of parts sent completely."""
        if self._corked(len(parts)):
            try:
                return self._send_parts(parts)
            finally:
                self._uncork()
        return self._send_parts(parts)

    def _send_parts(self, parts):
        i = 0
        n = len(parts)
        sock = self._sock
        while i < n:
            part = parts[i]
            if isinstance(part, _BUFFERS):
                j = i + 1
                while j < n and j - i < _MAX_IOV and isinstance(parts[j], _BUFFERS):
                    j += 1
                run = parts[i:j] if j - i > 1 else (part,)
                total = sum(map(len, run))
                flags = _MSG_MORE if j < n else 0
                try:
                    sent = sock.sendmsg(run, (), flags)
                except BlockingIOError:
                    sent = 0
                if sent < total:
                    self._enqueue_buffers(run, sent)
                    self._enqueue(parts, j)
                    return i
                i = j
                continue
            fileno = getattr(part, "fileno", None)
            if fileno is None:
                # A range object without a descriptor: copy it through.
                parts = list(parts)
                parts[i] = part.read()
                continue
            position, size = part.position, part.size
            sent = self._sendfile(_descriptor(fileno), position, size)
            if sent < size:
                self._push(_QueuedRange(fileno, position + sent, size - sent))
                self._enqueue(parts, i + 1)
                return i
            i += 1
        return n

    def _sendfile(self, infd, position, size):
        """sendfile until done or the socket is full; returns bytes sent."""
        done = 0
        out = self._sockfd
        while done < size:
            try:
                sent = os.sendfile(out, infd, position + done, min(size - done, _SENDFILE_CHUNK))
            except BlockingIOError:
                break
            if sent == 0:
                raise OSError(f"file range ended {size - done} bytes early (file truncated?)")
            done += sent
        return done

    def _drain(self):
        if self._corked(len(self._queue)):
            try:
                self._drain_queue()
            finally:
                self._uncork()
        else:
            self._drain_queue()
        self._check_backlog()

    def _drain_queue(self):
        queue = self._queue
        sock = self._sock
        while queue:
            head = queue[0]
            if isinstance(head, _QueuedRange):
                sent = self._sendfile(_descriptor(head.fileno), head.position, head.remaining)
                self._queued -= sent
                if sent < head.remaining:
                    head.position += sent
                    head.remaining -= sent
                    break
                queue.popleft()
                continue
            run = []
            for item in queue:
                if isinstance(item, _QueuedRange) or len(run) >= _MAX_IOV:
                    break
                run.append(item)
            total = sum(map(len, run))
            flags = _MSG_MORE if len(run) < len(queue) else 0
            try:
                sent = sock.sendmsg(run, (), flags)
            except BlockingIOError:
                break
            self._queued -= sent
            sent_total = sent
            while sent:
                head = queue[0]
                if sent >= len(head):
                    sent -= len(head)
                    queue.popleft()
                else:
                    queue[0] = head[sent:]
                    sent = 0
            if sent_total < total:
                break  # the socket buffer is full

    def _enqueue_buffers(self, run, sent):
        for buf in run:
            size = len(buf)
            if sent >= size:
                sent -= size
                continue
            view = memoryview(buf)
            self._push(view[sent:] if sent else view)
            sent = 0

    def _enqueue(self, parts, start):
        # The rest of a fetch answer over thousands of partitions: appended
        # inline, the backlog checked once at the end.
        append = self._queue.append
        queued = 0
        for i in range(start, len(parts)):
            part = parts[i]
            if isinstance(part, _BUFFERS):
                size = len(part)
                if size:
                    append(memoryview(part))
                    queued += size
                continue
            fileno = getattr(part, "fileno", None)
            if fileno is None:
                data = memoryview(part.read())
                append(data)
                queued += len(data)
            elif part.size:
                append(_QueuedRange(fileno, part.position, part.size))
                queued += part.size
        self._queued += queued
        self._check_backlog()

    def _push(self, item):
        self._queue.append(item)
        self._queued += item.remaining if isinstance(item, _QueuedRange) else len(item)
        self._check_backlog()

    def _check_backlog(self):
        if self._on_backlog is None:
            return
        if not self._backlogged and self._queued > HIGH_WATER:
            self._backlogged = True
            self._on_backlog(True)
        elif self._backlogged and self._queued < LOW_WATER:
            self._backlogged = False
            self._on_backlog(False)

    def _wait(self):
        if self._registered or self.closed:
            return
        if self._fd is None:
            self._fd = os.dup(self._sockfd)
        self.reactor.addWriter(self)
        self._registered = True

    def _stop_waiting(self):
        if self._registered:
            self.reactor.removeWriter(self)
            self._registered = False

    def _fail(self, exc):
        log.info("dropping connection after a send error: {exc}", exc=exc)
        self.close()
        self.transport.abortConnection()


__all__ = ["ENABLED", "HIGH_WATER", "LOW_WATER", "SocketWriter", "supports_direct"]
