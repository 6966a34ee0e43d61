"""Broker and topic configuration with Kafka's names, defaults and validation.

Topic-level keys keep their dotted Kafka names (``retention.ms``,
``segment.bytes``) so users' knowledge transfers; broker-level defaults for
them use Kafka's broker names (``log.retention.ms``, ``log.segment.bytes``).
Both :class:`TopicConfig` and :class:`BrokerConfig` are frozen: a change is a
new object, so a config can be shared between components without copying.
Every bad value raises :class:`pluglog.errors.ConfigError` naming key and value.
"""

import configparser
import dataclasses
from dataclasses import dataclass, field

from pluglog.errors import ConfigError

FSYNC_POLICIES = ("never", "interval", "always")


def split_host_port(value):
    """Parse ``host:port`` (IPv6 as ``[::1]:9092``) into ``(host, port)``.

    Raises ValueError with a message naming the value; callers turn it into
    their own kind of usage error."""
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected host:port, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"bad port in {value!r}") from None
    if not 0 < number < 65536:
        raise ValueError(f"port out of range in {value!r}")
    return host, number


def _parse_bool(key, value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{key}: expected true or false, got {value!r}")


def _int_parser(minimum=None, maximum=None):
    def parse(key, value):
        try:
            number = int(str(value).strip())
        except ValueError:
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
        if minimum is not None and number < minimum:
            raise ConfigError(f"{key}: {number} is below the minimum {minimum}")
        if maximum is not None and number > maximum:
            raise ConfigError(f"{key}: {number} is above the maximum {maximum}")
        return number

    return parse


def _choice_parser(*choices):
    def parse(key, value):
        text = str(value).strip()
        if text not in choices:
            raise ConfigError(f"{key}: {value!r} is not one of {', '.join(choices)}")
        return text

    return parse


def _cleanup_policy(key, value):
    parts = sorted({p.strip() for p in str(value).split(",") if p.strip()})
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ConfigError(f"{key}: {value!r} is not delete, compact or compact,delete")
    return ",".join(parts)


# Kafka's compression.type: ``producer`` keeps batches as sent; a codec
# name recompresses batches that arrive in another codec.
_compression_type = _choice_parser("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")


def _string(key, value):
    return str(value)


def _ratio(key, value):
    try:
        number = float(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key}: expected a number between 0 and 1, got {value!r}") from None
    if not 0.0 <= number <= 1.0:
        raise ConfigError(f"{key}: {number} is not between 0 and 1")
    return number


def _positive_rate(key, value):
    try:
        number = float(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key}: expected a number of bytes per second, got {value!r}") from None
    if not number > 0:
        raise ConfigError(f"{key}: {number} must be above 0")
    return number


def _ip_overrides(key, value):
    """Kafka's ``max.connections.per.ip.overrides``: ``host:count,host:count``."""
    out = []
    for item in str(value).split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host:
            raise ConfigError(f"{key}: expected host:count, got {item!r}")
        out.append((host.strip("[]"), _int_parser(0)(key, count)))
    return tuple(out)


_INT64_MAX = 2**63 - 1


def _throttled_replicas(key, value):
    """Kafka's ``*`` or ``partition:broker,...`` list (empty: none)."""
    text = str(value).strip()
    if text in ("", "*"):
        return text
    for item in text.split(","):
        partition, sep, broker = item.strip().partition(":")
        if not (sep and partition.isdigit() and broker.isdigit()):
            raise ConfigError(f"{key}: {value!r} is not '*' or partition:broker[,...]")
    return ",".join(item.strip() for item in text.split(","))


# Kafka topic config name -> (attribute, parser, default, broker-level key).
TOPIC_KEYS = {
    "segment.bytes": ("segment_bytes", _int_parser(14), 1073741824, "log.segment.bytes"),
    "segment.ms": ("segment_ms", _int_parser(1), 604800000, "log.roll.ms"),
    "segment.index.bytes": (
        "segment_index_bytes",
        _int_parser(8),
        10485760,
        "log.index.size.max.bytes",
    ),
    "index.interval.bytes": (
        "index_interval_bytes",
        _int_parser(0),
        4096,
        "log.index.interval.bytes",
    ),
    "retention.ms": ("retention_ms", _int_parser(-1), 604800000, "log.retention.ms"),
    "retention.bytes": ("retention_bytes", _int_parser(-1), -1, "log.retention.bytes"),
    "cleanup.policy": ("cleanup_policy", _cleanup_policy, "delete", "log.cleanup.policy"),
    "max.message.bytes": (
        "max_message_bytes",
        _int_parser(0),
        1048588,
        "message.max.bytes",
    ),
    "flush.messages": (
        "flush_messages",
        _int_parser(1),
        _INT64_MAX,
        "log.flush.interval.messages",
    ),
    "flush.ms": ("flush_ms", _int_parser(0), _INT64_MAX, "log.flush.interval.ms"),
    "file.delete.delay.ms": (
        "file_delete_delay_ms",
        _int_parser(0),
        60000,
        "log.segment.delete.delay.ms",
    ),
    "message.timestamp.type": (
        "message_timestamp_type",
        _choice_parser("CreateTime", "LogAppendTime"),
        "CreateTime",
        "log.message.timestamp.type",
    ),
    "min.insync.replicas": ("min_insync_replicas", _int_parser(1), 1, "min.insync.replicas"),
    "min.cleanable.dirty.ratio": (
        "min_cleanable_dirty_ratio",
        _ratio,
        0.5,
        "log.cleaner.min.cleanable.ratio",
    ),
    "min.compaction.lag.ms": (
        "min_compaction_lag_ms",
        _int_parser(0),
        0,
        "log.cleaner.min.compaction.lag.ms",
    ),
    "max.compaction.lag.ms": (
        "max_compaction_lag_ms",
        _int_parser(1),
        _INT64_MAX,
        "log.cleaner.max.compaction.lag.ms",
    ),
    "delete.retention.ms": (
        "delete_retention_ms",
        _int_parser(0),
        86400000,
        "log.cleaner.delete.retention.ms",
    ),
    "compression.type": (
        "compression_type",
        _compression_type,
        "producer",
        "compression.type",
    ),
    "unclean.leader.election.enable": (
        "unclean_leader_election_enable",
        _parse_bool,
        False,
        "unclean.leader.election.enable",
    ),
    "leader.replication.throttled.replicas": (
        "leader_replication_throttled_replicas",
        _throttled_replicas,
        "",
        "leader.replication.throttled.replicas",
    ),
    "follower.replication.throttled.replicas": (
        "follower_replication_throttled_replicas",
        _throttled_replicas,
        "",
        "follower.replication.throttled.replicas",
    ),
    # Confluent Server's names: refuse records without a registered schema id.
    "confluent.key.schema.validation": (
        "confluent_key_schema_validation",
        _parse_bool,
        False,
        "confluent.key.schema.validation",
    ),
    "confluent.value.schema.validation": (
        "confluent_value_schema_validation",
        _parse_bool,
        False,
        "confluent.value.schema.validation",
    ),
}

_ATTR_TO_KEY = {spec[0]: key for key, spec in TOPIC_KEYS.items()}


@dataclass(frozen=True)
class TopicConfig:
    """Effective configuration of one topic (defaults merged with overrides)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    max_message_bytes: int = 1048588
    flush_messages: int = _INT64_MAX
    flush_ms: int = _INT64_MAX
    file_delete_delay_ms: int = 60000
    message_timestamp_type: str = "CreateTime"
    min_insync_replicas: int = 1
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _INT64_MAX
    delete_retention_ms: int = 86400000
    compression_type: str = "producer"
    unclean_leader_election_enable: bool = False
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    confluent_key_schema_validation: bool = False
    confluent_value_schema_validation: bool = False

    def throttled(self, side, partition, broker):
        """True if ``broker``'s replica of ``partition`` is throttled on ``side``
        ("leader" or "follower"), per the *.replication.throttled.replicas lists."""
        text = getattr(self, f"{side}_replication_throttled_replicas")
        return text == "*" or f"{partition}:{broker}" in text.split(",")

    def with_overrides(self, overrides):
        """Return a copy with Kafka-named ``overrides`` ({key: str}) applied."""
        changes = {}
        for key, value in overrides.items():
            spec = TOPIC_KEYS.get(key)
            if spec is None:
                raise ConfigError(f"unknown topic config {key!r}")
            attr, parse, _default, _broker_key = spec
            changes[attr] = parse(key, value)
        return dataclasses.replace(self, **changes)

    def to_kafka(self):
        """Return ``{kafka key: str value}`` for DescribeConfigs."""
        out = {}
        for key, (attr, _parse, _default, _bkey) in TOPIC_KEYS.items():
            value = getattr(self, attr)
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


def validate_topic_overrides(overrides):
    """Raise ConfigError unless every ``{key: value}`` is a valid topic config."""
    TopicConfig().with_overrides(overrides)
    return {k: str(v) for k, v in overrides.items()}


# Broker-level keys that are not topic defaults: key -> (attribute, parser).
BROKER_KEYS = {
    "broker.id": ("broker_id", _int_parser(0)),
    "num.partitions": ("num_partitions", _int_parser(1, 100000)),
    "default.replication.factor": ("default_replication_factor", _int_parser(1)),
    "auto.create.topics.enable": ("auto_create_topics_enable", _parse_bool),
    "delete.topic.enable": ("delete_topic_enable", _parse_bool),
    "socket.request.max.bytes": ("socket_request_max_bytes", _int_parser(1024)),
    "log.retention.check.interval.ms": (
        "retention_check_interval_ms",
        _int_parser(1),
    ),
    "log.flush.scheduler.interval.ms": ("flush_scheduler_interval_ms", _int_parser(1)),
    "log.flush.offset.checkpoint.interval.ms": (
        "checkpoint_interval_ms",
        _int_parser(1),
    ),
    "group.initial.rebalance.delay.ms": (
        "group_initial_rebalance_delay_ms",
        _int_parser(0),
    ),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", _int_parser(0)),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", _int_parser(0)),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", _int_parser(1)),
    "offsets.retention.minutes": ("offsets_retention_minutes", _int_parser(1)),
    "cluster.id": ("cluster_id", _string),
    "fetch.max.bytes": ("fetch_max_bytes", _int_parser(0)),
    # Cluster (ZooKeeper coordinator and replication), Kafka's names and defaults.
    "zookeeper.connect": ("zookeeper_connect", _string),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", _int_parser(1000)),
    "zookeeper.connection.timeout.ms": ("zookeeper_connection_timeout_ms", _int_parser(1)),
    "broker.rack": ("broker_rack", _string),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", _int_parser(1)),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", _int_parser(0)),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", _int_parser(1)),
    "replica.fetch.backoff.ms": ("replica_fetch_backoff_ms", _int_parser(0)),
    "replica.socket.timeout.ms": ("replica_socket_timeout_ms", _int_parser(1)),
    "controlled.shutdown.enable": ("controlled_shutdown_enable", _parse_bool),
    "controlled.shutdown.timeout.ms": ("controlled_shutdown_timeout_ms", _int_parser(0)),
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", _parse_bool),
    "leader.imbalance.check.interval.seconds": (
        "leader_imbalance_check_interval_seconds",
        _int_parser(1),
    ),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", _int_parser(1)),
    "leader.replication.throttled.rate": ("leader_replication_throttled_rate", _int_parser(1)),
    "follower.replication.throttled.rate": (
        "follower_replication_throttled_rate",
        _int_parser(1),
    ),
    "replication.quota.window.num": ("replication_quota_window_num", _int_parser(2)),
    "replication.quota.window.size.seconds": (
        "replication_quota_window_size_seconds",
        _int_parser(1),
    ),
    "offsets.commit.timeout.ms": ("offsets_commit_timeout_ms", _int_parser(1)),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", _int_parser(14)),
    # The log cleaner (compaction), Kafka's names and defaults.
    "log.cleaner.enable": ("log_cleaner_enable", _parse_bool),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", _int_parser(0)),
    "log.cleaner.threads": ("log_cleaner_threads", _int_parser(0, 64)),
    "log.cleaner.io.max.bytes.per.second": (
        "log_cleaner_io_max_bytes_per_second",
        _positive_rate,
    ),
    "log.cleaner.dedupe.buffer.size": ("log_cleaner_dedupe_buffer_size", _int_parser(1024)),
    # Client quotas: static per-client-id defaults and the rate windows.
    "quota.producer.default": ("quota_producer_default", _int_parser(1)),
    "quota.consumer.default": ("quota_consumer_default", _int_parser(1)),
    "quota.window.num": ("quota_window_num", _int_parser(1)),
    "quota.window.size.seconds": ("quota_window_size_seconds", _int_parser(1)),
    # Resource limits (docs/configuration.rst, "Limits").
    "max.partitions.per.request": ("max_partitions_per_request", _int_parser(1)),
    "max.broker.partitions": ("max_broker_partitions", _int_parser(1)),
    "max.connections": ("max_connections", _int_parser(1)),
    "max.connections.per.ip": ("max_connections_per_ip", _int_parser(0)),
    "max.connections.per.ip.overrides": ("max_connections_per_ip_overrides", _ip_overrides),
    "connections.max.idle.ms": ("connections_max_idle_ms", _int_parser(-1)),
    "request.read.timeout.ms": ("request_read_timeout_ms", _int_parser(-1)),
    "queued.max.request.bytes": ("queued_max_request_bytes", _int_parser(-1)),
    "metadata.max.topics.per.request": ("metadata_max_topics_per_request", _int_parser(1)),
    "log.max.open.segments": ("log_max_open_segments", _int_parser(0)),
    "metrics.enabled": ("metrics_enabled", _parse_bool),
    # Security (pluglog.security parses and checks the listener keys at start-up).
    "listeners": ("listeners", _string),
    "advertised.listeners": ("advertised_listeners", _string),
    "listener.security.protocol.map": ("listener_security_protocol_map", _string),
    "sasl.enabled.mechanisms": ("sasl_enabled_mechanisms", _string),
    "ssl.keystore.location": ("ssl_keystore_location", _string),
    "ssl.key.location": ("ssl_key_location", _string),
    "ssl.truststore.location": ("ssl_truststore_location", _string),
    "ssl.client.auth": ("ssl_client_auth", _choice_parser("none", "requested", "required")),
    "ssl.principal.mapping.rules": ("ssl_principal_mapping_rules", _string),
    "super.users": ("super_users", _string),
    "authorizer.class.name": ("authorizer_class_name", _string),
    "allow.everyone.if.no.acl.found": ("allow_everyone_if_no_acl_found", _parse_bool),
    "connection.failed.authentication.delay.ms": (
        "connection_failed_authentication_delay_ms",
        _int_parser(0),
    ),
    # Inter-broker traffic (pluglog.security.interbroker checks them at start-up).
    "inter.broker.listener.name": ("inter_broker_listener_name", _string),
    "security.inter.broker.protocol": (
        "security_inter_broker_protocol",
        _choice_parser("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    ),
    "sasl.mechanism.inter.broker.protocol": (
        "sasl_mechanism_inter_broker_protocol",
        _choice_parser("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    ),
    "inter.broker.sasl.username": ("inter_broker_sasl_username", _string),
    "inter.broker.sasl.password": ("inter_broker_sasl_password", _string),
}

#: Keys DescribeConfigs reports as sensitive, with a null value (as Kafka does).
SENSITIVE_KEYS = frozenset({"inter.broker.sasl.password"})


@dataclass(frozen=True)
class BrokerConfig:
    """Everything the broker process is configured with."""

    broker_id: int = 0
    listen: str = "tcp:9092"
    advertised_host: str = "localhost"
    advertised_port: int = 9092
    data_dir: str = "./data"
    storage: str = "segments"
    coordinator: str = "local"
    fsync: str = "interval"
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    socket_request_max_bytes: int = 104857600
    retention_check_interval_ms: int = 300000
    flush_scheduler_interval_ms: int = 1000
    checkpoint_interval_ms: int = 60000
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    offsets_topic_num_partitions: int = 50
    offsets_retention_minutes: int = 10080
    cluster_id: str = ""
    fetch_max_bytes: int = 57671680
    zookeeper_connect: str = ""
    zookeeper_session_timeout_ms: int = 18000
    #: How long start-up retries an unreachable ZooKeeper; 0 means the session timeout.
    zookeeper_connection_timeout_ms: int = 0
    broker_rack: str = ""
    replica_lag_time_max_ms: int = 30000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1048576
    replica_fetch_backoff_ms: int = 1000
    replica_socket_timeout_ms: int = 30000
    controlled_shutdown_enable: bool = True
    controlled_shutdown_timeout_ms: int = 30000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    #: Kafka's default is 3; creation caps it at the number of live brokers so a
    #: single broker (and the local coordinator) still gets its offsets topic.
    offsets_topic_replication_factor: int = 3
    #: Bytes/s for throttled replicas (Kafka's reassignment throttle); unlimited by default.
    leader_replication_throttled_rate: int = _INT64_MAX
    follower_replication_throttled_rate: int = _INT64_MAX
    replication_quota_window_num: int = 11
    replication_quota_window_size_seconds: int = 1
    #: How long a __consumer_offsets write waits for min.insync.replicas.
    offsets_commit_timeout_ms: int = 5000
    offsets_topic_segment_bytes: int = 104857600
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15000
    log_cleaner_threads: int = 1
    #: Kafka's default is Double.MAX_VALUE: no limit.
    log_cleaner_io_max_bytes_per_second: float = float("inf")
    log_cleaner_dedupe_buffer_size: int = 134217728
    quota_producer_default: int = _INT64_MAX
    quota_consumer_default: int = _INT64_MAX
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    #: Kafka's controller refuses more than 10,000 partitions per request.
    max_partitions_per_request: int = 10000
    #: KIP-578's name; every partition costs memory, and file descriptors while active.
    max_broker_partitions: int = 50000
    max_connections: int = 2147483647
    max_connections_per_ip: int = 2147483647
    max_connections_per_ip_overrides: tuple = ()
    connections_max_idle_ms: int = 600000
    #: A request whose bytes do not all arrive within this time closes the connection.
    request_read_timeout_ms: int = 30000
    #: Kafka's default is -1 (unbounded); pluglog bounds partial requests at 256 MiB.
    queued_max_request_bytes: int = 268435456
    metadata_max_topics_per_request: int = 10000
    #: Segments holding file descriptors at once (LRU); 0 sizes it from the fd limit.
    log_max_open_segments: int = 0
    #: Request metrics on the hot path and ``/metrics`` on the --http listener.
    metrics_enabled: bool = True
    #: Strport of the HTTP listener (schema registry, plugin resources); off if empty.
    http: str = ""
    #: Kafka's ``listeners`` (NAME://host:port,...); empty: ``listen`` alone, PLAINTEXT.
    listeners: str = ""
    advertised_listeners: str = ""
    listener_security_protocol_map: str = ""
    #: Kafka's default is GSSAPI, which pluglog does not offer.
    sasl_enabled_mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    #: PEM files: certificate chain (may hold the key too), key, trusted CAs.
    ssl_keystore_location: str = ""
    ssl_key_location: str = ""
    ssl_truststore_location: str = ""
    ssl_client_auth: str = "none"
    #: Kafka's SslPrincipalMapper rules (pluglog.security.principals)
    ssl_principal_mapping_rules: str = "DEFAULT"
    #: ``User:alice;User:bob``
    super_users: str = ""
    authorizer_class_name: str = ""
    allow_everyone_if_no_acl_found: bool = False
    #: KIP-306: close a failed login this late (the client reads the error first)
    connection_failed_authentication_delay_ms: int = 100
    #: The listener replica fetchers connect to (default: the one named like
    #: security.inter.broker.protocol), and how they log in on a SASL one.
    inter_broker_listener_name: str = ""
    security_inter_broker_protocol: str = "PLAINTEXT"
    #: Kafka's default is GSSAPI, which pluglog does not offer.
    sasl_mechanism_inter_broker_protocol: str = "PLAIN"
    inter_broker_sasl_username: str = ""
    inter_broker_sasl_password: str = ""
    topic_defaults: TopicConfig = field(default_factory=TopicConfig)
    plugin_sections: dict = field(default_factory=dict)
    #: Broker-level Kafka keys set in the config file or with --set
    #: (DescribeConfigs reports them as STATIC_BROKER_CONFIG).
    explicit_keys: frozenset = frozenset()

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


def parse_settings(settings, base=None):
    """Apply Kafka-named ``settings`` ({key: str}) to ``base`` (a BrokerConfig).

    Keys may be broker keys (``num.partitions``), broker names of topic
    defaults (``log.segment.bytes``) or topic names (``segment.bytes``).
    """
    base = base or BrokerConfig()
    broker_changes = {}
    topic_overrides = {}
    broker_to_topic = {spec[3]: key for key, spec in TOPIC_KEYS.items()}
    for key, value in settings.items():
        if key in BROKER_KEYS:
            attr, parse = BROKER_KEYS[key]
            broker_changes[attr] = parse(key, value)
        elif key in broker_to_topic:
            topic_key = broker_to_topic[key]
            TOPIC_KEYS[topic_key][1](key, value)  # errors name the key as written
            topic_overrides[topic_key] = value
        elif key in TOPIC_KEYS:
            topic_overrides[key] = value
        elif key == "log.retention.hours":
            topic_overrides["retention.ms"] = str(_int_parser(-1)(key, value) * 3600000)
        else:
            raise ConfigError(f"unknown config key {key!r}")
    if topic_overrides:
        broker_changes["topic_defaults"] = base.topic_defaults.with_overrides(topic_overrides)
    explicit = {k for k in settings if k in BROKER_KEYS}
    explicit |= {TOPIC_KEYS[k][3] for k in topic_overrides}
    broker_changes["explicit_keys"] = base.explicit_keys | explicit
    return dataclasses.replace(base, **broker_changes)


def load_ini(path, base=None):
    """Read an INI config file; ``[broker]`` (or keys before any section,
    via ``[DEFAULT]``) holds Kafka keys, other sections go to plugins."""
    parser = configparser.ConfigParser(interpolation=None, default_section="__none__")
    parser.optionxform = str  # Kafka keys are case-sensitive
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path!r}: {exc.strerror}") from None
    if not text.lstrip().startswith("["):
        text = "[broker]\n" + text
    try:
        parser.read_string(text, source=path)
    except configparser.Error as exc:
        raise ConfigError(f"config file {path!r}: {exc}") from None
    settings = dict(parser["broker"]) if parser.has_section("broker") else {}
    config = parse_settings(settings, base)
    plugin_sections = {name: dict(parser[name]) for name in parser.sections() if name != "broker"}
    return config.replace(plugin_sections=plugin_sections)
