"""Request handlers, one module per API family, and the dispatch table.

A handler is ``handler(ctx, request) -> response dict | Deferred | NO_RESPONSE``
where ``request`` is the decoded body (snake_case Kafka field names) and the
response dict is encoded by :mod:`pluglog.protocol` in the request's version.
Handlers never touch sockets; errors a client can act on become Kafka error
codes in the response, per topic or partition where the API has them.
"""

from pluglog.errors import KafkaError

NO_RESPONSE = object()


class RequestContext:
    """What a handler knows about the request besides its body."""

    __slots__ = ("broker", "header", "peer", "version")

    def __init__(self, broker, header, peer):
        self.broker = broker
        self.header = header
        self.peer = peer
        self.version = header.api_version


def error_code(exc):
    """The Kafka error code for an exception raised while handling a request."""
    return exc.error_code if isinstance(exc, KafkaError) else -1


def _build_table():
    from pluglog.server.handlers import admin, core, fetch, produce

    table = {}
    for module in (core, produce, fetch, admin):
        table.update(module.HANDLERS)
    try:
        from pluglog.server.handlers import groups
    except ImportError:  # the group coordinator is optional while it is built
        groups = None
    if groups is not None:
        table.update(groups.HANDLERS)
    return table


HANDLERS = _build_table()
