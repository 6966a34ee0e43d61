"""The Kafka listener: connections, framing, dispatch, handlers, authorization.

Owns :class:`~pluglog.server.protocol.KafkaServerFactory` and its connections,
the produce fast lane, sendfile, throttling, the request handlers
(:mod:`pluglog.server.handlers`) and the per-API authorization checks
(:mod:`pluglog.server.authorization`, :mod:`pluglog.server.checks`,
:mod:`pluglog.server.api_checks`). May import metrics (its request
counters), broker, group, replication, coordination, security, protocol and
below; never web, service or tap.
"""
