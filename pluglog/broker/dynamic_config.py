"""Dynamic broker configs: what AlterConfigs / IncrementalAlterConfigs may change at run time.

Kafka lets a BROKER resource (this broker's id, or ``""`` for the cluster-wide
default) change a set of keys without a restart. pluglog's set, with
Kafka's names:

* the log cleaner: ``log.cleaner.threads``, ``log.cleaner.backoff.ms``,
  ``log.cleaner.io.max.bytes.per.second``, ``log.cleaner.dedupe.buffer.size``;
* the topic defaults by their broker names (``log.retention.ms``,
  ``log.retention.bytes``, ``log.segment.bytes``, ``log.roll.ms``,
  ``log.cleanup.policy``, ``log.cleaner.min.cleanable.ratio``,
  ``log.cleaner.delete.retention.ms``, ``log.cleaner.min.compaction.lag.ms``,
  ``log.cleaner.max.compaction.lag.ms``, ``compression.type``,
  ``message.max.bytes``, ...): every topic without its own override follows;
* the static client quota defaults ``quota.producer.default`` and
  ``quota.consumer.default`` (per-client quotas are AlterClientQuotas');
* ``num.replica.fetchers``: the replica manager moves each followed
  partition to the fetcher the new count gives it (Kafka resizes its
  fetcher pool the same way).

Everything else is read-only (INVALID_CONFIG naming the key). Overrides are
kept by the coordinator (``broker_configs()`` / ``alter_broker_configs()``;
the local coordinator's metadata file; ZooKeeper's ``/config/brokers/<id>``
over ``/config/brokers/<default>``, so a change reaches every broker through
the coordinator's ``broker_configs`` event, see :func:`follow`) and applied on
top of the static configuration at start and after every change: :func:`apply`
builds a new BrokerConfig, then re-derives every topic's effective config, the
storage's defaults and the quota table. Reactor thread only.
"""

from twisted.internet import defer

from pluglog.config import BROKER_KEYS, TOPIC_KEYS, parse_settings
from pluglog.errors import ConfigError, InvalidConfigError

CLEANER_KEYS = (
    "log.cleaner.threads",
    "log.cleaner.backoff.ms",
    "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.dedupe.buffer.size",
)
QUOTA_KEYS = ("quota.producer.default", "quota.consumer.default")
REPLICATION_KEYS = ("num.replica.fetchers",)
DYNAMIC_KEYS = frozenset(
    CLEANER_KEYS + QUOTA_KEYS + REPLICATION_KEYS + tuple(spec[3] for spec in TOPIC_KEYS.values())
) - {"min.insync.replicas", "unclean.leader.election.enable"}


def describe_values(broker):
    """``{key: str}`` of the dynamic keys' effective values (DescribeConfigs)."""
    config = broker.config
    values = {}
    for key in CLEANER_KEYS + QUOTA_KEYS + REPLICATION_KEYS + ("log.cleaner.enable",):
        value = getattr(config, BROKER_KEYS[key][0])
        values[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return values


def overrides(broker, name=None):
    """The overrides in effect (or, with ``name``, those of the BROKER
    resource ``name``: "" is the cluster-wide default, else a broker id)."""
    getter = getattr(broker.coordinator, "broker_configs", None)
    if getter is None:
        return {}
    return dict(getter() if name is None else getter(name))


def validate(changes):
    """Raise InvalidConfigError unless every key is dynamic and its value parses."""
    for key in changes:
        if key not in DYNAMIC_KEYS:
            raise InvalidConfigError(f"{key} cannot be changed at run time")
    try:
        parse_settings(changes)
    except ConfigError as exc:
        raise InvalidConfigError(str(exc)) from None


def apply(broker, values=None):
    """Rebuild ``broker.config`` from its static config plus the dynamic
    ``values`` (the coordinator's by default) and push it to every user."""
    if not hasattr(broker, "static_config"):
        broker.static_config = broker.config
    values = overrides(broker) if values is None else values
    config = parse_settings(values, broker.static_config)
    config = config.replace(
        advertised_port=broker.config.advertised_port,
        advertised_host=broker.config.advertised_host,
    )
    broker.config = config
    broker.dynamic_applied = dict(values)
    broker.storage.topic_defaults = config.topic_defaults  # ILogStorage.topic_defaults
    # Topics opened so far follow (none yet while the broker starts).
    topics = broker.coordinator.topics()
    for name in list(broker.topic_configs):
        if name in topics:
            broker._open_topic(topics[name])
    broker.quotas.update(broker.quotas.quotas, config)
    if getattr(broker, "replicas", None) is not None:
        broker.replicas.reconfigure(config)


def follow(broker):
    """Apply the overrides again whenever the coordinator says they changed
    (another broker of a ZooKeeper cluster altered them)."""

    def on_event(event, payload):
        if event == "broker_configs" and payload != getattr(broker, "dynamic_applied", None):
            apply(broker, payload)

    broker.coordinator.add_listener(on_event)


@defer.inlineCallbacks
def alter(broker, configs, validate_only, name=None):
    """Replace the dynamic overrides of BROKER resource ``name`` (None: this
    broker's) by ``configs`` ({key: str}); a Deferred."""
    validate(configs)
    if not hasattr(broker.coordinator, "alter_broker_configs"):
        raise InvalidConfigError(
            f"the {type(broker.coordinator).__name__} keeps no broker configs"
        )
    if validate_only:
        return
    if name is None:
        yield broker.coordinator.alter_broker_configs(configs)
    else:
        yield broker.coordinator.alter_broker_configs(configs, name)
    apply(broker)
