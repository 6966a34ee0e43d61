"""SaslHandshake (17) and SaslAuthenticate (36): KIP-152 authentication and
KIP-368 re-authentication.

The connection's :class:`pluglog.security.sasl.Session` holds the state;
these handlers pick the mechanism and run its steps. A wrong password or an
unknown user gets SASL_AUTHENTICATION_FAILED and the connection is closed
right after the answer (Kafka's behaviour), logged once without the password.
The SaslAuthenticate (v1+) that completes a login carries the session's
lifetime (``connections.max.reauth.ms``, 0 for none). On an authenticated
connection SaslHandshake v1 starts a re-authentication with the session's
mechanism (another one, or v0's raw tokens, is refused and the connection
closed, as Kafka does); meanwhile the connection keeps serving requests.
"""

from pluglog import protocol as codec
from pluglog.errors import (
    ILLEGAL_SASL_STATE,
    NONE,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
)
from pluglog.security.sasl import AuthenticationFailed


def _sasl_session(ctx):
    session = ctx.session
    if session is None or not session.listener.sasl:
        return None
    return session


def handle_sasl_handshake(ctx, request):
    session = _sasl_session(ctx)
    security = getattr(ctx.broker, "security", None)
    offered = list(security.mechanisms) if security is not None else []
    if session is None or session.exchange is not None:
        return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": offered}
    mechanism = request["mechanism"]
    authenticator = security.authenticators.get(mechanism)
    if session.authenticated:
        return _reauthenticate(ctx, session, mechanism, authenticator, offered)
    if authenticator is None:
        return {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": offered}
    session.mechanism = mechanism
    session.exchange = authenticator.start(mechanism, security.store)
    # v0: the SASL tokens follow as bare size-prefixed frames (no Kafka header).
    session.raw = ctx.version == 0
    return {"error_code": NONE, "mechanisms": offered}


def _reauthenticate(ctx, session, mechanism, authenticator, offered):
    """KIP-368: a SaslHandshake (v1+) on an authenticated connection."""
    if ctx.version == 0 or mechanism != session.mechanism or authenticator is None:
        session.fail(
            AuthenticationFailed(
                f"re-authentication with {mechanism!r} (SaslHandshake v{ctx.version}) on a "
                f"connection authenticated with {session.mechanism!r}"
            )
        )
        return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": offered}
    session.begin_reauthentication(
        mechanism, authenticator.start(mechanism, ctx.broker.security.store)
    )
    return {"error_code": NONE, "mechanisms": offered}


def handle_sasl_authenticate(ctx, request):
    session = _sasl_session(ctx)
    if session is None or session.exchange is None:
        return {
            "error_code": ILLEGAL_SASL_STATE,
            "error_message": "SaslAuthenticate without a successful SaslHandshake",
            "auth_bytes": b"",
        }
    try:
        challenge = session.authenticate(request["auth_bytes"])
    except AuthenticationFailed as exc:
        return {
            "error_code": SASL_AUTHENTICATION_FAILED,
            "error_message": f"Authentication failed: {exc}",
            "auth_bytes": b"",
        }
    # The step that completed the login (exchange cleared) carries its lifetime.
    lifetime = session.lifetime_ms if session.exchange is None else 0
    return {
        "error_code": NONE,
        "error_message": None,
        "auth_bytes": challenge,
        "session_lifetime_ms": lifetime,
    }


HANDLERS = {
    codec.SASL_HANDSHAKE: handle_sasl_handshake,
    36: handle_sasl_authenticate,
}
