"""The client side of a SASL login, without I/O (shared by every pluglog client).

:func:`exchange` is the whole KIP-152 login as a generator: it yields the
requests to send as ``(api_key, api_version, body)`` and is sent each decoded
answer: SaslHandshake v1 naming the mechanism, then SaslAuthenticate v1 with
the PLAIN message (``\\0user\\0password``) or the two SCRAM client messages
(:mod:`scramp` is the SCRAM client and checks the broker's signature). A
refused step raises :class:`MechanismError` or :class:`CredentialsError`
(both :class:`LoginError`). Its return value (``StopIteration.value``) is
the session lifetime the broker granted (KIP-368's ``session_lifetime_ms``,
0 for none): a long-lived caller logs in again on the same connection before
it ends.

The callers own only the I/O: :mod:`pluglog.cli.login` drives it
over a blocking socket for the CLI, :mod:`pluglog.security.interbroker` over a
Twisted connection for the replica fetchers.
"""

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class LoginError(Exception):
    """The broker refused a step of the login (its reason is the text)."""


class MechanismError(LoginError):
    """SaslHandshake failed: the broker does not offer the mechanism."""

    def __init__(self, mechanism, error_code, offered):
        self.mechanism, self.error_code, self.offered = mechanism, error_code, offered
        listed = ", ".join(offered or ()) or "none"
        super().__init__(f"the broker does not offer {mechanism} (it offers {listed})")


class CredentialsError(LoginError):
    """SaslAuthenticate failed: the broker refused the user's credentials."""

    def __init__(self, error_code, error_message):
        self.error_code, self.error_message = error_code, error_message
        super().__init__(error_message or f"error {error_code}")


def exchange(mechanism, user, password):
    """The login as a generator of ``(api_key, api_version, body)`` requests;
    returns the session lifetime in ms (0: unlimited)."""
    answer = yield SASL_HANDSHAKE, 1, {"mechanism": mechanism}
    if answer["error_code"]:
        raise MechanismError(mechanism, answer["error_code"], answer.get("mechanisms"))
    if mechanism == "PLAIN":
        _token, lifetime = yield from _authenticate(f"\0{user}\0{password}".encode())
        return lifetime
    from scramp import ScramClient

    scram = ScramClient([mechanism], user, password)
    server_first, _ = yield from _authenticate(scram.get_client_first().encode())
    scram.set_server_first(server_first.decode())
    server_final, lifetime = yield from _authenticate(scram.get_client_final().encode())
    scram.set_server_final(server_final.decode())  # checks the broker's signature
    return lifetime


def _authenticate(token):
    answer = yield SASL_AUTHENTICATE, 1, {"auth_bytes": token}
    if answer["error_code"]:
        raise CredentialsError(answer["error_code"], answer.get("error_message"))
    return bytes(answer["auth_bytes"]), answer.get("session_lifetime_ms", 0)


def run(steps, send):
    """Drive ``steps`` (an :func:`exchange`) with a blocking ``send(api_key,
    api_version, body) -> answer``."""
    request = next(steps)
    while True:
        try:
            request = steps.send(send(*request))
        except StopIteration:
            return
