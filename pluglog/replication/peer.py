"""Connections from this broker to another broker's inter-broker listener.

Replica fetchers talk to a partition's leader as a Kafka client would: a
:class:`pluglog.client.connection.KafkaClientProtocol` over the listener
:func:`pluglog.security.interbroker.check` picks, wrapped in TLS when that
listener is SSL (the leader's certificate verified against
``ssl.truststore.location``) and logged in with SaslHandshake v1 then
SaslAuthenticate v1 (KIP-152) when it is SASL. When the leader grants the
session a lifetime (``connections.max.reauth.ms``, KIP-368) the same login
runs again on the connection at 90% of it, as librdkafka does, so replica
fetching is not cut off when the session ends; a refused re-login closes the
connection (the fetcher reconnects and reports the login error).
"""

from twisted.internet import defer
from twisted.internet.endpoints import HostnameEndpoint
from twisted.internet.protocol import Factory
from twisted.protocols.tls import TLSMemoryBIOFactory

from pluglog.client.connection import KafkaClientProtocol, KafkaConnectionError
from pluglog.errors import KafkaError
from pluglog.security import interbroker, sasl_client


@defer.inlineCallbacks
def connect(reactor, config, host, port, client_id, timeout):
    """A KafkaClientProtocol to another broker's inter-broker endpoint, over
    TLS and logged in as configured; a Deferred."""
    _name, protocol = interbroker.check(config)
    endpoint = HostnameEndpoint(reactor, host, port, timeout=timeout)
    proto = KafkaClientProtocol(reactor, client_id=client_id, request_timeout=timeout)
    factory = Factory.forProtocol(lambda: proto)
    if protocol.endswith("SSL"):
        # Not wrapClientTLS: its TLS layer schedules writes on the global
        # reactor, and this one may be another (tests run a private one).
        factory = TLSMemoryBIOFactory(_tls_options(config, host), True, factory, clock=reactor)
    try:
        yield endpoint.connect(factory)
    except Exception as exc:
        raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc}") from None
    if protocol.startswith("SASL_"):
        try:
            session = yield _login(proto, config, timeout)
        except Exception:
            proto.close()
            raise
        if session[0]:
            _Relogin(reactor, proto, config, timeout).schedule(session)
    return proto


class _Relogin:
    """KIP-368: log in again at 90% of each session lifetime, until closed."""

    def __init__(self, reactor, proto, config, timeout):
        self.reactor, self.proto, self.config, self.timeout = reactor, proto, config, timeout
        self.call = None
        proto.lost.addBoth(self._lost)

    def schedule(self, session):
        lifetime_ms, sent_at = session
        if lifetime_ms and not self.proto.closed:
            # Counted from when the last login request left: its answer may
            # have queued behind a parked Fetch, so the leader's session
            # started earlier than the answer arrived.
            delay = sent_at + lifetime_ms * 0.9 / 1000.0 - self.reactor.seconds()
            self.call = self.reactor.callLater(max(delay, 0.0), self._relogin)

    def _relogin(self):
        self.call = None
        if self.proto.closed:
            return
        d = _login(self.proto, self.config, self.timeout)
        d.addCallbacks(self.schedule, self._failed)

    def _failed(self, _failure):
        # The fetcher sees the connection go and reconnects with a full login,
        # which reports why it is refused.
        self.proto.close()

    def _lost(self, result):
        if self.call is not None and self.call.active():
            self.call.cancel()
        return result


def _tls_options(config, host):
    from twisted.internet import ssl  # deferred: pyOpenSSL, needed only for TLS

    with open(config.ssl_truststore_location, "rb") as handle:
        authority = ssl.Certificate.loadPEM(handle.read())
    return ssl.optionsForClientTLS(host, trustRoot=authority)


@defer.inlineCallbacks
def _login(proto, config, timeout):
    """SaslHandshake v1 then SaslAuthenticate v1 exchanges (KIP-152); fires
    with ``(session lifetime in ms (0: unlimited), reactor time the last
    request was sent)``."""
    mechanism = config.sasl_mechanism_inter_broker_protocol
    user, password = config.inter_broker_sasl_username, config.inter_broker_sasl_password
    steps = sasl_client.exchange(mechanism, user, password)
    try:
        request = next(steps)
        while True:
            sent_at = proto.reactor.seconds()
            answer = yield proto.request(*request, timeout=timeout)
            try:
                request = steps.send(answer)
            except StopIteration as done:
                return done.value or 0, sent_at
    except sasl_client.MechanismError as exc:
        raise KafkaError(
            f"inter-broker SASL handshake for {mechanism} refused "
            f"(error {exc.error_code}; offered: {exc.offered})"
        ) from None
    except sasl_client.CredentialsError as exc:
        raise KafkaError(
            f"inter-broker SASL login as {user!r} failed: {exc.error_message}"
        ) from None
