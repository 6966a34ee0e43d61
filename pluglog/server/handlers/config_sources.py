"""What DescribeConfigs reports: each config's value, Kafka's ConfigSource and
its synonyms, for a broker and for a topic.

Kafka's ConfigSource ids (DescribeConfigsResponse.ConfigSource, carried from
DescribeConfigs v1; v0 has only IsDefault): 1 DYNAMIC_TOPIC_CONFIG (a topic
override), 4 STATIC_BROKER_CONFIG (set in the broker's config file or with
``--set``, or by the ``twistd pluglog`` option standing for the key:
``--listen``, ``--advertised-listener``, ``--data-dir``, ``--broker-id``,
``--retention``), 5 DEFAULT_CONFIG (not set: the built-in default, or what
the broker derived, like the advertised address of a broker given no
``--advertised-listener``, as Kafka reports an unset
``advertised.listeners``). A topic config without an override inherits the
broker's value, and its source with it. ``listeners`` and ``advertised.listeners`` are given
in Kafka's form (``PLAINTEXT://host:port``), not as the Twisted strport.
"""

from pluglog.addresses import listen_address
from pluglog.config import (
    BROKER_KEYS,
    SENSITIVE_KEYS,
    TOPIC_KEYS,
    BrokerConfig,
    TopicConfig,
)

SOURCE_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

_DEFAULTS = BrokerConfig()
_TOPIC_DEFAULTS = TopicConfig()


def _text(value):
    if isinstance(value, bool):
        return str(value).lower()
    if value == "":
        return None  # Kafka reports an unset string config (broker.rack) as null
    return str(value)


def _host(host):
    return f"[{host}]" if ":" in host else host


def strport_address(strport):
    """``(interface, port)`` of a ``tcp:PORT[:interface=IP]`` strport; the
    interface is ``0.0.0.0`` when none is given (Twisted listens on all)."""
    interface, port = listen_address(strport)
    return interface or "0.0.0.0", port


def kafka_listeners(broker):
    """``(listeners, advertised.listeners)`` in Kafka's ``PLAINTEXT://`` form
    (every named listener when ``listeners`` is set)."""
    named = getattr(getattr(broker, "security", None), "listeners", None)
    if named:
        endpoints = getattr(broker, "listener_endpoints", {})
        bound, advertised = [], []
        for item in named:
            host, port = endpoints.get(item.name, (item.advertised_host or item.host, item.port))
            # Port 0 binds a free port: report the one the service got.
            bound.append(f"{item.name}://{_host(item.host)}:{item.port or port}")
            advertised.append(f"{item.name}://{_host(host)}:{port}")
        return ",".join(bound), ",".join(advertised)
    interface, port = strport_address(broker.config.listen)
    # tcp:0 binds a free port: report the one the service got.
    port = port or getattr(broker, "bound_port", 0) or broker.advertised[1]
    host, adv_port = broker.advertised
    return (
        f"PLAINTEXT://{_host(interface)}:{port}",
        f"PLAINTEXT://{_host(host)}:{adv_port}",
    )


def _source(config, key):
    # What was set at start-up, whatever its value (a config file key, --set,
    # or the twistd option standing for it); never what the broker computed
    # itself (the advertised address it derived, a generated cluster id).
    return SOURCE_STATIC_BROKER if key in config.explicit_keys else SOURCE_DEFAULT


def broker_configs(broker):
    """``{key: (value, source, default value)}`` of the broker's configs."""
    config = broker.config
    out = {}
    for key, (attr, _parse) in BROKER_KEYS.items():
        value, default = getattr(config, attr), getattr(_DEFAULTS, attr)
        text = None if key in SENSITIVE_KEYS else _text(value)  # passwords: null, as Kafka
        out[key] = (text, _source(config, key), _text(default))
    for attr, _parse, _default, key in TOPIC_KEYS.values():
        value, default = getattr(config.topic_defaults, attr), getattr(_TOPIC_DEFAULTS, attr)
        out[key] = (_text(value), _source(config, key), _text(default))
    listeners, advertised = kafka_listeners(broker)
    out["listeners"] = (
        listeners,
        _source(config, "listeners"),
        "PLAINTEXT://0.0.0.0:9092",
    )
    out["advertised.listeners"] = (
        advertised,
        _source(config, "advertised.listeners"),
        None,  # Kafka's default is the listeners value
    )
    out["log.dirs"] = (
        ",".join(config.data_dirs),
        _source(config, "log.dirs"),
        _DEFAULTS.data_dir,
    )
    return out


def _synonyms(key, value, source, default):
    found = [{"name": key, "value": value, "source": source}]
    if source != SOURCE_DEFAULT:
        found.append({"name": key, "value": default, "source": SOURCE_DEFAULT})
    return found


def broker_entries(broker):
    """``{key: (value, source, synonyms)}`` for a BROKER resource."""
    return {
        key: (value, source, _synonyms(key, value, source, default))
        for key, (value, source, default) in broker_configs(broker).items()
    }


def topic_entries(broker, meta):
    """``{key: (value, source, synonyms)}`` for a TOPIC resource: overrides
    first, then the broker's value (static or default) it would inherit."""
    inherited = broker_configs(broker)
    effective = broker.config.topic_defaults.with_overrides(meta.configs).to_kafka()
    out = {}
    for key, value in effective.items():
        broker_key = TOPIC_KEYS[key][3]
        broker_value, broker_source, default = inherited[broker_key]
        synonyms = _synonyms(broker_key, broker_value, broker_source, default)
        if key in meta.configs:
            synonyms.insert(0, {"name": key, "value": value, "source": SOURCE_TOPIC})
            out[key] = (value, SOURCE_TOPIC, synonyms)
        else:
            out[key] = (value, broker_source, synonyms)
    return out
