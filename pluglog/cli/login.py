"""The client side of a secured connection for pluglog's blocking tools.

``connect(bootstrap, properties)`` opens a
:class:`pluglog.client.blocking.BlockingClient` the way a Kafka client
configured with the same properties would: ``security.protocol`` (PLAINTEXT,
SSL, SASL_PLAINTEXT, SASL_SSL), ``ssl.ca.location`` /
``ssl.truststore.location`` (PEM), ``ssl.certificate.location`` /
``ssl.keystore.location`` and ``ssl.key.location`` for a client certificate,
``sasl.mechanism`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with
``sasl.username`` / ``sasl.password`` or a Java client's
``sasl.jaas.config``. SASL runs SaslHandshake v1 then SaslAuthenticate v1
(KIP-152) through :mod:`pluglog.security.sasl_client`.

``read_properties(path)`` reads a Kafka ``--command-config`` file.
"""

import re
import ssl

from pluglog.errors import ConfigError
from pluglog.security import sasl_client

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = sasl_client.MECHANISMS
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


#: The broker refused the login (its error message is the text).
LoginError = sasl_client.LoginError


def read_properties(path):
    """``key=value`` lines of a Java properties file (``#``/``!`` comments)."""
    props = {}
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ConfigError(f"{path}:{number}: expected key=value, got {line!r}")
        props[key.strip()] = value.strip()
    return props


def _credentials(props):
    user, password = props.get("sasl.username"), props.get("sasl.password")
    jaas = props.get("sasl.jaas.config")
    if (user is None or password is None) and jaas:
        options = dict(_JAAS_OPTION.findall(jaas))
        user = options.get("username", user)
        password = options.get("password", password)
    if user is None or password is None:
        raise ConfigError("sasl.username and sasl.password (or sasl.jaas.config) are required")
    return user, password


def _tls_context(props):
    context = ssl.create_default_context(
        cafile=props.get("ssl.ca.location") or props.get("ssl.truststore.location")
    )
    # Test and private CAs rarely carry the broker's address as a SAN;
    # Kafka's ssl.endpoint.identification.algorithm= (empty) turns it off.
    if props.get("ssl.endpoint.identification.algorithm", "https") in ("", "none"):
        context.check_hostname = False
    cert = props.get("ssl.certificate.location") or props.get("ssl.keystore.location")
    if cert:
        context.load_cert_chain(cert, props.get("ssl.key.location"))
    return context


def connect(bootstrap, props=None, client_id="pluglog-cli", timeout=30.0):
    """A logged-in BlockingClient for ``bootstrap`` with Kafka client ``props``."""
    from pluglog.client.blocking import BlockingClient

    props = dict(props or {})
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"security.protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    mechanism = props.get("sasl.mechanism", "PLAIN").upper()
    if protocol.startswith("SASL") and mechanism not in MECHANISMS:
        raise ConfigError(f"sasl.mechanism {mechanism!r} is not one of {', '.join(MECHANISMS)}")
    client = BlockingClient.from_bootstrap(bootstrap, client_id=client_id, timeout=timeout)
    try:
        if protocol.endswith("SSL"):
            host = client.address[0]
            client.sock = _tls_context(props).wrap_socket(client.sock, server_hostname=host)
        if protocol.startswith("SASL"):
            login(client, mechanism, *_credentials(props))
    except BaseException:
        client.close()
        raise
    return client


def login(client, mechanism, user, password):
    """Authenticate ``client`` with SaslHandshake v1 + SaslAuthenticate v1."""
    sasl_client.run(sasl_client.exchange(mechanism, user, password), client.request)
