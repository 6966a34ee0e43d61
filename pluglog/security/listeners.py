"""Named listeners with a security protocol each, and their TLS contexts.

Kafka's keys: ``listeners=NAME://host:port,...``, ``listener.security.protocol.map``
(``NAME:PROTOCOL,...``; without it a name must be a protocol name),
``advertised.listeners`` (same shape, per name) and the ``ssl.*`` PEM paths.
Everything is checked before the reactor starts: a bad value raises
:class:`pluglog.errors.ConfigError` naming it.
"""

import dataclasses
import re

from pluglog.errors import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_ENTRY = re.compile(r"^([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)$")


@dataclasses.dataclass(frozen=True)
class Listener:
    """One listener: where it binds, how it is secured, what clients are told."""

    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str = ""
    advertised_port: int = 0

    @property
    def tls(self):
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self):
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def _entries(key, text):
    out = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        match = _ENTRY.match(item)
        if match is None:
            raise ConfigError(f"{key}: {item!r} is not NAME://host:port")
        name, host, port = match.group(1), match.group(2).strip("[]"), int(match.group(3))
        if port > 65535:
            raise ConfigError(f"{key}: port out of range in {item!r}")
        out.append((name.upper(), host, port))
    return out


def protocol_map(config):
    """``{listener name: security protocol}`` from listener.security.protocol.map."""
    mapping = {name: name for name in PROTOCOLS}
    for item in (p.strip() for p in config.listener_security_protocol_map.split(",")):
        if not item:
            continue
        name, sep, proto = item.partition(":")
        proto = proto.strip().upper()
        if not sep or not name.strip() or proto not in PROTOCOLS:
            raise ConfigError(
                f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL "
                f"with PROTOCOL one of {', '.join(PROTOCOLS)}"
            )
        mapping[name.strip().upper()] = proto
    return mapping


def parse_listeners(config):
    """The configured listeners, in order; [] when ``listeners`` is unset."""
    entries = _entries("listeners", config.listeners)
    if not entries:
        return []
    mapping = protocol_map(config)
    advertised = {}
    for name, host, port in _entries("advertised.listeners", config.advertised_listeners):
        advertised[name] = (host, port)
    seen_names, seen_ports = set(), set()
    out = []
    for name, host, port in entries:
        if name not in mapping:
            raise ConfigError(
                f"listeners: listener {name!r} has no security protocol "
                "(add it to listener.security.protocol.map)"
            )
        if name in seen_names:
            raise ConfigError(f"listeners: listener name {name!r} appears twice")
        if port and port in seen_ports:
            raise ConfigError(f"listeners: port {port} appears twice")
        seen_names.add(name)
        seen_ports.add(port)
        adv_host, adv_port = advertised.get(name, ("", 0))
        out.append(Listener(name, mapping[name], host, port, adv_host, adv_port))
    unknown = set(advertised) - seen_names
    if unknown:
        raise ConfigError(
            f"advertised.listeners: {', '.join(sorted(unknown))} not among the listeners"
        )
    if any(item.tls for item in out):
        if not config.ssl_keystore_location:
            raise ConfigError(
                "ssl.keystore.location: an SSL or SASL_SSL listener needs a PEM certificate"
            )
        tls_options(config)  # reads and checks the PEM files now, not at first connection
    return out


def _read(key, path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path!r}: {exc.strerror}") from None


def tls_options(config):
    """A Twisted ``CertificateOptions`` from the PEM files in ``config``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from OpenSSL import crypto
    from twisted.internet import ssl

    chain_pem = _read("ssl.keystore.location", config.ssl_keystore_location)
    try:
        chain = x509.load_pem_x509_certificates(chain_pem)
    except ValueError as exc:
        raise ConfigError(f"ssl.keystore.location: no PEM certificate: {exc}") from None
    key_key = "ssl.key.location" if config.ssl_key_location else "ssl.keystore.location"
    key_pem = _read(key_key, config.ssl_key_location or config.ssl_keystore_location)
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{key_key}: no unencrypted PEM private key: {exc}") from None
    ca_certs = []
    if config.ssl_truststore_location:
        trust_pem = _read("ssl.truststore.location", config.ssl_truststore_location)
        try:
            ca_certs = [
                crypto.X509.from_cryptography(c)
                for c in x509.load_pem_x509_certificates(trust_pem)
            ]
        except ValueError as exc:
            raise ConfigError(f"ssl.truststore.location: no PEM certificate: {exc}") from None
    client_auth = config.ssl_client_auth
    if client_auth != "none" and not ca_certs:
        raise ConfigError(
            f"ssl.client.auth={client_auth} needs ssl.truststore.location (the CAs to trust)"
        )
    try:
        return ssl.CertificateOptions(
            privateKey=crypto.PKey.from_cryptography_key(key),
            certificate=crypto.X509.from_cryptography(chain[0]),
            extraCertChain=[crypto.X509.from_cryptography(c) for c in chain[1:]],
            verify=client_auth != "none",
            caCerts=ca_certs or None,
            requireCertificate=client_auth == "required",
            raiseMinimumTo=ssl.TLSVersion.TLSv1_2,
        )
    except Exception as exc:
        raise ConfigError(f"ssl.keystore.location: unusable certificate/key: {exc}") from None


def server_endpoint(reactor, listener, config, tls=None):
    """The Twisted server endpoint of one listener (TLS ones wrap the TCP port)."""
    from twisted.internet import endpoints

    interface = listener.host or ""
    if listener.tls:
        return endpoints.SSL4ServerEndpoint(
            reactor, listener.port, tls or tls_options(config), interface=interface
        )
    return endpoints.TCP4ServerEndpoint(reactor, listener.port, interface=interface)


def peer_principal(transport, rules=None):
    """``User:<name>`` of a verified TLS client certificate, else None: the
    subject DN mapped by ``rules`` (ssl.principal.mapping.rules; ValueError
    when none applies)."""
    get_cert = getattr(transport, "getPeerCertificate", None)
    if get_cert is None:
        return None
    try:
        cert = get_cert()
    except Exception:
        return None
    if cert is None:
        return None
    name = cert.to_cryptography().subject.rfc4514_string()
    if rules:
        from pluglog.security.principals import map_principal

        mapped = map_principal(name, rules)
        if mapped is None:
            raise ValueError(f"no ssl.principal.mapping.rules rule applies to {name!r}")
        name = mapped
    return "User:" + name
