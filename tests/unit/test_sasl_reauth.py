"""KIP-368 re-authentication on a SASL connection, driven by a Clock.

A KafkaServerProtocol over a StringTransport speaks real frames: SaslHandshake
and SaslAuthenticate (PLAIN against the salted store), then ApiVersions as
the request that shows whether the connection is still served.
"""

from types import SimpleNamespace

import pytest
from twisted.internet import task
from twisted.internet.testing import StringTransport

from pluglog import protocol as codec
from pluglog.config import BrokerConfig
from pluglog.errors import ILLEGAL_SASL_STATE, NONE, SASL_AUTHENTICATION_FAILED
from pluglog.security.credentials import FileCredentialStore, make_credential
from pluglog.security.listeners import Listener
from pluglog.security.sasl import PlainAuthenticator, ScramAuthenticator
from pluglog.server.protocol import KafkaServerProtocol

LIFETIME_MS = 3000


@pytest.fixture
def store(tmp_path):
    s = FileCredentialStore(str(tmp_path))
    s.alter_scram_credentials(
        [(u, "SCRAM-SHA-256", make_credential("SCRAM-SHA-256", "pw")) for u in ("alice", "bob")]
    )
    return s


class Conn:
    """One client connection to a protocol instance (see the module docstring)."""

    def __init__(self, store, lifetime_ms=LIFETIME_MS):
        self.clock = task.Clock()
        self.clock.advance(100)
        plain, scram = PlainAuthenticator(), ScramAuthenticator()
        security = SimpleNamespace(
            authorizer=None,
            mechanisms=["PLAIN", "SCRAM-SHA-256"],
            authenticators={"PLAIN": plain, "SCRAM-SHA-256": scram},
            store=store,
        )
        broker = SimpleNamespace(
            security=security,
            reactor=self.clock,
            quotas=SimpleNamespace(enabled=False),
            config=BrokerConfig(
                connections_max_reauth_ms=lifetime_ms,
                connection_failed_authentication_delay_ms=0,
            ),
        )
        self.proto = KafkaServerProtocol(
            broker, 1 << 20, Listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "", 0)
        )
        self.transport = StringTransport()
        self.proto.makeConnection(self.transport)
        self.cid = 0

    def call(self, key, version, body):
        self.cid += 1
        self.transport.clear()
        self.proto.dataReceived(codec.encode_request(key, version, self.cid, "c", body))
        out = self.transport.value()
        if not out:
            return None
        cid, decoded = codec.decode_response(key, version, out[4:])
        assert cid == self.cid
        return decoded

    def login(self, user="alice", password="pw", mechanism="PLAIN", version=1):
        shake = self.call(codec.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        assert shake["error_code"] == NONE, shake
        token = b"\0" + user.encode() + b"\0" + password.encode()
        return self.call(36, version, {"auth_bytes": token})

    def served(self):
        answer = self.call(codec.API_VERSIONS, 0, {})
        return answer is not None and answer["error_code"] == NONE

    @property
    def closed(self):
        return self.transport.disconnecting


def test_login_grants_the_lifetime_and_reauthentication_renews_it(store):
    conn = Conn(store)
    answer = conn.login()
    assert (answer["error_code"], answer["session_lifetime_ms"]) == (NONE, LIFETIME_MS)
    conn.clock.advance(2.5)
    assert conn.served()
    again = conn.login()  # librdkafka re-authenticates at 90% of the lifetime
    assert (again["error_code"], again["session_lifetime_ms"]) == (NONE, LIFETIME_MS)
    conn.clock.advance(2.5)  # 5 s after the first login, 2.5 s after the second
    assert conn.served() and not conn.closed


def test_a_session_not_renewed_in_time_is_closed_at_its_next_request(store):
    conn = Conn(store)
    conn.login()
    conn.clock.advance(LIFETIME_MS / 1000 - 0.01)
    assert conn.served()
    conn.clock.advance(0.02)
    assert not conn.served()
    assert conn.closed


def test_reauthentication_of_removed_credentials_closes_the_connection(store):
    conn = Conn(store)
    conn.login()
    store.alter_scram_credentials([], deletions=[("alice", "SCRAM-SHA-256")])
    answer = conn.login()
    assert answer["error_code"] == SASL_AUTHENTICATION_FAILED
    conn.clock.advance(0)  # connection.failed.authentication.delay.ms = 0
    assert conn.closed


@pytest.mark.parametrize(
    "mechanism,user,code",
    [
        ("SCRAM-SHA-256", "alice", ILLEGAL_SASL_STATE),  # another mechanism
        ("PLAIN", "bob", SASL_AUTHENTICATION_FAILED),  # another principal
    ],
)
def test_reauthentication_keeps_mechanism_and_principal(store, mechanism, user, code):
    conn = Conn(store)
    conn.login()
    shake = conn.call(codec.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    if shake["error_code"] == NONE:
        token = b"\0" + user.encode() + b"\0pw"
        shake = conn.call(36, 1, {"auth_bytes": token})
    assert shake["error_code"] == code
    conn.clock.advance(0)
    assert conn.closed


def test_without_a_limit_sessions_never_expire_and_v0_carries_no_lifetime(store):
    conn = Conn(store, lifetime_ms=0)
    answer = conn.login(version=1)
    assert answer["session_lifetime_ms"] == 0
    conn.clock.advance(10**6)
    assert conn.served()
    assert conn.login(version=0)["error_code"] == NONE  # re-authentication, no limit


def test_a_reauthentication_begun_in_time_may_finish_after_the_end(store):
    # Its SaslAuthenticate can arrive late: the answers of a re-authentication
    # queue behind a parked Fetch (replica fetchers, consumers).
    conn = Conn(store)
    conn.login()
    conn.clock.advance(LIFETIME_MS / 1000 * 0.9)
    shake = conn.call(codec.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert shake["error_code"] == NONE
    conn.clock.advance(LIFETIME_MS / 1000 * 0.5)  # past the first session's end
    answer = conn.call(36, 1, {"auth_bytes": b"\0alice\0pw"})
    assert (answer["error_code"], answer["session_lifetime_ms"]) == (NONE, LIFETIME_MS)
    assert conn.served() and not conn.closed
