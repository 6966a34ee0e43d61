"""Request handlers, one module per API family, and the dispatch table.

A handler is ``handler(ctx, request) -> response dict | Deferred | NO_RESPONSE``
where ``request`` is the decoded body (snake_case Kafka field names) and the
response dict is encoded by :mod:`pluglog.protocol` in the request's version.
Handlers never touch sockets; errors a client can act on become Kafka error
codes in the response, per topic or partition where the API has them.

The table of handlers by api key is :data:`pluglog.server.handlers.table.HANDLERS`;
the pieces every handler shares are in :mod:`pluglog.server.handlers.common`
(re-exported here). This package imports nothing above ``pluglog.broker``,
``pluglog.group``, ``pluglog.coordination``, ``pluglog.security`` and
``pluglog.protocol``; the server's connection code imports it.
"""

from pluglog.server.handlers.common import (
    NO_RESPONSE,
    CloseConnection,
    RequestContext,
    error_code,
    leader_error,
    per_partition,
)

__all__ = [
    "NO_RESPONSE",
    "CloseConnection",
    "RequestContext",
    "error_code",
    "leader_error",
    "per_partition",
]
