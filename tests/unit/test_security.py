"""Security pieces in memory: SCRAM and PLAIN exchanges against the salted
store, listener parsing, the ACL authorizer's rules, and the SASL gate on a
protocol over a StringTransport."""

import base64
import hashlib
import hmac

import pytest
from scramp import ScramClient
from twisted.internet import task
from twisted.internet.testing import StringTransport

from pluglog.config import BrokerConfig
from pluglog.errors import ConfigError
from pluglog.security import acls
from pluglog.security.credentials import FileCredentialStore, make_credential
from pluglog.security.listeners import parse_listeners
from pluglog.security.sasl import AuthenticationFailed, PlainAuthenticator, ScramAuthenticator


@pytest.fixture
def store(tmp_path):
    s = FileCredentialStore(str(tmp_path))
    s.alter_scram_credentials(
        [
            (u, m, make_credential(m, "pw"))
            for u in ("alice",)
            for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        ]
    )
    return s


def test_store_is_salted_and_persists(store, tmp_path):
    text = open(store.path).read()
    assert '"pw"' not in text and "iterations" in text
    again = FileCredentialStore(str(tmp_path))
    cred = again.scram_credentials()["alice"]["SCRAM-SHA-256"]
    assert cred.iterations == 4096 and len(cred.salt) > 0


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_with_scramp_client(store, mechanism):
    exchange = ScramAuthenticator().start(mechanism, store)
    client = ScramClient([mechanism], "alice", "pw")
    server_first = exchange.step(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    server_final = exchange.step(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # verifies the server signature
    assert exchange.complete and exchange.username == "alice"


def test_scram_wrong_password_and_unknown_user(store):
    exchange = ScramAuthenticator().start("SCRAM-SHA-256", store)
    client = ScramClient(["SCRAM-SHA-256"], "alice", "not-pw")
    client.set_server_first(exchange.step(client.get_client_first().encode()).decode())
    with pytest.raises(AuthenticationFailed) as info:
        exchange.step(client.get_client_final().encode())
    assert "not-pw" not in str(info.value) and "alice" in str(info.value)
    with pytest.raises(AuthenticationFailed, match="unknown user"):
        ScramAuthenticator().start("SCRAM-SHA-256", store).step(b"n,,n=bob,r=abc")


def test_scram_accepts_librdkafka_2_0_nonce(store):
    # librdkafka 2.0.x sends client nonce + full nonce; Kafka only checks the end.
    cred = store.scram_credentials()["alice"]["SCRAM-SHA-256"]
    exchange = ScramAuthenticator().start("SCRAM-SHA-256", store)
    first = exchange.step(b"n,,n=alice,r=cnonce").decode()
    nonce = first.split(",")[0][2:]
    without_proof = f"c=biws,r=cnonce{nonce}"
    auth = f"n=alice,r=cnonce,{first},{without_proof}".encode()
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", cred.salt, cred.iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, hashlib.sha256).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    assert exchange.step(f"{without_proof},p={proof}".encode()).startswith(b"v=")
    assert exchange.complete


def test_plain_checks_against_scram_credentials(store):
    ok = PlainAuthenticator().start("PLAIN", store)
    ok.step(b"\0alice\0pw")
    assert ok.complete and ok.username == "alice"
    with pytest.raises(AuthenticationFailed):
        PlainAuthenticator().start("PLAIN", store).step(b"\0alice\0nope")
    with pytest.raises(AuthenticationFailed):
        PlainAuthenticator().start("PLAIN", store).step(b"\0mallory\0pw")


def test_listener_parsing():
    config = BrokerConfig(
        listeners="CLIENT://127.0.0.1:9094,PLAINTEXT://:9092",
        listener_security_protocol_map="CLIENT:SASL_PLAINTEXT",
        advertised_listeners="CLIENT://broker.example:19094",
    )
    client, plain = parse_listeners(config)
    assert (client.protocol, client.sasl, client.tls) == ("SASL_PLAINTEXT", True, False)
    assert (client.advertised_host, client.advertised_port) == ("broker.example", 19094)
    assert plain.protocol == "PLAINTEXT" and plain.host == ""
    for bad, match in [
        (BrokerConfig(listeners="FOO://:1"), "no security protocol"),
        (BrokerConfig(listeners="PLAINTEXT:9092"), "NAME://host:port"),
        (BrokerConfig(listeners="SSL://:9093"), "ssl.keystore.location"),
        (BrokerConfig(listeners="PLAINTEXT://:1,PLAINTEXT://:2"), "twice"),
    ]:
        with pytest.raises(ConfigError, match=match):
            parse_listeners(bad)


def _binding(name, op, perm=acls.ALLOW, pattern=acls.LITERAL, who="User:bob", rtype=acls.TOPIC):
    return acls.AclBinding(rtype, name, pattern, who, "*", op, perm)


def test_acl_rules(tmp_path):
    config = BrokerConfig(data_dir=str(tmp_path), super_users="User:root")
    authz = acls.AclAuthorizer(config)
    assert authz.create_acls(
        [
            _binding("orders", acls.READ),
            _binding("pre-", acls.WRITE, pattern=acls.PREFIXED),
            _binding("pre-secret", acls.WRITE, perm=acls.DENY),
            _binding("x", 99),
        ]
    ) == [None, None, None, "invalid operation 99"]
    check = authz.authorize
    assert check("User:bob", "1.2.3.4", acls.READ, acls.TOPIC, "orders")
    assert check("User:bob", "1.2.3.4", acls.DESCRIBE, acls.TOPIC, "orders")  # implied
    assert not check("User:bob", "1.2.3.4", acls.WRITE, acls.TOPIC, "orders")
    assert not check("User:eve", "1.2.3.4", acls.READ, acls.TOPIC, "orders")
    assert check("User:bob", "h", acls.WRITE, acls.TOPIC, "pre-anything")
    assert not check("User:bob", "h", acls.WRITE, acls.TOPIC, "pre-secret")  # deny wins
    assert not check("User:bob", "h", acls.READ, acls.TOPIC, "no-acl-topic")
    assert check("User:root", "h", acls.DELETE, acls.TOPIC, "orders")  # super user
    # Persisted, and reloaded by a new authorizer.
    assert len(acls.AclAuthorizer(config).bindings) == 3
    everyone = acls.AclAuthorizer(config.replace(allow_everyone_if_no_acl_found=True))
    assert everyone.authorize("User:eve", "h", acls.READ, acls.TOPIC, "no-acl-topic")


def test_authorize_by_resource_type(tmp_path):
    """Kafka's authorizeByResourceType (an idempotent producer needs WRITE on
    some topic): an ALLOW counts unless a DENY covers its whole pattern."""
    config = BrokerConfig(data_dir=str(tmp_path), super_users="User:root")
    authz = acls.AclAuthorizer(config)
    by_type = authz.authorize_by_resource_type
    assert not by_type("User:bob", "h", acls.WRITE, acls.TOPIC)  # no ACLs at all
    assert by_type("User:root", "h", acls.WRITE, acls.TOPIC)
    authz.create_acls([_binding("orders", acls.READ)])
    assert not by_type("User:bob", "h", acls.WRITE, acls.TOPIC)  # READ is not WRITE
    authz.create_acls([_binding("logs-", acls.WRITE, pattern=acls.PREFIXED)])
    assert by_type("User:bob", "h", acls.WRITE, acls.TOPIC)
    assert not by_type("User:eve", "h", acls.WRITE, acls.TOPIC)
    authz.create_acls([_binding("log", acls.WRITE, perm=acls.DENY, pattern=acls.PREFIXED)])
    assert not by_type("User:bob", "h", acls.WRITE, acls.TOPIC)  # the DENY covers logs-*
    authz.create_acls([_binding("orders", acls.ALL)])
    assert by_type("User:bob", "h", acls.WRITE, acls.TOPIC)
    authz.create_acls([_binding("*", acls.WRITE, perm=acls.DENY)])
    assert not by_type("User:bob", "h", acls.WRITE, acls.TOPIC)  # DENY on every topic


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_client_salted_password_gives_the_brokers_credential(mechanism):
    """What ``pluglog users add --bootstrap-server`` sends (salt + salted
    password) derives the credential the broker would make from the password."""
    from pluglog.security.credentials import from_salted_password, salted_password

    salt = b"0123456789abcdef"
    sent = salted_password(mechanism, "pässword", salt, 8192)
    assert from_salted_password(mechanism, salt, sent, 8192) == make_credential(
        mechanism, "pässword", 8192, salt=salt
    )


def test_authorizer_class_name_selects_a_registered_provider(tmp_path):
    from zope.interface import implementer

    from pluglog import hookimpl
    from pluglog.interfaces import IAuthorizer
    from pluglog.plugins import make_plugin_manager
    from pluglog.registry import Registry
    from pluglog.security import make_authorizer

    @implementer(IAuthorizer)
    class Nobody:
        def authorize(self, principal, host, operation, resource_type, resource_name):
            return False

        def create_acls(self, bindings):
            return [None] * len(bindings)

        def describe_acls(self, binding_filter):
            return []

        def delete_acls(self, filters):
            return [[] for _ in filters]

    class Plugin:
        @hookimpl
        def pluglog_register_authorizers(self):
            return {"nobody": lambda config, reactor: Nobody()}

    registry = Registry(make_plugin_manager(extra_plugins=[Plugin()], autoload=False))
    assert registry.names("authorizer") == ["acl", "nobody"]
    config = BrokerConfig(data_dir=str(tmp_path))
    clock = task.Clock()
    assert make_authorizer(config, registry, clock) is None
    named = config.replace(authorizer_class_name="nobody")
    assert isinstance(make_authorizer(named, registry, clock), Nobody)
    for value in ("kafka.security.authorizer.AclAuthorizer", "anything-else"):
        chosen = make_authorizer(config.replace(authorizer_class_name=value), registry, clock)
        assert isinstance(chosen, acls.AclAuthorizer), value


def test_ssl_principal_mapping_rules():
    """Kafka's SslPrincipalMapper: first whole-name match wins, $1 groups,
    L/U case, DEFAULT keeps the name, nothing matching is None."""
    from pluglog.security.principals import map_principal, parse_mapping_rules

    rules = parse_mapping_rules(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/U, DEFAULT"
    )
    assert map_principal("CN=kafka1,OU=ServiceUsers,O=Org", rules) == "kafka1"
    assert map_principal("CN=alice,OU=eng,O=Org", rules) == "ALICE@ENG"
    assert map_principal("CN=bob", rules) == "CN=bob"
    only = parse_mapping_rules("RULE:^CN=([^,]*)$/$1/L")
    assert map_principal("CN=Carol", only) == "carol"
    assert map_principal("CN=carol,O=x", only) is None
    assert map_principal("CN=x", parse_mapping_rules("")) == "CN=x"  # empty is DEFAULT
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules"):
        parse_mapping_rules("RULE:^CN=(.*$/$1/")
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules"):
        parse_mapping_rules("DEFAULT,NONSENSE")


class _Broker:
    def __init__(self, security, clock):
        self.security = security
        self.reactor = clock
        self.config = BrokerConfig()


def test_request_before_sasl_authentication_closes(store):
    from types import SimpleNamespace

    from pluglog.security.listeners import Listener
    from pluglog.server.protocol import KafkaServerProtocol

    security = SimpleNamespace(authorizer=None, mechanisms=["PLAIN"], store=store)
    proto = KafkaServerProtocol(
        _Broker(security, task.Clock()),
        1 << 20,
        Listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "", 0),
    )
    transport = StringTransport()
    proto.makeConnection(transport)
    body = b"\x00\x03\x00\x01\x00\x00\x00\x07\x00\x01x\xff\xff\xff\xff"  # Metadata v1
    proto.dataReceived(len(body).to_bytes(4, "big") + body)
    assert transport.disconnecting and transport.value() == b""


def test_alter_user_scram_credentials_tolerates_librdkafkas_extra_tag_byte():
    """librdkafka ends AlterUserScramCredentials with a second empty tag
    buffer; exactly that one 0 byte is accepted, anything else is not."""
    from pluglog import protocol as proto
    from pluglog.protocol.errors import DecodeError

    body = {
        "deletions": [{"name": "a", "mechanism": 1}],
        "upsertions": [
            {
                "name": "b",
                "mechanism": 2,
                "iterations": 4096,
                "salt": b"s",
                "salted_password": b"p",
            }
        ],
    }
    frame = proto.encode_request(51, 0, 7, "rdkafka", body)[4:]
    for payload in (frame, frame + b"\x00"):
        decoded = proto.decode_request(proto.parse_request_header(payload), payload)
        assert decoded["upsertions"][0]["salt"] == b"s"
    for bad in (frame + b"\x01", frame + b"\x00\x00"):
        with pytest.raises(DecodeError, match="trailing"):
            proto.decode_request(proto.parse_request_header(bad), bad)
    other = proto.encode_request(50, 0, 8, "rdkafka", {"users": None})[4:] + b"\x00"
    with pytest.raises(DecodeError, match="trailing"):
        proto.decode_request(proto.parse_request_header(other), other)


def test_certificate_no_mapping_rule_matches_closes(tmp_path):
    """Kafka fails the authentication when no ssl.principal.mapping.rules rule
    applies; pluglog closes the connection at the first authorized request."""
    from types import SimpleNamespace

    from OpenSSL import crypto

    from pluglog.security.principals import parse_mapping_rules
    from pluglog.server.authorization import _tls_principal
    from pluglog.server.handlers import CloseConnection
    from tests.tls_certs import make_certs

    certs = make_certs(tmp_path)
    with open(certs["client_cert"], "rb") as handle:
        cert = crypto.load_certificate(crypto.FILETYPE_PEM, handle.read())
    transport = SimpleNamespace(getPeerCertificate=lambda: cert)
    session = SimpleNamespace(
        conn=SimpleNamespace(transport=transport), principal="x", acl_cache={}
    )

    def ctx(rules):
        security = SimpleNamespace(principal_rules=parse_mapping_rules(rules))
        return SimpleNamespace(broker=SimpleNamespace(security=security))

    _tls_principal(ctx("RULE:^CN=(.*)$/$1/U"), session)
    assert session.principal == "User:CLIENT1" and session.acl_cache == {"tls": True}
    with pytest.raises(CloseConnection, match="CN=client1"):
        _tls_principal(ctx("RULE:^CN=admin$/admin/"), session)
