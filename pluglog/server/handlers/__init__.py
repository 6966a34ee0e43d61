"""Request handlers, one module per API family, and the dispatch table.

A handler is ``handler(ctx, request) -> response dict | Deferred | NO_RESPONSE``
where ``request`` is the decoded body (snake_case Kafka field names) and the
response dict is encoded by :mod:`pluglog.protocol` in the request's version.
Handlers never touch sockets; errors a client can act on become Kafka error
codes in the response, per topic or partition where the API has them.
"""

from pluglog.errors import KafkaError

NO_RESPONSE = object()


class CloseConnection(Exception):  # noqa: N818 - an instruction, not an error report
    """Raised by a handler when the only right answer is to drop the connection
    (e.g. a failed acks=0 produce: the client has no response slot)."""


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


def per_partition(broker, topics, answer, topic_key="name", partition_key="partition_index"):
    """Answer every requested partition of a topics/partitions request.

    ``answer(partition, want)`` gets the broker's Partition (``None`` if this
    broker has no such partition) and the request's partition entry, and
    returns the response entry; the result keeps the request's topic order.
    """
    out = []
    for topic in topics:
        name = topic[topic_key]
        out.append(
            {
                topic_key: name,
                "partitions": [
                    answer(broker.partitions.get((name, want[partition_key])), want)
                    for want in topic["partitions"]
                ],
            }
        )
    return out


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
