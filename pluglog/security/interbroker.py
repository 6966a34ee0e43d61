"""Inter-broker traffic: which listener replica fetchers use, and how they log in.

Every broker registers all its advertised listeners in ZooKeeper
(:func:`advertised_endpoints`, Kafka's ``/brokers/ids/N`` v5 ``endpoints``
and ``listener_security_protocol_map``). Replica fetchers connect to the
leader's endpoint on the inter-broker listener, picked as Kafka does:
``inter.broker.listener.name``, else the listener named like
``security.inter.broker.protocol`` (default PLAINTEXT); setting both is
refused. On a TLS listener the fetcher verifies the leader's certificate
against ``ssl.truststore.location``; on a SASL listener it logs in with
``sasl.mechanism.inter.broker.protocol`` (PLAIN, SCRAM-SHA-256 or
SCRAM-SHA-512) as ``inter.broker.sasl.username`` /
``inter.broker.sasl.password``. Kafka takes those from the listener's JAAS
config (``listener.name.<l>.<mech>.sasl.jaas.config``); two plain keys say the
same without a JAAS parser. That user needs a credential like any other
(``pluglog users add``) and, with an authorizer, a place in ``super.users``
(replica fetches need CLUSTER_ACTION, as in Kafka).
"""

from twisted.internet import defer

from pluglog.errors import ConfigError, KafkaError
from pluglog.security import sasl_client
from pluglog.security.listeners import parse_listeners, protocol_map


def advertised_endpoints(config):
    """``[(listener name, protocol, host, port)]`` this broker registers."""
    listeners = parse_listeners(config)
    if not listeners:
        return [("PLAINTEXT", "PLAINTEXT", config.advertised_host, config.advertised_port)]
    out = []
    for item in listeners:
        host = item.advertised_host or item.host
        if not host or host in ("0.0.0.0", "::"):
            host = config.advertised_host
        out.append((item.name, item.protocol, host, item.advertised_port or item.port))
    return out


def listener_name(config):
    """The inter-broker listener's name; ConfigError when it is not configured."""
    explicit = config.inter_broker_listener_name.strip().upper()
    protocol = config.security_inter_broker_protocol
    if explicit and "security.inter.broker.protocol" in config.explicit_keys:
        raise ConfigError(
            "inter.broker.listener.name and security.inter.broker.protocol "
            "are both set; set only one"
        )
    name = explicit or protocol
    names = [n for n, _p, _h, _port in advertised_endpoints(config)]
    if name not in names:
        key = "inter.broker.listener.name" if explicit else "security.inter.broker.protocol"
        raise ConfigError(f"{key}={name}: no such listener (listeners: {', '.join(names)})")
    return name


def check(config):
    """Refuse, before start, an inter-broker setup that cannot work."""
    name = listener_name(config)
    protocol = protocol_map(config).get(name, name) if config.listeners else "PLAINTEXT"
    if protocol.startswith("SASL_") and not (
        config.inter_broker_sasl_username and config.inter_broker_sasl_password
    ):
        raise ConfigError(
            f"the inter-broker listener {name} is {protocol}: set inter.broker.sasl.username "
            "and inter.broker.sasl.password (the brokers' own SASL user)"
        )
    if protocol.endswith("SSL") and not config.ssl_truststore_location:
        raise ConfigError(
            f"the inter-broker listener {name} is {protocol}: set ssl.truststore.location "
            "(the CA that signed the brokers' certificates)"
        )
    return name, protocol


@defer.inlineCallbacks
def connect(reactor, config, host, port, client_id, timeout):
    """A KafkaClientProtocol to another broker's inter-broker endpoint, over
    TLS and logged in as configured; a Deferred."""
    from twisted.internet.endpoints import HostnameEndpoint
    from twisted.internet.protocol import Factory
    from twisted.protocols.tls import TLSMemoryBIOFactory

    from pluglog.client.connection import KafkaClientProtocol, KafkaConnectionError

    _name, protocol = check(config)
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
            yield _login(proto, config, timeout)
        except Exception:
            proto.close()
            raise
    return proto


def _tls_options(config, host):
    from twisted.internet import ssl

    with open(config.ssl_truststore_location, "rb") as handle:
        authority = ssl.Certificate.loadPEM(handle.read())
    return ssl.optionsForClientTLS(host, trustRoot=authority)


@defer.inlineCallbacks
def _login(proto, config, timeout):
    """SaslHandshake v1 then SaslAuthenticate v1 exchanges (KIP-152)."""
    mechanism = config.sasl_mechanism_inter_broker_protocol
    user, password = config.inter_broker_sasl_username, config.inter_broker_sasl_password
    steps = sasl_client.exchange(mechanism, user, password)
    try:
        request = next(steps)
        while True:
            answer = yield proto.request(*request, timeout=timeout)
            try:
                request = steps.send(answer)
            except StopIteration:
                return
    except sasl_client.MechanismError as exc:
        raise KafkaError(
            f"inter-broker SASL handshake for {mechanism} refused "
            f"(error {exc.error_code}; offered: {exc.offered})"
        ) from None
    except sasl_client.CredentialsError as exc:
        raise KafkaError(
            f"inter-broker SASL login as {user!r} failed: {exc.error_message}"
        ) from None
