"""Inter-broker traffic: which listener replica fetchers use, and how they log in.

Every broker registers all its advertised listeners in ZooKeeper
(:func:`advertised_endpoints`, Kafka's ``/brokers/ids/N`` v5 ``endpoints``
and ``listener_security_protocol_map``). Replica fetchers connect to the
leader's endpoint on the inter-broker listener, picked as Kafka does:
``inter.broker.listener.name``, else the listener named like
``security.inter.broker.protocol`` (default PLAINTEXT); setting both is
refused. The connection itself is made by :mod:`pluglog.replication.peer`.
On a TLS listener the fetcher verifies the leader's certificate
against ``ssl.truststore.location``; on a SASL listener it logs in with
``sasl.mechanism.inter.broker.protocol`` (PLAIN, SCRAM-SHA-256 or
SCRAM-SHA-512) as ``inter.broker.sasl.username`` /
``inter.broker.sasl.password``. Kafka takes those from the listener's JAAS
config (``listener.name.<l>.<mech>.sasl.jaas.config``); two plain keys say the
same without a JAAS parser. That user needs a credential like any other
(``pluglog users add``) and, with an authorizer, a place in ``super.users``
(replica fetches need CLUSTER_ACTION, as in Kafka).
"""

from pluglog.errors import ConfigError
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
