"""The hot-path side of the metrics: plain counters a connection bumps per request.

:class:`RequestMetrics` is what :mod:`pluglog.server` holds (one per broker,
passed down by the service; ``None`` when ``metrics.enabled`` is false). It
keeps per-API request latency histograms, error counts by (API, error code),
bytes sent to consumers per topic, throttle time and the listeners whose
connections are counted on scrape. :mod:`pluglog.metrics.collectors` turns
them into Prometheus families when ``/metrics`` is read.

Why plain ints and not ``prometheus_client`` children: everything here runs on
the reactor thread, and a ``Counter`` child's ``inc`` takes a lock and costs
about 1 µs, a ``Histogram.observe`` about 2 µs (measured on the development
machine); the produce fast lane answers a request in a few tens of µs of
CPU. An :class:`ApiStats` is bound once per API key (a list indexed by key,
no label lookup per request) and its ``observe`` is a ``bisect`` into
precomputed nanosecond bounds and three integer additions (~0.2 µs). The
exposition, the registry and the families are prometheus_client's.

Counting is per request or per batch, never per record: records and bytes in
are counted by :class:`~pluglog.broker.partition.Partition` per appended batch
(read on scrape), bytes out here per fetch response partition.
"""

from bisect import bisect_left

from pluglog.protocol import api_keys

#: Request latency bucket bounds, seconds (a produce answer takes ~0.1 ms on
#: loopback, a long-polling fetch up to its MaxWaitMs).
LATENCY_BOUNDS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
_BOUNDS_NS = tuple(round(bound * 1e9) for bound in LATENCY_BOUNDS_S)
_MAX_API_KEY = 128
_PRODUCE = api_keys.PRODUCE
_FETCH = api_keys.FETCH


def _camel(name):
    return "".join(part.capitalize() for part in name.split("_"))


#: API key -> Kafka's request name (``Produce``, ``ApiVersions``, ...), the ``api`` label.
API_NAMES = {
    value: _camel(name)
    for name, value in vars(api_keys).items()
    if name.isupper() and isinstance(value, int)
}


class ApiStats:
    """One API's request latency histogram (arrival to answer written)."""

    __slots__ = ("api_key", "buckets", "sum_ns")

    def __init__(self, api_key):
        self.api_key = api_key
        self.buckets = [0] * (len(_BOUNDS_NS) + 1)  # the last one is +Inf
        self.sum_ns = 0

    def observe(self, elapsed_ns):
        self.buckets[bisect_left(_BOUNDS_NS, elapsed_ns)] += 1
        self.sum_ns += elapsed_ns

    @property
    def count(self):
        return sum(self.buckets)


class RequestMetrics:
    """A broker's request counters, bumped by the server on the reactor thread."""

    def __init__(self):
        #: ApiStats by API key: a list, so the per-request lookup is an index.
        self.apis = [ApiStats(key) for key in range(_MAX_API_KEY)]
        #: (api key, error code) -> responses (or partitions of one) with that error
        self.errors = {}
        #: topic -> bytes of records sent in consumer fetch responses
        self.bytes_out = {}
        #: api key -> [throttled responses, throttle time in ms]
        self.throttle = {}
        #: (listener name, ConnectionGuard) of every Kafka listener
        self.listeners = []

    def api(self, api_key):
        """The :class:`ApiStats` of ``api_key`` (an unknown key shares the last slot)."""
        if 0 <= api_key < _MAX_API_KEY:
            return self.apis[api_key]
        return self.apis[-1]

    def error(self, api_key, code):
        key = (api_key, code)
        self.errors[key] = self.errors.get(key, 0) + 1

    def throttled(self, api_key, throttle_ms):
        entry = self.throttle.get(api_key)
        if entry is None:
            entry = self.throttle[api_key] = [0, 0]
        entry[0] += 1
        entry[1] += throttle_ms

    def add_listener(self, name, guard):
        self.listeners.append((name, guard))

    def answered(self, api_key, request, body):
        """Count what a response dict says: its error codes and, for a
        consumer's Fetch, the record bytes per topic. Returns ``body``."""
        if api_key == _FETCH:
            if body.__class__ is dict:
                self._fetch(request, body)
        elif api_key == _PRODUCE:
            if body.__class__ is dict:
                for topic in body["responses"]:
                    for part in topic["partition_responses"]:
                        if part["error_code"]:
                            self.error(_PRODUCE, part["error_code"])
        elif isinstance(body, dict):
            _walk_errors(self, api_key, body)
        return body

    def answered_later(self, body, api_key, request):
        """:meth:`answered` as a Deferred's callback."""
        return self.answered(api_key, request, body)

    def _fetch(self, request, body):
        # Runs for every fetch a consumer or follower sends: indexing, no .get().
        if body["error_code"]:
            self.error(_FETCH, body["error_code"])
        consumer = request.get("replica_id", -1) < 0
        bytes_out = self.bytes_out
        for topic in body["responses"]:
            size = 0
            for part in topic["partitions"]:
                if part["error_code"]:
                    self.error(_FETCH, part["error_code"])
                    continue
                records = part["records"]
                if records:
                    try:
                        size += records.size  # a file range (the usual case)
                    except AttributeError:
                        size += len(records)
            if size and consumer:
                name = topic["topic"]
                bytes_out[name] = bytes_out.get(name, 0) + size


def _walk_errors(metrics, api_key, node):
    """Every non-zero ``error_code`` of a response dict, however nested."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "error_code":
                if value:
                    metrics.error(api_key, value)
            elif isinstance(value, dict | list):
                _walk_errors(metrics, api_key, value)
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, dict | list):
                _walk_errors(metrics, api_key, item)
