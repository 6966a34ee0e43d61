"""KafkaServerProtocol: int32 framing, dispatch, in-order responses.

Framing (:mod:`.framing`) slices whole requests out of each read in place
and keeps only an incomplete one in a buffer. Every request takes a slot in
a FIFO; a handler may answer now or with a Deferred (long-polling fetches),
and answers leave strictly in request order. acks=0 produce requests get
no response at all.

Output: on a plain TCP connection every response goes through a
:class:`~pluglog.server.sendfile.SocketWriter`, which sends it at once with
``sendmsg`` and serves Fetch's file ranges with ``os.sendfile`` (no record
bytes pass through Python, no reactor iteration per response); the answers
to the requests of one read leave together, in one ``sendmsg``. Other
transports (TLS, ``StringTransport`` in tests) take the copy-through path:
file ranges are read and handed to ``transport.writeSequence``.

Bad input never takes the broker down: an oversize or undersized frame, an
unknown API key, an unparsable header or body is logged once and the
connection is closed (Kafka's behaviour); an unsupported ApiVersions version
gets the v0 fallback body with UNSUPPORTED_VERSION; other unsupported
versions whose layout is known get an UNSUPPORTED_VERSION error response.
"""

import struct
import time
from collections import deque

from twisted.internet import defer, protocol

from pluglog import protocol as codec
from pluglog.errors import UNKNOWN_SERVER_ERROR, KafkaError
from pluglog.logsafe import SafeLogger
from pluglog.security.sasl import Session
from pluglog.server.connections import ConnectionGuard
from pluglog.server.fastlane import FAST_VERSIONS, produce_fast
from pluglog.server.framing import Framing
from pluglog.server.handlers.common import NO_RESPONSE, CloseConnection, RequestContext
from pluglog.server.handlers.core import metadata_precheck
from pluglog.server.handlers.table import HANDLERS
from pluglog.server.sendfile import SocketWriter, supports_direct
from pluglog.server.slots import _authorizing, _checked, _Slot, bad_input_throttle
from pluglog.server.throttle import apply_quotas

log = SafeLogger()
_SIZE = struct.Struct(">i")
# Request latency clock, float seconds: cheaper than perf_counter_ns's
# two-digit ints to make, subtract and sort (bench/metrics_instructions.py).
_now = time.perf_counter
# Pause reading from a client that has this many requests in flight; the
# clients we serve keep at most ~5, so this only bites runaway pipelines.
MAX_IN_FLIGHT = 256
_BUFFERS = (bytes, bytearray, memoryview)


class KafkaServerProtocol(Framing, protocol.Protocol):
    """One client connection."""

    # Bookkeeping read by the factory's ConnectionGuard sweep (connections.py).
    _reads = _reads_seen = _frames = 0
    _active_at = _partial_since = 0.0
    _partial_key = None
    _reserved = _wanted = 0
    _mem_wait = False
    guard = None
    host = None
    expired = None

    def __init__(self, broker, max_frame, listener=None, metrics=None):
        self.broker = broker
        self.max_frame = max_frame
        #: pluglog.metrics.recorder.RequestMetrics, or None (metrics.enabled=false)
        self.metrics = metrics
        self._arrived = 0.0  # perf_counter() when the current frame was complete
        # Bound once: the fast lane's answers are timed without a lookup.
        self._produce_stats = None if metrics is None else metrics.apis[0]
        self._produce_observe = None if metrics is None else metrics.apis[0].observe
        #: pluglog.security.sasl.Session when listeners are configured
        self.session = None
        #: the session while SASL authentication is pending (None: pass everything)
        self._gate = None
        if listener is not None:
            self.session = Session(listener, self, broker.security)
            if listener.sasl:
                self._gate = self.session
            elif self.session.authorizing:
                self._gate = _authorizing(self.session)
        self._buf = bytearray()
        self._need = None
        self._slots = deque()
        self._closing = False
        self._paused = False
        self._backlogged = False
        self._throttled = None  # the callLater that ends a quota mute
        self._writer = None
        #: answers held while the frames of one read are handled (writer only)
        self._cork = None
        self.peer = None
        #: callbacks run once when the connection is lost (parked group requests)
        self._close_hooks = {}
        #: reactor seconds when the SASL session ends (KIP-368), None: never
        self.auth_expires = None

    def connectionMade(self):
        peer = self.transport.getPeer()
        # Responses are written whole; Nagle would hold a response's tail
        # back for the client's delayed ACK (~40 ms per fetch on loopback).
        set_no_delay = getattr(self.transport, "setTcpNoDelay", None)
        if set_no_delay is not None:
            set_no_delay(True)
        self.peer = f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"
        guard = getattr(getattr(self, "factory", None), "guard", None)
        if guard is not None:
            self.host = getattr(peer, "host", None)
            self._active_at = guard.reactor.seconds()
            refused = guard.admit(self, self.host)
            if refused is not None:
                # Counted and logged by the guard, not once per socket.
                self._closing = True
                self.transport.loseConnection()
                return
            self.guard = guard
        if supports_direct(self.transport):
            self._writer = SocketWriter(self.transport, self._on_backlog)

    def expire(self, reason):
        """Closed by the guard (idle, or a request not completed in time); the
        guard logs a count per limit rather than a line per connection."""
        self.expired = reason
        self._uncork()
        self._closing = True
        self._buf = bytearray()
        if self._writer is not None:
            self._writer.lose_connection()
        else:
            self.transport.loseConnection()

    def _bad_input(self, reason, header=None):
        # Logged once per connection (it is closed right after), at most
        # Throttle.burst per window across connections; SafeLogger escapes.
        # A reason of None closes quietly (the caller logged it already).
        extra = ""
        if header is not None:
            client_id = "None" if header.client_id is None else f"'{header.client_id}'"
            extra = (
                f" (api_key={header.api_key} api_version={header.api_version}"
                f" correlation_id={header.correlation_id} client_id={client_id})"
            )
        if reason is not None:
            bad_input_throttle(self.broker.reactor)(
                log.warn,
                "closing connection from {peer}: {reason}{extra}",
                peer=self.peer,
                reason=reason,
                extra=extra,
            )
        # Answers to the read's earlier frames still leave, before the close.
        self._uncork()
        self._closing = True
        self._buf = bytearray()
        if self._writer is not None:
            self._writer.lose_connection()
        else:
            self.transport.loseConnection()

    def _handle_frame(self, frame):
        if self.metrics is not None:
            self._arrived = _now()
        if self.auth_expires is not None and self.broker.reactor.seconds() > self.auth_expires:
            # KIP-368, checked when a request arrives as Kafka does.
            self._bad_input(
                "its SASL session expired without re-authentication (connections.max.reauth.ms)"
            )
            return
        if self._gate is not None and self._gate.intercept(frame):
            return
        if (
            not frame[0]
            and not frame[1]
            and not frame[2]
            and frame[3] in FAST_VERSIONS
            and not self.broker.quotas.enabled
        ):
            # Produce v3-v11: the fast lane takes the one-partition shape.
            try:
                handled = produce_fast(self.broker, frame, self._send_fast, self.metrics)
            except Exception:
                log.failure("handler for api 0 v{v} crashed", v=frame[3])
                self._bad_input("internal error while handling the request")
                return
            if handled is not None:
                return
        self._handle_request(frame)

    def _send_fast(self, response):
        # The fast lane's whole response frame, size prefix included. Called
        # from inside the log's append (the early answer): it must not raise
        # into the log's bookkeeping, so a failure closes the connection.
        try:
            if self._slots:
                # Behind a long poll, like any answer (its size prefix is re-added).
                slot = _Slot(self._produce_stats, self._arrived)
                self._slots.append(slot)
                self._fill([memoryview(response)[4:]], slot)
                return
            if self._closing:
                return
            if self._cork is not None:
                self._cork.append(response)
            elif self._writer is not None:
                self._writer.write_bytes(response)
            else:
                self.transport.write(response)
            observe = self._produce_observe
            if observe is not None:
                observe(_now() - self._arrived)
        except Exception:
            log.failure("sending a produce answer to {peer} failed", peer=self.peer)
            self._bad_input("internal error while answering")

    def _handle_request(self, frame):
        try:
            header = codec.parse_request_header(frame)
        except ValueError as exc:
            self._bad_input(f"unparsable request header: {exc}")
            return
        api_key, version = header.api_key, header.api_version
        supported = codec.SUPPORTED.get(api_key)
        handler = HANDLERS.get(api_key)
        if (supported is None or handler is None) and not codec.is_defined(api_key, version):
            self._bad_input(f"unknown or unserved api key {api_key}", header)
            return
        if supported is None or handler is None or not supported[0] <= version <= supported[1]:
            if api_key == codec.API_VERSIONS:
                self._push_ready(codec.api_versions_fallback_response(header.correlation_id))
                return
            parts = codec.unsupported_version_response(api_key, version, header.correlation_id)
            if parts is None:
                self._bad_input(f"unsupported version {version} of api {api_key}", header)
            else:
                log.info(
                    "unsupported version {v} of api {k} from {peer}",
                    v=version,
                    k=api_key,
                    peer=self.peer,
                )
                self._push_ready(parts)
            return
        refusal = metadata_precheck(self.broker, header, frame)
        if refusal is not None:
            self._bad_input(refusal, header)
            return
        try:
            request = codec.decode_request(header, frame)
        except ValueError as exc:
            self._bad_input(f"malformed request body: {exc}", header)
            return
        ctx = RequestContext(self.broker, header, self.peer, self.session, self.on_close)
        started = time.perf_counter_ns()
        try:
            if self._gate is not None:
                # Only connections of a broker with an authorizer get here
                # past authentication: check what the principal may do.
                result = _checked(ctx, api_key, request, handler)
            else:
                result = handler(ctx, request)
            if self.broker.quotas.enabled:
                result = apply_quotas(
                    self, header, len(frame), result, time.perf_counter_ns() - started
                )
        except CloseConnection as exc:
            self._bad_input(str(exc), header)
            return
        except KafkaError as exc:
            self._bad_input(f"request refused: {exc}", header)
            return
        except Exception:
            log.failure("handler for api {k} v{v} crashed", k=api_key, v=version)
            self._bad_input("internal error while handling the request", header)
            return
        metrics = self.metrics
        stats = None
        if metrics is not None:
            stats = metrics.api(api_key)
            if result is NO_RESPONSE:
                stats.observe(_now() - self._arrived)
            elif isinstance(result, defer.Deferred):
                result.addCallback(metrics.answered_later, api_key, request)
            else:
                metrics.answered(api_key, request, result)
        if result is NO_RESPONSE:
            return
        if isinstance(result, defer.Deferred):
            slot = _Slot(stats, self._arrived)
            self._slots.append(slot)
            result.addCallback(self._encode, header)
            result.addErrback(self._failed, header)
            result.addCallback(self._fill, slot)
            if len(self._slots) >= MAX_IN_FLIGHT and not self._paused:
                self._paused = True
                self._update_reading()
            return
        try:
            parts = self._encode(result, header)
        except Exception:
            log.failure("encoding the response of api {k} v{v} failed", k=api_key, v=version)
            self._bad_input("internal error while encoding the response", header)
            return
        if self._slots:
            # An earlier answer (a long poll) is still pending: queue behind it.
            slot = _Slot(stats, self._arrived)
            self._slots.append(slot)
            self._fill(parts, slot)
        elif not self._closing:
            self._write(parts)
            if stats is not None:
                stats.observe(_now() - self._arrived)

    def _encode(self, body, header):
        return codec.encode_response(
            header.api_key, header.api_version, header.correlation_id, body
        )

    def _failed(self, failure, header):
        log.failure("deferred handler for api {k} failed", failure, k=header.api_key)
        self._bad_input("internal error while handling the request", header)
        return None

    def _push_ready(self, parts):
        slot = _Slot()
        self._slots.append(slot)
        self._fill(parts, slot)

    def _fill(self, parts, slot):
        slot.parts = parts
        slot.ready = True
        slots = self._slots
        while slots and slots[0].ready:
            head = slots.popleft()
            if head.parts is not None and not self._closing:
                self._write(head.parts)
                if head.stats is not None:
                    head.stats.observe(_now() - head.arrived)
        if self._paused and len(slots) < MAX_IN_FLIGHT // 2:
            self._paused = False
            self._update_reading()

    def _on_backlog(self, backlogged):
        self._backlogged = backlogged
        self._update_reading()

    def mute(self, throttle_ms):
        """Stop reading for ``throttle_ms`` (a quota violation); a later
        violation extends the mute."""
        reactor = self.broker.reactor
        call = self._throttled
        if call is not None and call.active():
            remaining = call.getTime() - reactor.seconds()
            if remaining * 1000 >= throttle_ms:
                return
            call.cancel()
        self._throttled = reactor.callLater(throttle_ms / 1000.0, self._unmute)
        self._update_reading()

    def _unmute(self):
        self._throttled = None
        self._update_reading()

    def _update_reading(self):
        # Four reasons to stop reading: too many requests in flight, too
        # much output queued for a client that does not read its answers, a
        # quota's throttle time, or queued.max.request.bytes used up.
        if self._paused or self._backlogged or self._throttled is not None or self._mem_wait:
            self.transport.pauseProducing()
        elif not self._closing:
            self.transport.resumeProducing()

    def _write(self, parts):
        writer = self._writer
        if writer is not None:
            total = 0
            for part in parts:
                total += len(part) if isinstance(part, _BUFFERS) else part.size
            corked = self._cork
            if corked is not None:
                corked.append(_SIZE.pack(total))
                corked.extend(parts)
            else:
                writer.write([_SIZE.pack(total), *parts])
            return
        chunks = []
        total = 0
        for part in parts:
            if not isinstance(part, _BUFFERS):
                part = part.read()
            chunks.append(part)
            total += len(part)
        chunks.insert(0, _SIZE.pack(total))
        self.transport.writeSequence(chunks)

    def on_close(self, callback):
        """Run ``callback()`` when this connection is lost; returns the
        function that forgets it again (its request was answered)."""
        key = object()
        self._close_hooks[key] = callback
        return lambda: self._close_hooks.pop(key, None)

    def connectionLost(self, reason):
        self._closing = True
        hooks, self._close_hooks = self._close_hooks, {}
        for callback in hooks.values():
            try:
                callback()
            except Exception:
                log.failure("a connection-close callback failed")
        if self._throttled is not None and self._throttled.active():
            self._throttled.cancel()
        if self.guard is not None:
            self.guard.forget(self, self.host)
            self._mem_wait = False
        if self._writer is not None:
            self._writer.close()
        for slot in self._slots:
            slot.parts = None
        self._slots.clear()


class KafkaServerFactory(protocol.Factory):
    """Builds a KafkaServerProtocol per client connection."""

    def __init__(self, broker, listener=None, metrics=None):
        self.broker = broker
        self.listener = listener
        self.guard = ConnectionGuard(broker.config, broker.reactor)
        self.metrics = metrics
        if metrics is not None:
            metrics.add_listener("PLAINTEXT" if listener is None else listener.name, self.guard)

    def stopFactory(self):
        self.guard.stop()

    def buildProtocol(self, addr):
        proto = KafkaServerProtocol(
            self.broker, self.broker.config.socket_request_max_bytes, self.listener, self.metrics
        )
        proto.factory = self
        return proto


__all__ = ["KafkaServerProtocol", "KafkaServerFactory", "UNKNOWN_SERVER_ERROR"]
