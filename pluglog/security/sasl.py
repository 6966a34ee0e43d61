"""SASL on a connection: the PLAIN and SCRAM mechanisms and the session gate.

Mechanisms are :class:`pluglog.interfaces.IAuthenticator` providers
(registered by the built-in plugin: ``plain`` offers PLAIN, ``scram`` offers
SCRAM-SHA-256/512, RFC 5802/7677 as Kafka's ScramSaslServer; :mod:`scramp`
derives the credentials). Both check against the salted SCRAM credential store:
PLAIN re-derives the stored key from the password with the stored salt and
iterations, so no password is ever kept.

:class:`Session` is what a connection knows about its client: listener,
principal and the SASL state. On a SASL listener it gates the connection
until authentication completes: only ApiVersions, SaslHandshake and
SaslAuthenticate pass, anything else closes the connection (Kafka's
behaviour); after SaslHandshake v0 the next frames are raw SASL tokens.

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` above 0 a
session lasts that long (SaslAuthenticate v1+ tells the client, which then
re-authenticates on the same connection with SaslHandshake v1 and
SaslAuthenticate, same mechanism and same principal). A request arriving
after the session's end closes the connection (Kafka checks at receive time
too), unless it belongs to a re-authentication begun in time; a
re-authentication that fails (credentials removed meanwhile) closes it like a
failed login.
"""

import base64
import hashlib
import hmac
import os
import struct
import weakref

from scramp import ScramMechanism
from twisted.logger import Logger
from zope.interface import implementer

from pluglog.interfaces import IAuthenticator
from pluglog.logsafe import SafeLogger, Throttle
from pluglog.security.credentials import SCRAM_MECHANISMS

log = Logger()
#: user names come from the client: escaped in the failure line
_safe_log = SafeLogger()
#: one authentication-failure warning throttle per reactor (i.e. per broker)
_FAILURE_THROTTLES = weakref.WeakKeyDictionary()
ANONYMOUS = "User:ANONYMOUS"
#: ApiVersions, SaslHandshake, SaslAuthenticate: allowed before authentication
PRE_AUTH_APIS = frozenset((18, 17, 36))
_KEY = struct.Struct(">h")


class AuthenticationFailed(Exception):  # noqa: N818 - Kafka's name for it
    """The client's credentials were refused; the message names no password."""


def verify_password(store, user, password):
    """Check ``password`` against ``user``'s SCRAM credentials in ``store``:
    the stored key is derived again with the stored salt and iterations (any
    one mechanism matching is enough). Raises AuthenticationFailed naming the
    user, never the password. Used by PLAIN and by the web console's login."""
    creds = store.scram_credentials().get(user)
    if not creds:
        raise AuthenticationFailed(f"unknown user {user!r}")
    ok = False
    for mechanism, cred in creds.items():
        _salt, stored, _server, _n = ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=cred.iterations, salt=cred.salt
        )
        ok = ok or hmac.compare_digest(stored, cred.stored_key)
    if not ok:
        raise AuthenticationFailed(f"invalid credentials for user {user!r}")


class _PlainExchange:
    complete = False
    username = None

    def __init__(self, store):
        self.store = store

    def step(self, token):
        parts = bytes(token).split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("malformed PLAIN token")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if authzid and authzid != user:
            raise AuthenticationFailed(f"user {user!r} may not act as {authzid!r}")
        verify_password(self.store, user, password)
        self.complete = True
        self.username = user
        return b""


def _attributes(text):
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise AuthenticationFailed(f"malformed SCRAM attribute {part[:20]!r}")
        out.setdefault(key, value)
    return out


class _ScramExchange:
    """The server side of RFC 5802 as Kafka's ScramSaslServer does it.

    Written out (not scramp's server) for one reason: Kafka only checks that
    the client-final nonce *ends with* the server's part, and librdkafka
    2.0.x (kcat 1.7 in Debian) sends client nonce + full nonce, which a
    strict RFC check refuses."""

    complete = False
    username = None

    def __init__(self, mechanism, store):
        self.mechanism = mechanism
        self.store = store
        self._digest = hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512
        self._stage = 0
        self._user = None

    def step(self, token):
        text = bytes(token).decode("utf-8", "replace")
        if self._stage == 0:
            self._stage = 1
            return self._client_first(text)
        if self._stage == 1:
            self._stage = 2
            return self._client_final(text)
        raise AuthenticationFailed("SCRAM exchange already finished")

    def _client_first(self, text):
        flag, sep, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or flag not in ("n", "y"):
            raise AuthenticationFailed("malformed SCRAM client-first message")
        attrs = _attributes(bare)
        if "n" not in attrs or not attrs.get("r"):
            raise AuthenticationFailed("SCRAM client-first message without user or nonce")
        # Kafka's SCRAM user names escape ',' and '=' (RFC 5802 saslname).
        user = attrs["n"].replace("=2C", ",").replace("=3D", "=")
        self._user = user
        if authzid and authzid[2:] != attrs["n"]:
            raise AuthenticationFailed(f"user {user!r} may not act as {authzid[2:]!r}")
        cred = self.store.scram_credentials().get(user, {}).get(self.mechanism)
        if cred is None:
            raise AuthenticationFailed(f"unknown user {user!r} for {self.mechanism}")
        self._cred = cred
        self._server_nonce = base64.b64encode(os.urandom(24)).decode().rstrip("=")
        self._first_bare = bare
        salt = base64.b64encode(cred.salt).decode()
        self._server_first = f"r={attrs['r']}{self._server_nonce},s={salt},i={cred.iterations}"
        return self._server_first.encode()

    def _client_final(self, text):
        without_proof, sep, proof = text.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed("SCRAM client-final message without proof")
        attrs = _attributes(without_proof)
        if not attrs.get("r", "").endswith(self._server_nonce):
            raise AuthenticationFailed(f"invalid nonce in SCRAM client-final of {self._user!r}")
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        cred = self._cred
        signature = hmac.new(cred.stored_key, auth_message, self._digest).digest()
        try:
            client_proof = base64.b64decode(proof, validate=True)
        except ValueError:
            raise AuthenticationFailed("SCRAM proof is not base64") from None
        if len(client_proof) != len(signature):
            raise AuthenticationFailed(f"invalid credentials for user {self._user!r}")
        client_key = bytes(a ^ b for a, b in zip(client_proof, signature, strict=True))
        if not hmac.compare_digest(self._digest(client_key).digest(), cred.stored_key):
            raise AuthenticationFailed(f"invalid credentials for user {self._user!r}")
        server_signature = hmac.new(cred.server_key, auth_message, self._digest).digest()
        self.complete = True
        self.username = self._user
        return b"v=" + base64.b64encode(server_signature)


@implementer(IAuthenticator)
class PlainAuthenticator:
    def mechanisms(self):
        return ["PLAIN"]

    def start(self, mechanism, store):
        return _PlainExchange(store)


@implementer(IAuthenticator)
class ScramAuthenticator:
    def mechanisms(self):
        return list(SCRAM_MECHANISMS)

    def start(self, mechanism, store):
        return _ScramExchange(mechanism, store)


def make_plain(config, reactor):
    return PlainAuthenticator()


def make_scram(config, reactor):
    return ScramAuthenticator()


class Session:
    """One connection's security state (see the module docstring)."""

    __slots__ = (
        "listener",
        "conn",
        "principal",
        "exchange",
        "mechanism",
        "raw",
        "security",
        "acl_cache",
        "failure_logged",
        "reauthenticating",
        "lifetime_ms",
    )

    def __init__(self, listener, conn, security):
        self.listener = listener
        self.conn = conn
        self.security = security
        self.principal = ANONYMOUS
        self.exchange = None
        self.mechanism = None
        self.raw = False
        #: authorization decisions of this connection (pluglog.server.authorization)
        self.acl_cache = {}
        self.failure_logged = False
        #: a SaslHandshake started a re-authentication of this session
        self.reauthenticating = False
        #: session lifetime granted by the last authentication (0: unlimited)
        self.lifetime_ms = 0

    @property
    def authenticated(self):
        return self.conn._gate is not self

    @property
    def authorizing(self):
        return self.security is not None and self.security.authorizer is not None

    def intercept(self, frame):
        """Called for every frame while unauthenticated; True when handled here."""
        if self.raw:
            self.authenticate(frame, raw=True)
            return True
        (api_key,) = _KEY.unpack_from(frame, 0)
        if api_key in PRE_AUTH_APIS:
            if self.authorizing:
                self.conn._handle_request(frame)
                return True
            return False
        self.conn._bad_input(
            f"request for api {api_key} before SASL authentication completed "
            f"on listener {self.listener.name}"
        )
        return True

    def authenticate(self, token, raw=False):
        """Run one SASL step; returns the challenge or raises AuthenticationFailed."""
        if self.exchange is None:
            raise AuthenticationFailed("SaslAuthenticate before SaslHandshake")
        try:
            challenge = self.exchange.step(token)
        except AuthenticationFailed as exc:
            self.fail(exc)
            if raw:
                return None
            raise
        if self.exchange.complete:
            principal = "User:" + self.exchange.username
            self.exchange = None
            if self.reauthenticating and principal != self.principal:
                exc = AuthenticationFailed(
                    f"re-authentication as {principal} on a connection of {self.principal} "
                    "(principals cannot change)"
                )
                self.fail(exc)
                raise exc
            self.principal = principal
            self.raw = False
            self.conn._gate = _Authorizing(self) if self.authorizing else None
            self._start_lifetime()
            log.info(
                "{peer} {how} as {principal} ({mechanism}) on {listener}",
                peer=self.conn.peer,
                how="re-authenticated" if self.reauthenticating else "authenticated",
                principal=self.principal,
                mechanism=self.mechanism,
                listener=self.listener.name,
            )
            self.reauthenticating = False
        if raw:
            self.conn._write([challenge])
        return challenge

    def _start_lifetime(self):
        # The session ends connections.max.reauth.ms from now (KIP-368); the
        # connection checks its end at each request it receives.
        broker = self.conn.broker
        self.lifetime_ms = broker.config.connections_max_reauth_ms
        if self.lifetime_ms > 0:
            self.conn.auth_expires = broker.reactor.seconds() + self.lifetime_ms / 1000.0

    def begin_reauthentication(self, mechanism, exchange):
        """A SaslHandshake on an authenticated connection (KIP-368).

        Begun in time, it may finish after the session's end: its answers
        queue behind the connection's earlier ones (a parked Fetch), and
        Kafka does not expire a session while it re-authenticates. The
        client gets one more lifetime to finish it."""
        self.reauthenticating = True
        self.mechanism = mechanism
        self.exchange = exchange
        self._start_lifetime()

    def fail(self, exc):
        """Close after the current answer. Logged now (the client usually
        hangs up first), once per connection and throttled across them; the
        reason names the user, never the password."""
        self.exchange = None
        self.raw = False
        self.reauthenticating = False
        if not self.failure_logged:
            self.failure_logged = True
            # Counted per connection, like the log line (pluglog.metrics reads it).
            failures = getattr(self.security, "authentication_failures", None)
            if failures is not None:
                failures[self.listener.name] = failures.get(self.listener.name, 0) + 1
            reactor = self.conn.broker.reactor
            throttle = _FAILURE_THROTTLES.get(reactor)
            if throttle is None:
                throttle = _FAILURE_THROTTLES[reactor] = Throttle(
                    reactor, "SASL authentication failure warnings"
                )
            throttle(
                _safe_log.warn,
                "SASL authentication failed ({mechanism}) for {peer} on listener "
                "{listener}: {reason}",
                mechanism=self.mechanism,
                peer=self.conn.peer,
                listener=self.listener.name,
                reason=str(exc),
            )
        # KIP-306: the close waits connection.failed.authentication.delay.ms, so
        # the client reads the error (over TLS a close right behind the answer
        # can overtake it in some clients) and a password guesser is slowed.
        delay = self.conn.broker.config.connection_failed_authentication_delay_ms / 1000.0
        self.conn.broker.reactor.callLater(delay, self._close)

    def _close(self):
        if not self.conn._closing:
            self.conn._bad_input(None)  # None: already logged


class _Authorizing:
    """The gate of an authenticated connection on a broker with an authorizer:
    every request skips the produce fast lane and goes through the checks."""

    __slots__ = ("conn",)

    def __init__(self, session):
        self.conn = session.conn

    def intercept(self, frame):
        self.conn._handle_request(frame)
        return True
