"""Test certificates made with ``cryptography``: a CA, a server certificate
for 127.0.0.1/localhost and a client certificate, written as PEM files."""

import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject, key, issuer, issuer_key, ca=False, sans=(), usage=None):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path, *objs):
    with open(path, "wb") as handle:
        for obj in objs:
            if isinstance(obj, x509.Certificate):
                handle.write(obj.public_bytes(serialization.Encoding.PEM))
            else:
                handle.write(
                    obj.private_bytes(
                        serialization.Encoding.PEM,
                        serialization.PrivateFormat.PKCS8,
                        serialization.NoEncryption(),
                    )
                )
    return str(path)


def make_certs(directory, client_subject=None):
    """Write ca.pem, server.pem, server.key, client.pem, client.key; return their paths.

    ``client_subject``: the client certificate's ``x509.Name`` (default CN=client1)."""
    os.makedirs(directory, exist_ok=True)
    ca_key = _key()
    ca = _cert(_name("pluglog test CA"), ca_key, _name("pluglog test CA"), ca_key, ca=True)
    server_key = _key()
    server = _cert(
        _name("localhost"),
        server_key,
        ca.subject,
        ca_key,
        sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
    )
    client_key = _key()
    client = _cert(
        client_subject or _name("client1"),
        client_key,
        ca.subject,
        ca_key,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    join = os.path.join
    return {
        "ca": _write(join(directory, "ca.pem"), ca),
        "server_cert": _write(join(directory, "server.pem"), server),
        "server_key": _write(join(directory, "server.key"), server_key),
        "client_cert": _write(join(directory, "client.pem"), client),
        "client_key": _write(join(directory, "client.key"), client_key),
    }
