"""The hot-path side of the metrics: plain counters a connection bumps per request.

:class:`RequestMetrics` is what :mod:`pluglog.server` holds (one per broker,
passed down by the service; ``None`` when ``metrics.enabled`` is false). It
keeps per-API request latency histograms, error counts by (API, error code),
bytes sent to consumers per topic, throttle time and the listeners whose
connections are counted on scrape. :mod:`pluglog.metrics.traffic` turns
them into Prometheus families when ``/metrics`` is read.

Why plain ints and not ``prometheus_client`` children: everything here runs on
the reactor thread, and a ``Counter`` child's ``inc`` takes a lock and costs
about 1 µs, a ``Histogram.observe`` about 2 µs (measured on the development
machine); the produce fast lane answers a request in a few tens of µs of
CPU. An :class:`ApiStats` is bound once per API key (a list indexed by key,
no label lookup per request), and its ``observe`` *is* a ``list.append``
of the elapsed seconds (a float): a C call, no Python frame, no bucket search per
request. :meth:`ApiStats.fold` sorts what was appended and adds it to the
buckets in bulk, on each scrape and once a second (the service's timer, so
the array stays small without a scraper). bench/metrics_instructions.py
counts what this costs per message in the paper tests.

Counting is per request or per batch, never per record: records and bytes in
are counted by :class:`~pluglog.broker.partition.Partition` per appended batch
(read on scrape), bytes out here per fetch response partition. The error
codes of other answers are found along the paths the API's schema says can
hold an ``error_code`` (:func:`_error_plan`), not by walking every value.
"""

from bisect import bisect_right

from pluglog.protocol import api_keys
from pluglog.protocol.apis import APIS

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
    """One API's request latency histogram (arrival to answer written).

    ``observe(elapsed_s)`` appends to ``pending``; :meth:`fold` moves the
    pending samples into ``buckets`` and ``sum_s`` (sorted in place, then
    one ``bisect`` per bound: C loops, not one bucket search per request)."""

    __slots__ = ("api_key", "buckets", "sum_s", "pending", "observe")

    def __init__(self, api_key):
        self.api_key = api_key
        self.buckets = [0] * (len(LATENCY_BOUNDS_S) + 1)  # the last one is +Inf
        self.sum_s = 0.0
        self.pending = []
        self.observe = self.pending.append

    def fold(self):
        """Add the pending samples to the buckets (in place: ``observe``
        stays bound to the same array)."""
        ordered = self.pending
        if not ordered:
            return
        ordered.sort()
        buckets = self.buckets
        below = 0
        for i, bound in enumerate(LATENCY_BOUNDS_S):
            upto = bisect_right(ordered, bound)  # Prometheus' le: elapsed <= bound
            buckets[i] += upto - below
            below = upto
        buckets[-1] += len(ordered) - below
        self.sum_s += sum(ordered)
        ordered.clear()

    @property
    def count(self):
        return sum(self.buckets) + len(self.pending)


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

    def fold(self):
        """Fold every API's pending latency samples into its buckets."""
        for stats in self.apis:
            if stats.pending:
                stats.fold()

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
        elif body.__class__ is dict:
            plan = _PLANS.get(api_key, _UNPLANNED)
            if plan is _UNPLANNED:
                plan = _PLANS[api_key] = _plan_for(api_key)
            if plan is not None:
                _count_errors(self, api_key, body, plan)
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


#: api key -> its error plan (None: the answer has no error_code anywhere)
_PLANS = {}
_UNPLANNED = object()


def _plan_for(api_key):
    api = APIS.get(api_key)
    return None if api is None else _error_plan(api.response)


def _error_plan(fields):
    """``(has_error_code, ((name, is_array, plan), ...))`` for ``fields``:
    where an ``error_code`` can be, from the schema; None if nowhere."""
    here = any(field.name == "error_code" for field in fields)
    nested = []
    for field in fields:
        if field.is_struct_array:
            sub = _error_plan(field.type)
        elif field.is_struct:
            sub = _error_plan(field.type.fields)
        else:
            continue
        if sub is not None:
            nested.append((field.name, field.is_struct_array, sub))
    if not here and not nested:
        return None
    return here, tuple(nested)


def _count_errors(metrics, api_key, node, plan):
    """Count every non-zero ``error_code`` of ``node`` along ``plan``."""
    here, nested = plan
    if here:
        code = node.get("error_code")
        if code:
            metrics.error(api_key, code)
    for name, is_array, sub in nested:
        value = node.get(name)
        if not value:
            continue
        if is_array:
            for item in value:
                if item.__class__ is dict:
                    _count_errors(metrics, api_key, item, sub)
        elif value.__class__ is dict:
            _count_errors(metrics, api_key, value, sub)
