"""Client quotas: Kafka's entity model, windowed rates and throttle times.

Entities (Kafka's ``/config/users/<user>/clients/<client-id>`` tree): a quota
entity is a set of ``(entity type, name)`` pairs with the types ``user`` and
``client-id``; a ``None`` name is that type's default. An entity is written
here as a sorted tuple of pairs, e.g. ``(("client-id", "app"),)`` or
``(("client-id", None), ("user", "alice"))``. Keys (values are floats > 0):
``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per second) and
``request_percentage`` (percent of one request-handling thread, here the
reactor, per second).

Which quota applies to a request from user ``u`` and client id ``c`` is
Kafka's precedence: ``(u, c)``, ``(u, default client)``, ``(u)``,
``(default user, c)``, ``(default user, default client)``, ``(default
user)``, ``(c)``, ``(default client)``, then the broker's static default
(``quota.producer.default`` / ``quota.consumer.default``). Until
authentication exists every connection is the user ``ANONYMOUS`` (Kafka's
principal for an unauthenticated listener), so user quotas already work for
that name. Every client id (and user) matched through a default gets its own
rate, as in Kafka: the default is a per-client limit, not a shared one.

Rates are Kafka's ``Rate`` over a ``SampledStat``: ``quota.window.num``
samples of ``quota.window.size.seconds`` each; the rate is the sum of the
live samples over their elapsed time, padded to ``num - 1`` whole windows so
a fresh client is not throttled for its first request. When recording a
request takes the rate over the bound, the throttle time is Kafka's
``(rate - bound) / bound * window``, at most one window
(``quota.window.size.seconds``); the response carries it as
``throttle_time_ms`` and the connection stops reading for that long.

Threading: reactor thread only; time comes from the broker's clock.
"""

from collections import deque

from pluglog.coordination.state import (  # noqa: F401 - re-exported for the quota handlers
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    QUOTA_KEYS,
    REQUEST_PERCENTAGE,
)
from pluglog.errors import InvalidRequestError

ENTITY_TYPES = ("client-id", "user")
ANONYMOUS = "ANONYMOUS"
#: Kafka's Long.MAX_VALUE default of quota.producer.default / quota.consumer.default
UNLIMITED = 2**63 - 1


def make_entity(pairs):
    """Validate ``[(type, name or None)]`` and return the canonical entity."""
    types = [t for t, _ in pairs]
    if not pairs or len(set(types)) != len(types):
        raise InvalidRequestError(f"invalid quota entity {pairs!r}")
    for entity_type, name in pairs:
        if entity_type not in ENTITY_TYPES:
            raise InvalidRequestError(f"unsupported quota entity type {entity_type!r}")
        if name is not None and not name:
            raise InvalidRequestError(f"empty {entity_type} name (use null for the default)")
    return tuple(sorted(pairs))


def validate_value(key, value):
    if key not in QUOTA_KEYS:
        raise InvalidRequestError(f"unknown quota key {key!r}")
    if not value > 0:
        raise InvalidRequestError(f"{key}: {value} must be above 0")
    return float(value)


def _candidates(user, client_id):
    """Kafka's precedence: ``(entity, sensor key)`` from most to least specific."""
    u, c = ("user", user), ("client-id", client_id)
    du, dc = ("user", None), ("client-id", None)
    return (
        ((c, u), (user, client_id)),
        ((dc, u), (user, "")),
        ((u,), (user, "")),
        ((c, du), (user, client_id)),
        ((dc, du), (user, client_id)),
        ((du,), (user, "")),
        ((c,), ("", client_id)),
        ((dc,), ("", client_id)),
    )


class Rate:
    """Kafka's sampled Rate (per second) over ``samples`` windows of ``window_ms``."""

    __slots__ = ("samples", "window_ms", "_live")

    def __init__(self, samples, window_ms):
        self.samples = samples
        self.window_ms = window_ms
        self._live = deque()  # [start_ms, value]

    def record(self, value, now_ms):
        live = self._live
        if not live or now_ms - live[-1][0] >= self.window_ms:
            live.append([now_ms, 0.0])
        live[-1][1] += value
        self._purge(now_ms)

    def _purge(self, now_ms):
        live = self._live
        horizon = self.samples * self.window_ms
        while len(live) > 1 and now_ms - live[0][0] >= horizon:
            live.popleft()
        while len(live) > self.samples:
            live.popleft()

    def window_size_ms(self, now_ms):
        elapsed = now_ms - self._live[0][0] if self._live else 0
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms):
        """Per-second rate of the recorded values."""
        self._purge(now_ms)
        total = sum(value for _, value in self._live)
        return total * 1000.0 / self.window_size_ms(now_ms)


class ClientQuotas:
    """The broker's quota table and the rates of the clients it limits.

    ``quotas`` is ``{entity: {key: value}}`` as the coordinator stores it;
    :meth:`update` replaces it (AlterClientQuotas, start-up).
    """

    def __init__(self, config):
        self.config = config
        self.quotas = {}
        self._rates = {}  # (key, sensor) -> Rate
        self._cache = {}  # (key, user, client_id) -> (bound, sensor)
        #: any quota (or a static default) can apply; read per request, so a
        #: plain attribute (the produce fast lane is skipped while it is true)
        self.enabled = False
        self.update({})

    def update(self, quotas, config=None):
        self.quotas = {entity: dict(values) for entity, values in quotas.items() if values}
        if config is not None:
            self.config = config
        self._cache.clear()
        config = self.config
        self.enabled = bool(self.quotas) or (
            min(config.quota_producer_default, config.quota_consumer_default) < UNLIMITED
        )

    def quota_for(self, key, user, client_id):
        """``(bound, sensor key)`` for a client, or ``(None, None)`` if unlimited."""
        cached = self._cache.get((key, user, client_id))
        if cached is not None:
            return cached
        found = (None, None)
        for entity, sensor in _candidates(user, client_id):
            values = self.quotas.get(tuple(sorted(entity)))
            if values and key in values:
                found = (values[key], sensor)
                break
        else:
            static = {
                PRODUCER_BYTE_RATE: self.config.quota_producer_default,
                CONSUMER_BYTE_RATE: self.config.quota_consumer_default,
            }.get(key)
            if static is not None and static < UNLIMITED:
                found = (float(static), ("", client_id))
        self._cache[(key, user, client_id)] = found
        return found

    def record(self, key, user, client_id, value, now_ms):
        """Record ``value`` against the client's quota for ``key``; return the
        throttle time in ms (0 when within the quota or unlimited)."""
        bound, sensor = self.quota_for(key, user, client_id)
        if bound is None:
            return 0
        rate = self._rates.get((key, sensor))
        window_ms = self.config.quota_window_size_seconds * 1000
        if rate is None:
            rate = self._rates[(key, sensor)] = Rate(self.config.quota_window_num, window_ms)
        rate.record(value, now_ms)
        measured = rate.measure(now_ms)
        if measured <= bound:
            return 0
        throttle = (measured - bound) / bound * rate.window_size_ms(now_ms)
        return int(min(throttle, window_ms))

    def describe(self, components, strict):
        """``[(entity, values)]`` matching DescribeClientQuotas filter components
        ``[(entity_type, match_type, match)]`` (0 exact, 1 default, 2 any)."""
        out = []
        for entity, values in sorted(self.quotas.items(), key=lambda item: repr(item[0])):
            names = dict(entity)
            if strict and set(names) != {c[0] for c in components}:
                continue
            ok = True
            for entity_type, match_type, match in components:
                if entity_type not in names:
                    ok = False
                elif match_type == 0 and names[entity_type] != match:
                    ok = False
                elif match_type == 1 and names[entity_type] is not None:
                    ok = False
            if ok:
                out.append((entity, dict(values)))
        return out


def apply_ops(current, ops):
    """Return a copy of ``current`` ({key: value}) with AlterClientQuotas ops
    ``[(key, value, remove)]`` applied; raises InvalidRequestError."""
    values = dict(current)
    for key, value, remove in ops:
        if remove:
            if key not in QUOTA_KEYS:
                raise InvalidRequestError(f"unknown quota key {key!r}")
            values.pop(key, None)
        else:
            values[key] = validate_value(key, value)
    return values


def fetch_response_bytes(body):
    """Record bytes in a Fetch response body (what consumer_byte_rate counts)."""
    total = 0
    for topic in body.get("responses", ()):
        for part in topic["partitions"]:
            records = part.get("records")
            if records is not None:
                total += len(records)
    return total


def attach(broker):
    """Load the coordinator's quotas into ``broker.quotas`` and follow its
    ``client_quotas`` events (a coordinator without quotas leaves it empty)."""
    getter = getattr(broker.coordinator, "client_quotas", None)
    if getter is not None:
        broker.quotas.update(getter())

    def on_event(event, payload):
        if event == "client_quotas":
            broker.quotas.update(payload)

    add = getattr(broker.coordinator, "add_listener", None)
    if add is not None:
        add(on_event)
