"""One Kafka connection on the reactor: framing, correlation ids, pipelining.

:class:`KafkaClientProtocol` owns a single TCP connection to a broker. Requests
are encoded with pluglog's sans-IO codec (:func:`pluglog.protocol.encode_request`)
and written at once, so any number may be in flight; Kafka answers each
connection strictly in request order, so the pending queue is a FIFO and a
response whose correlation id is not the oldest pending one is a protocol
violation that closes the connection.

Framing keeps one ``bytearray`` and the expected length (design.md §8), not
Int32StringReceiver, which copies its whole buffer on every read; a read that
holds exactly one frame is decoded without touching the buffer. A large
frame (a follower's 10 MiB Fetch answer) is read into a buffer of its own,
each read copied once to its place and the buffer decoded as it is, and the
transport reads up to 1 MiB at a time meanwhile: growing the shared buffer
and copying the frame out of it cost a follower of 10,000 partitions 15 %
of its CPU, and 64 KiB reads took 160 reactor turns per answer. That buffer
is kept for the next big frame once nothing refers to it any more.

Time comes from the reactor (``IReactorTime``), so tests drive timeouts with
``task.Clock``. A request that times out errbacks with :class:`RequestTimedOutError`
and, like Kafka's NetworkClient, the connection is then closed (a broker that
is that late is not trusted with the requests behind it); every pending
Deferred errbacks with :class:`KafkaConnectionError` when the connection
drops, and :attr:`KafkaClientProtocol.lost` fires so an owner can reconnect.
"""

import itertools
import struct
import sys
from collections import deque

from twisted.internet import defer, protocol
from twisted.internet.endpoints import HostnameEndpoint, connectProtocol
from twisted.logger import Logger

from pluglog import protocol as codec
from pluglog.client.errors import (
    CorrelationIdMismatchError,
    KafkaConnectionError,
    NotConnectedError,
    RequestTimedOutError,
    UnsupportedApiVersionError,
)
from pluglog.protocol.api_keys import API_VERSIONS
from pluglog.protocol.apis import APIS

log = Logger()
_SIZE = struct.Struct(">i")

#: Largest response frame accepted (Kafka's clients have no limit of their
#: own; this only guards against a garbage size prefix).
MAX_RESPONSE_BYTES = 1 << 30

#: ApiVersions versions tried, newest first: v3 is what Kafka >= 2.4 and
#: librdkafka's mock cluster answer; v0 is understood by every broker.
API_VERSIONS_VERSION = 3


# Bytes per send() call on the client's connections (Twisted's default is 128 KiB).
SEND_LIMIT = 4 << 20
#: A response frame at least this long is read into a buffer of its own.
BIG_FRAME = 256 << 10
#: Bytes per read while a big frame comes in (Twisted's own is 64 KiB).
BIG_READ = 1 << 20
#: The largest big-frame buffer kept for the next big frame (a follower's
#: answers are up to 10 x replica.fetch.max.bytes, 10 MiB by default).
SPARE_MAX = 16 << 20


class _Pending:
    __slots__ = ("correlation_id", "api_key", "api_version", "deferred", "timer", "abandoned")

    def __init__(self, correlation_id, api_key, api_version, deferred):
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.deferred = deferred
        self.timer = None
        # Cancelled by its caller: the answer is still read (to keep the stream
        # in step) and then dropped.
        self.abandoned = False


class KafkaClientProtocol(protocol.Protocol):
    """A client connection to one Kafka broker.

    ``reactor`` supplies ``callLater`` for request timeouts. After
    :func:`connect` with ``negotiate=True``, :attr:`api_versions` maps api key
    to the broker's ``(min, max)`` and :meth:`version_for` picks versions.
    """

    def __init__(
        self, reactor, client_id="pluglog", request_timeout=30.0, max_frame=MAX_RESPONSE_BYTES
    ):
        self.reactor = reactor
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.max_frame = max_frame
        self.api_versions = None
        self.connected = False
        self.closed = False
        #: Fires with the Failure's value (the reason) once the connection is gone.
        self.lost = defer.Deferred()
        self.peer = None
        self._buf = bytearray()
        self._need = None
        #: a big frame being read: its buffer, and how much of it is filled
        self._big = None
        self._backing = None
        self._spare = None
        self._got = 0
        self._read_size = None
        self._pending = deque()
        self._ids = itertools.count(1)

    # -- Twisted --------------------------------------------------------

    def connectionMade(self):
        self.connected = True
        set_no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if set_no_delay is not None:
            # Requests are written whole; Nagle would delay pipelined ones.
            set_no_delay(True)
        if getattr(self.transport, "SEND_LIMIT", SEND_LIMIT) < SEND_LIMIT:
            # Twisted hands the socket at most SEND_LIMIT bytes (128 KiB) per
            # reactor turn; a 1 MB Produce request would take eight turns, and
            # an application producing from its callbacks gets a turn back
            # only between its own runs. Let the kernel take what it can.
            self.transport.SEND_LIMIT = SEND_LIMIT
        peer = self.transport.getPeer()
        self.peer = f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"

    def dataReceived(self, data):
        if self.closed:
            return
        if self._big is not None:
            data = self._fill(data)
            if not data or self.closed:
                return
        buf = self._buf
        if not buf and len(data) >= 4:
            (size,) = _SIZE.unpack_from(data, 0)
            if len(data) == 4 + size and 4 <= size <= self.max_frame:
                self._frame(memoryview(data)[4:])
                return
        buf += data
        while not self.closed:
            if self._need is None:
                if len(buf) < 4:
                    return
                (size,) = _SIZE.unpack_from(buf, 0)
                if size < 4 or size > self.max_frame:
                    self._abort(KafkaConnectionError(f"bad response frame size {size}"))
                    return
                self._need = size
            end = 4 + self._need
            if len(buf) < end:
                if self._need >= BIG_FRAME:
                    self._start_big(buf)
                return
            with memoryview(buf) as view:
                frame = memoryview(view[4:end].tobytes())
            del buf[:end]
            self._need = None
            self._frame(frame)

    def _start_big(self, buf):
        """Read the rest of a big frame (its size known, part of it in
        ``buf``) straight into a buffer of its size: the spare one when it
        is free and large enough, so a follower's answers reuse one buffer
        (a new 10 MiB ``bytearray`` is zeroed first: 10 % of a follower's
        CPU at 10,000 partitions)."""
        need = self._need
        backing, self._spare = self._spare, None
        if backing is None or len(backing) < need:
            backing = bytearray(need)
        big = self._big = memoryview(backing)[:need]
        self._backing = backing
        got = self._got = len(buf) - 4
        big[:got] = memoryview(buf)[4:]
        buf.clear()
        self._need = None
        size = getattr(self.transport, "bufferSize", None)
        if isinstance(size, int) and size < BIG_READ:
            self._read_size = size
            self.transport.bufferSize = BIG_READ

    def _fill(self, data):
        """Copy ``data`` into the big frame; decode it once complete. Returns
        what ``data`` holds past the frame."""
        big, got = self._big, self._got
        take = min(len(data), len(big) - got)
        with memoryview(data) as view:
            big[got : got + take] = view[:take] if take < len(data) else view
            rest = view[take:].tobytes() if take < len(data) else b""
        self._got = got + take
        if self._got == len(big):
            backing = self._backing
            self._big = self._backing = None
            if self._read_size is not None:
                self.transport.bufferSize, self._read_size = self._read_size, None
            frame = big.toreadonly()
            big.release()
            self._frame(frame)
            del frame
            # Reused only when no view of it is left: a decoded answer whose
            # records someone kept (they are slices of this buffer) holds a
            # reference through its view, and the next frame then gets a
            # new buffer instead of overwriting them.
            if len(backing) <= SPARE_MAX and sys.getrefcount(backing) == 2:
                self._spare = backing
        return rest

    def connectionLost(self, reason=protocol.connectionDone):
        self.connected = False
        self.closed = True
        self._buf = bytearray()
        self._big = self._backing = self._spare = None
        exc = reason.value if reason is not None else None
        message = f"connection to {self.peer or 'broker'} lost"
        if exc is not None and str(exc):
            message = f"{message}: {exc}"
        self._fail_all(KafkaConnectionError(message))
        if not self.lost.called:
            self.lost.callback(exc)

    # -- requests -------------------------------------------------------

    def request(self, api_key, api_version, body, timeout=None, expect_response=True):
        """Send one request; a Deferred fires with the decoded response dict.

        ``expect_response=False`` (acks=0 produce) fires with None once the
        bytes are handed to the transport. ``timeout`` (seconds) defaults to
        :attr:`request_timeout`; None or 0 there means no timeout.
        Cancelling the Deferred drops the answer when it comes.
        """
        if self.closed or not self.connected:
            return defer.fail(NotConnectedError(f"not connected to {self.peer or 'broker'}"))
        correlation_id = next(self._ids) & 0x7FFFFFFF
        try:
            frame = codec.encode_request(
                api_key, api_version, correlation_id, self.client_id, body
            )
        except Exception:
            return defer.fail()
        if not expect_response:
            self.transport.write(frame)
            return defer.succeed(None)
        pending = _Pending(correlation_id, api_key, api_version, None)
        pending.deferred = defer.Deferred(lambda d: self._cancel(pending))
        timeout = self.request_timeout if timeout is None else timeout
        if timeout:
            pending.timer = self.reactor.callLater(timeout, self._timed_out, pending, timeout)
        self._pending.append(pending)
        self.transport.write(frame)
        return pending.deferred

    def version_for(self, api_key, wanted_max, wanted_min=None):
        """The highest version of ``api_key`` both sides speak.

        ``wanted_max`` is the newest the caller can build; ``wanted_min``
        (default: the oldest pluglog's codec defines) the oldest. Before or
        without ApiVersions negotiation this is ``wanted_max``.
        """
        if wanted_min is None:
            api = APIS.get(api_key)
            wanted_min = api.versions[0] if api is not None else 0
        if self.api_versions is None:
            return wanted_max
        broker = self.api_versions.get(api_key)
        if broker is None:
            raise UnsupportedApiVersionError(f"broker {self.peer} does not serve api {api_key}")
        version = min(wanted_max, broker[1])
        if version < max(wanted_min, broker[0]):
            raise UnsupportedApiVersionError(
                f"broker {self.peer} serves api {api_key} v{broker[0]}-{broker[1]}, "
                f"client speaks v{wanted_min}-{wanted_max}"
            )
        return version

    @defer.inlineCallbacks
    def negotiate(self, timeout=None):
        """Ask the broker which versions it serves (ApiVersions); store them."""
        version = API_VERSIONS_VERSION
        body = {"client_software_name": "pluglog", "client_software_version": "0.1.0"}
        try:
            response = yield self.request(API_VERSIONS, version, body, timeout=timeout)
        except codec.DecodeError:
            # Some brokers (librdkafka's mock cluster) answer a version they do
            # not serve with a body that is neither v0 nor v3: ask again with
            # v0, which every broker answers, as librdkafka does.
            version = 0
            response = yield self.request(API_VERSIONS, version, body, timeout=timeout)
        if response["error_code"] == codec.UNSUPPORTED_VERSION:
            # The v0-format fallback lists the ApiVersions range it serves.
            ranges = {k["api_key"]: k["max_version"] for k in response["api_keys"]}
            version = min(version, ranges.get(API_VERSIONS, 0))
            response = yield self.request(API_VERSIONS, version, body, timeout=timeout)
        if response["error_code"]:
            raise KafkaConnectionError(
                f"ApiVersions v{version} refused with error {response['error_code']}"
            )
        self.api_versions = {
            k["api_key"]: (k["min_version"], k["max_version"]) for k in response["api_keys"]
        }
        return self.api_versions

    def close(self):
        """Close the connection; pending requests errback; returns :attr:`lost`."""
        if not self.closed and self.transport is not None:
            self.transport.loseConnection()
        return self.lost

    @property
    def in_flight(self):
        """Requests sent and not yet answered."""
        return len(self._pending)

    # -- internals ------------------------------------------------------

    def _frame(self, frame):
        if len(frame) < 4:
            self._abort(KafkaConnectionError("response frame shorter than its header"))
            return
        (correlation_id,) = _SIZE.unpack_from(frame, 0)
        if not self._pending:
            self._abort(CorrelationIdMismatchError(f"unsolicited response {correlation_id}"))
            return
        head = self._pending[0]
        if correlation_id != head.correlation_id:
            self._abort(
                CorrelationIdMismatchError(
                    f"response correlation id {correlation_id}, expected {head.correlation_id}"
                )
            )
            return
        self._pending.popleft()
        if head.timer is not None and head.timer.active():
            head.timer.cancel()
        if head.abandoned:
            return
        try:
            _, body = codec.decode_response(head.api_key, head.api_version, frame)
        except Exception:
            # The framing is intact, so only this request fails.
            head.deferred.errback()
            return
        head.deferred.callback(body)

    def _cancel(self, pending):
        pending.abandoned = True
        if pending.timer is not None and pending.timer.active():
            pending.timer.cancel()

    def _timed_out(self, pending, timeout):
        pending.timer = None
        if pending.abandoned or pending not in self._pending:
            return
        pending.abandoned = True
        name = codec.API_NAMES.get(pending.api_key, pending.api_key)
        pending.deferred.errback(
            RequestTimedOutError(
                f"{name} v{pending.api_version} to {self.peer} got no answer in {timeout:g}s"
            )
        )
        self._abort(KafkaConnectionError(f"connection to {self.peer} closed after a timeout"))

    def _abort(self, exc):
        log.info("closing connection to {peer}: {reason}", peer=self.peer, reason=exc)
        self.closed = True
        self.connected = False
        self._buf = bytearray()
        self._big = self._backing = self._spare = None
        self._fail_all(exc)
        if self.transport is not None:
            abort = getattr(self.transport, "abortConnection", None)
            (abort or self.transport.loseConnection)()

    def _fail_all(self, exc):
        pending, self._pending = self._pending, deque()
        for item in pending:
            if item.timer is not None and item.timer.active():
                item.timer.cancel()
            if not item.abandoned:
                item.abandoned = True
                item.deferred.errback(exc)


@defer.inlineCallbacks
def connect(
    reactor,
    host,
    port,
    client_id="pluglog",
    timeout=30.0,
    request_timeout=30.0,
    negotiate=True,
):
    """Connect to ``host:port``; a Deferred fires with a :class:`KafkaClientProtocol`.

    ``timeout`` bounds the TCP connect and the ApiVersions exchange. With
    ``negotiate`` the broker's version ranges are stored on the protocol.
    Failures errback with :class:`KafkaConnectionError` naming the address.
    """
    endpoint = HostnameEndpoint(reactor, host, port, timeout=timeout)
    proto = KafkaClientProtocol(reactor, client_id=client_id, request_timeout=request_timeout)
    try:
        yield connectProtocol(endpoint, proto)
    except Exception as exc:
        raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc}") from None
    if negotiate:
        try:
            yield proto.negotiate(timeout=timeout)
        except Exception:
            proto.close()
            raise
    return proto
