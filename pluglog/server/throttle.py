"""Quota enforcement on a connection: throttle_time_ms and the muted channel.

Called by :class:`~pluglog.server.protocol.KafkaServerProtocol` for every
request while :attr:`ClientQuotas.enabled` (the produce fast lane is skipped
then, since its answer has no room for a throttle time). What is recorded is
Kafka's: the request size for ``producer_byte_rate``, the response's record
bytes for ``consumer_byte_rate``, the handler's time on the reactor thread
as a percentage for ``request_percentage``. The largest throttle time goes
into the response's ``throttle_time_ms`` (KIP-219: the answer leaves at
once and the client backs off) and the connection stops reading (Twisted's
``pauseProducing``) until it has passed, so a client that ignores the field
is held to the quota as well.
"""

from twisted.internet import defer

from pluglog import protocol as codec
from pluglog.broker.quotas import (
    ANONYMOUS,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    fetch_response_bytes,
)
from pluglog.server.handlers.common import NO_RESPONSE

_NANOS_TO_PERCENT = 100.0 / 1e9


def apply_quotas(proto, header, request_bytes, result, elapsed_ns):
    """Record the request against its quotas, stamp ``throttle_time_ms`` on
    the result (a dict, a Deferred of one, or NO_RESPONSE) and mute ``proto``."""
    broker = proto.broker
    quotas = broker.quotas
    user = ANONYMOUS
    client = header.client_id or ""
    now = broker.now_ms()
    throttle = quotas.record(REQUEST_PERCENTAGE, user, client, elapsed_ns * _NANOS_TO_PERCENT, now)
    if header.api_key == codec.PRODUCE:
        throttle = max(
            throttle, quotas.record(PRODUCER_BYTE_RATE, user, client, request_bytes, now)
        )
    if header.api_key == codec.FETCH:

        def on_fetch(body):
            size = fetch_response_bytes(body)
            ms = quotas.record(CONSUMER_BYTE_RATE, user, client, size, broker.now_ms())
            return _stamp(proto, body, max(throttle, ms), header.api_key)

        if isinstance(result, defer.Deferred):
            return result.addCallback(on_fetch)
        return on_fetch(result)
    if isinstance(result, defer.Deferred):
        return result.addCallback(lambda body: _stamp(proto, body, throttle, header.api_key))
    return _stamp(proto, result, throttle, header.api_key)


def _stamp(proto, body, throttle_ms, api_key):
    if throttle_ms > 0:
        metrics = getattr(proto, "metrics", None)
        if metrics is not None:
            metrics.throttled(api_key, throttle_ms)
        if body is not NO_RESPONSE and isinstance(body, dict) and "throttle_time_ms" in body:
            body["throttle_time_ms"] = max(body["throttle_time_ms"], throttle_ms)
        proto.mute(throttle_ms)
    return body
