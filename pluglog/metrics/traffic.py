"""Collector of the broker's traffic: records, bytes, requests, errors, connections.

Built on scrape from the plain counters the hot path keeps
(:class:`~pluglog.metrics.recorder.RequestMetrics`, each partition's
``messages_in``/``bytes_in``, the security setup's authentication failures
and the partitions' parked requests) into prometheus_client families.
docs/operations.rst ("Metrics") lists every name with its meaning.
"""

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from pluglog import errors
from pluglog.metrics.recorder import API_NAMES, LATENCY_BOUNDS_S

#: Kafka error code -> its name (the ``error`` label).
ERROR_NAMES = {
    value: name
    for name, value in vars(errors).items()
    if name.isupper() and isinstance(value, int) and not isinstance(value, bool)
}


def api_name(api_key):
    return API_NAMES.get(api_key, str(api_key))


def error_name(code):
    return ERROR_NAMES.get(code, str(code))


class TrafficCollector:
    """Families of :class:`RequestMetrics` and per-topic traffic; ``metrics``
    may be None (only the partition-side counters are then reported)."""

    def __init__(self, broker, metrics):
        self.broker = broker
        self.metrics = metrics

    def collect(self):
        yield from self._topics()
        metrics = self.metrics
        if metrics is not None:
            yield from self._requests(metrics)
            yield from self._connections(metrics)
        yield from self._purgatory()

    def _topics(self):
        messages = {}
        size = {}
        for (topic, _index), part in list(self.broker.partitions.items()):
            messages[topic] = messages.get(topic, 0) + part.messages_in
            size[topic] = size.get(topic, 0) + part.bytes_in
        messages_in = CounterMetricFamily(
            "pluglog_messages_in",
            "Records appended to the topic's partitions led here by producers "
            "(counted per batch; replication excluded).",
            labels=["topic"],
        )
        bytes_in = CounterMetricFamily(
            "pluglog_bytes_in",
            "Record batch bytes received from producers for the topic, as sent.",
            labels=["topic"],
        )
        for topic in sorted(messages):
            messages_in.add_metric([topic], messages[topic])
            bytes_in.add_metric([topic], size[topic])
        yield messages_in
        yield bytes_in
        bytes_out = CounterMetricFamily(
            "pluglog_bytes_out",
            "Record bytes sent to consumers in Fetch responses (replica fetches excluded).",
            labels=["topic"],
        )
        if self.metrics is not None:
            for topic, value in sorted(self.metrics.bytes_out.items()):
                bytes_out.add_metric([topic], value)
        yield bytes_out

    def _requests(self, metrics):
        requests = CounterMetricFamily(
            "pluglog_requests", "Requests answered (or acks=0 produces handled).", labels=["api"]
        )
        latency = HistogramMetricFamily(
            "pluglog_request_duration_seconds",
            "Time from a request's last byte read to its answer written to the socket.",
            labels=["api"],
        )
        bounds = [repr(float(b)) for b in LATENCY_BOUNDS_S] + ["+Inf"]
        metrics.fold()
        for stats in metrics.apis:
            total = stats.count
            if not total:
                continue
            name = api_name(stats.api_key)
            requests.add_metric([name], total)
            cumulative = []
            running = 0
            for bound, count in zip(bounds, stats.buckets):
                running += count
                cumulative.append((bound, running))
            latency.add_metric([name], cumulative, stats.sum_s)
        yield requests
        yield latency
        errors_ = CounterMetricFamily(
            "pluglog_request_errors",
            "Error codes in responses: per response, or per partition where the "
            "answer has one per partition (NONE is not counted).",
            labels=["api", "error"],
        )
        for (api_key, code), value in sorted(metrics.errors.items()):
            errors_.add_metric([api_name(api_key), error_name(code)], value)
        yield errors_
        throttled = CounterMetricFamily(
            "pluglog_throttled_responses",
            "Responses that carried a quota throttle time.",
            labels=["api"],
        )
        throttle_time = CounterMetricFamily(
            "pluglog_throttle_time",
            "Quota throttle time given to clients (the connection is muted as long).",
            labels=["api"],
            unit="seconds",
        )
        for api_key, (count, ms) in sorted(metrics.throttle.items()):
            throttled.add_metric([api_name(api_key)], count)
            throttle_time.add_metric([api_name(api_key)], ms / 1000.0)
        yield throttled
        yield throttle_time

    def _connections(self, metrics):
        connections = GaugeMetricFamily(
            "pluglog_connections", "Open client connections.", labels=["listener"]
        )
        queued = GaugeMetricFamily(
            "pluglog_request_queue_bytes",
            "Bytes reserved for requests being read (queued.max.request.bytes).",
            labels=["listener"],
        )
        for name, guard in metrics.listeners:
            connections.add_metric([name], len(guard.connections))
            queued.add_metric([name], guard.reserved)
        yield connections
        yield queued
        failures = CounterMetricFamily(
            "pluglog_authentication_failures",
            "Connections whose SASL authentication failed.",
            labels=["listener"],
        )
        security = getattr(self.broker, "security", None)
        for name, count in sorted(getattr(security, "authentication_failures", {}).items()):
            failures.add_metric([name], count)
        yield failures

    def _purgatory(self):
        fetches = set()
        produces = 0
        for part in list(self.broker.partitions.values()):
            fetches.update(part.parked_fetches)
            produces += part.parked_produces
        # Incremental fetches park on their session, not on each partition.
        fetches.update(self.broker.fetch_sessions.parked())
        purgatory = GaugeMetricFamily(
            "pluglog_purgatory_size",
            "Requests parked: fetches waiting for MinBytes (one per request), "
            "acks=all produces waiting for the followers (one per partition).",
            labels=["purgatory"],
        )
        purgatory.add_metric(["fetch"], len(fetches))
        purgatory.add_metric(["produce"], produces)
        yield purgatory
