"""Client configuration: Kafka's config names, defaults and validation.

Producer, Consumer and AdminClient take Kafka's client config keys as keyword
arguments, spelled with dots (``**{"linger.ms": 5}``) or underscores
(``linger_ms=5``). :func:`client_config` turns them into one dict keyed by
the dotted name, fills Kafka's defaults and refuses unknown keys and bad
values with a :class:`~pluglog.errors.ConfigError` naming key and value.
"""

from pluglog.errors import ConfigError

_COMMON = {
    "bootstrap.servers": "127.0.0.1:9092",
    "client.id": "pluglog",
    "request.timeout.ms": 30000,
    "retry.backoff.ms": 100,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "metadata.max.age.ms": 300000,
    "socket.connection.setup.timeout.ms": 10000,
}

PRODUCER = {
    **_COMMON,
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 16384,
    "buffer.memory": 33554432,
    "max.block.ms": 60000,
    "compression.type": "none",
    "enable.idempotence": True,
    "retries": 2147483647,
    "delivery.timeout.ms": 120000,
    "max.request.size": 1048576,
    "max.in.flight.requests.per.connection": 5,
    "partitioner": "murmur2",
    # Transactions: None is a producer without (Kafka's default).
    "transactional.id": None,
    "transaction.timeout.ms": 60000,
    "key.serializer": "bytes",
    "value.serializer": "bytes",
    # Confluent's key: the registry the "avro" serializer talks to.
    "schema.registry.url": None,
}

CONSUMER = {
    **_COMMON,
    "group.id": None,
    "group.instance.id": None,
    "auto.offset.reset": "latest",
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 5000,
    "fetch.min.bytes": 1,
    "fetch.max.wait.ms": 500,
    "fetch.max.bytes": 52428800,
    "max.partition.fetch.bytes": 1048576,
    "max.poll.records": 500,
    "max.poll.interval.ms": 300000,
    "session.timeout.ms": 45000,
    "heartbeat.interval.ms": 3000,
    "isolation.level": "read_uncommitted",
    "partition.assignment.strategy": "range",
    "check.crcs": True,
    "key.deserializer": "bytes",
    "value.deserializer": "bytes",
    "schema.registry.url": None,
}

ADMIN = dict(_COMMON)

_CHOICES = {
    "acks": {"all", "-1", "0", "1"},
    "compression.type": {"none", "gzip", "snappy", "lz4", "zstd"},
    "auto.offset.reset": {"earliest", "latest", "none"},
    "isolation.level": {"read_uncommitted", "read_committed"},
}


def _to_bool(key, value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigError(f"{key}={value!r}: expected true or false")


def _to_int(key, value):
    if isinstance(value, bool):
        raise ConfigError(f"{key}={value!r}: expected an integer")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}={value!r}: expected an integer") from None
    if number < 0:
        raise ConfigError(f"{key}={value!r}: must not be negative")
    return number


def client_config(defaults, given, **explicit):
    """Merge ``explicit`` and ``given`` (dots or underscores) over ``defaults``."""
    out = dict(defaults)
    merged = {}
    for source in (given, explicit):
        for raw_key, value in source.items():
            merged[raw_key.replace("_", ".")] = value
    for key, value in merged.items():
        if key not in defaults:
            raise ConfigError(
                f"unknown client config {key!r} (known: {', '.join(sorted(defaults))})"
            )
        default = defaults[key]
        if value is None:
            out[key] = default
            continue
        if isinstance(default, bool):
            value = _to_bool(key, value)
        elif isinstance(default, int) and key != "acks":
            value = _to_int(key, value)
        elif key == "acks":
            value = str(value)
            if value not in _CHOICES["acks"]:
                raise ConfigError(f"acks={value!r}: expected all, -1, 0 or 1")
        elif key in _CHOICES:
            value = str(value)
            if value not in _CHOICES[key]:
                raise ConfigError(
                    f"{key}={value!r}: expected one of {', '.join(sorted(_CHOICES[key]))}"
                )
        out[key] = value
    if "acks" in out:
        out["acks"] = {"all": -1, "-1": -1, "0": 0, "1": 1}[str(out["acks"])]
    servers = out["bootstrap.servers"]
    if isinstance(servers, str):
        servers = [s.strip() for s in servers.split(",") if s.strip()]
    servers = list(servers)
    if not servers:
        raise ConfigError("bootstrap.servers is empty")
    out["bootstrap.servers"] = servers
    return out


def ms(value):
    """Milliseconds to the reactor's seconds."""
    return value / 1000.0
