"""Authorization decisions of one connection: may this principal do this
operation on this resource? Cached per connection until the ACLs change.

The server layer's own: the authorizer plugin (:mod:`pluglog.security.acls`
or a third-party one) decides, and this module asks it on behalf of a
request. The per-API checks (:mod:`pluglog.server.checks`,
:mod:`pluglog.server.api_checks`) and the handlers that report KIP-430
authorized operations build on it.
"""

from pluglog.security.acls import DESCRIBE, RESOURCE_OPERATIONS
from pluglog.security.listeners import peer_principal
from pluglog.server.handlers.common import CloseConnection


def allowed(ctx, operation, resource_type, name):
    session = ctx.session
    authorizer = ctx.broker.security.authorizer
    cache = session.acl_cache
    if "tls" not in cache and session.listener.tls and not session.listener.sasl:
        # SSL listener: the principal is the client certificate's subject
        # (mapped by ssl.principal.mapping.rules), as Kafka's; read once.
        _tls_principal(ctx, session)
    # The built-in authorizer bumps ``version`` on every ACL change; one
    # without it is asked every time.
    stamp = getattr(authorizer, "version", None)
    if stamp is None:
        host = ctx.peer.rpartition(":")[0]
        return authorizer.authorize(session.principal, host, operation, resource_type, name)
    if cache.get(None) != stamp:
        tls = cache.get("tls")
        cache.clear()
        cache[None] = stamp
        if tls is not None:
            cache["tls"] = tls
    key = (operation, resource_type, name)
    decision = cache.get(key)
    if decision is None:
        host = ctx.peer.rpartition(":")[0]
        decision = authorizer.authorize(session.principal, host, operation, resource_type, name)
        cache[key] = decision
    return decision


def _tls_principal(ctx, session):
    try:
        principal = peer_principal(session.conn.transport, ctx.broker.security.principal_rules)
    except ValueError as exc:
        # Kafka fails the authentication when no mapping rule applies.
        raise CloseConnection(str(exc)) from None
    session.principal = principal or session.principal
    session.acl_cache["tls"] = True


def authorized_operations(ctx, resource_type, name):
    """KIP-430's bit field (bit n = operation code n) of what the principal
    may do on a resource; every operation of the type when no authorizer is set."""
    security = getattr(ctx.broker, "security", None)
    authorizing = security is not None and security.authorizer is not None
    if authorizing and ctx.session is not None and not allowed(ctx, DESCRIBE, resource_type, name):
        # Kafka answers 0 to a principal that may not DESCRIBE the resource
        # (e.g. DescribeCluster, which it does not refuse).
        return 0
    bits = 0
    for operation in RESOURCE_OPERATIONS[resource_type]:
        if not authorizing or ctx.session is None or allowed(ctx, operation, resource_type, name):
            bits |= 1 << operation
    return bits
