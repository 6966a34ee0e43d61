"""Broker and topic configuration with Kafka's names, defaults and validation.

Topic-level keys keep their dotted Kafka names (``retention.ms``,
``segment.bytes``) so users' knowledge transfers; broker-level defaults for
them use Kafka's broker names (``log.retention.ms``, ``log.segment.bytes``).
Both :class:`TopicConfig` and :class:`BrokerConfig` are frozen: a change is a
new object, so a config can be shared between components without copying.
Every bad value raises :class:`pluglog.errors.ConfigError` naming key and value.
The key tables and their value parsers are in :mod:`pluglog.config_keys`.
"""

import configparser
import dataclasses
from dataclasses import dataclass, field

from pluglog.config_keys import (  # noqa: F401 - the tables are part of this module's API
    BROKER_KEYS,
    INT64_MAX,
    SENSITIVE_KEYS,
    TOPIC_KEYS,
    int_parser,
)
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
    retention_policy: str = "delete"
    max_message_bytes: int = 1048588
    flush_messages: int = INT64_MAX
    flush_ms: int = INT64_MAX
    file_delete_delay_ms: int = 60000
    message_timestamp_type: str = "CreateTime"
    min_insync_replicas: int = 1
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = INT64_MAX
    delete_retention_ms: int = 86400000
    compression_type: str = "producer"
    unclean_leader_election_enable: bool = False
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    confluent_key_schema_validation: bool = False
    confluent_value_schema_validation: bool = False
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2

    @property
    def effective_local_retention_ms(self):
        """local.retention.ms, or retention.ms when it is -2."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self):
        """local.retention.bytes, or retention.bytes when it is -2."""
        if self.local_retention_bytes == -2:
            return self.retention_bytes
        return self.local_retention_bytes

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


@dataclass(frozen=True)
class BrokerConfig:
    """Everything the broker process is configured with."""

    broker_id: int = 0
    listen: str = "tcp:9092"
    advertised_host: str = "localhost"
    advertised_port: int = 9092
    data_dir: str = "./data"
    #: ``log.dirs`` (JBOD): absolute paths; empty means the one ``data_dir``.
    #: When set, ``data_dir`` is its first entry (the broker-wide files live there).
    log_dirs: tuple = ()
    #: ``log.dir``: the one log dir when ``log.dirs`` is unset (it wins over
    #: ``--data-dir``); "" when not given.
    log_dir: str = ""
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
    #: KIP-848 consumer groups: server-side assignors (the first is the
    #: default), the session and heartbeat interval the coordinator imposes,
    #: and the most members a group may have.
    group_consumer_assignors: str = "uniform,range"
    group_consumer_session_timeout_ms: int = 45000
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_max_size: int = 2147483647
    #: which way a group with members converts between the classic and the
    #: consumer protocol (KIP-1099): disabled, upgrade, downgrade, bidirectional
    group_consumer_migration_policy: str = "bidirectional"
    offsets_topic_num_partitions: int = 50
    offsets_retention_minutes: int = 10080
    cluster_id: str = ""
    fetch_max_bytes: int = 57671680
    #: Incremental fetch sessions (KIP-227) the broker keeps; 0 declines them.
    max_incremental_fetch_session_cache_slots: int = 1000
    zookeeper_connect: str = ""
    zookeeper_session_timeout_ms: int = 18000
    #: How long start-up retries an unreachable ZooKeeper; 0 means the session timeout.
    zookeeper_connection_timeout_ms: int = 0
    broker_rack: str = ""
    #: IReplicaSelector for consumers' fetches (KIP-392); "" reads from the leader
    replica_selector_class: str = ""
    replica_lag_time_max_ms: int = 30000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1048576
    replica_fetch_backoff_ms: int = 1000
    num_replica_fetchers: int = 1
    replica_socket_timeout_ms: int = 30000
    controlled_shutdown_enable: bool = True
    controlled_shutdown_timeout_ms: int = 30000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    #: Kafka's default is 3; creation caps it at the number of live brokers so a
    #: single broker (and the local coordinator) still gets its offsets topic.
    offsets_topic_replication_factor: int = 3
    #: Bytes/s for throttled replicas (Kafka's reassignment throttle); unlimited by default.
    leader_replication_throttled_rate: int = INT64_MAX
    follower_replication_throttled_rate: int = INT64_MAX
    #: AlterReplicaLogDirs copy rate, bytes/s (Kafka's default: no limit)
    replica_alter_log_dirs_io_max_bytes_per_second: int = INT64_MAX
    replication_quota_window_num: int = 11
    replication_quota_window_size_seconds: int = 1
    #: How long a __consumer_offsets write waits for min.insync.replicas.
    offsets_commit_timeout_ms: int = 5000
    offsets_topic_segment_bytes: int = 104857600
    #: The transaction coordinator (Kafka's TransactionStateManager defaults).
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 104857600
    transaction_max_timeout_ms: int = 900000
    transactional_id_expiration_ms: int = 604800000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3600000
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15000
    log_cleaner_threads: int = 1
    #: Kafka's default is Double.MAX_VALUE: no limit.
    log_cleaner_io_max_bytes_per_second: float = float("inf")
    log_cleaner_dedupe_buffer_size: int = 134217728
    quota_producer_default: int = INT64_MAX
    quota_consumer_default: int = INT64_MAX
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
    #: Descriptors segment files may hold at once (least recently used are
    #: closed); 0: from log.max.open.segments, else from the fd limit.
    log_max_open_files: int = 0
    #: The older setting: a budget of three descriptors per segment.
    log_max_open_segments: int = 0
    #: Request metrics on the hot path and ``/metrics`` on the --http listener.
    metrics_enabled: bool = True
    #: The console at /console/ only shows (true) or also acts: create and
    #: delete topics, add partitions, reset group offsets (false).
    console_read_only: bool = True
    #: How often the console samples each group's lag for its chart.
    console_lag_sample_interval_ms: int = 10000
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
    #: KIP-368: SASL sessions last this long; 0 never expires (Kafka's default)
    connections_max_reauth_ms: int = 0
    #: The listener replica fetchers connect to (default: the one named like
    #: security.inter.broker.protocol), and how they log in on a SASL one.
    inter_broker_listener_name: str = ""
    security_inter_broker_protocol: str = "PLAINTEXT"
    #: Kafka's default is GSSAPI, which pluglog does not offer.
    sasl_mechanism_inter_broker_protocol: str = "PLAIN"
    inter_broker_sasl_username: str = ""
    inter_broker_sasl_password: str = ""
    #: Tiered storage (KIP-405): Kafka's RemoteLogManagerConfig names and defaults.
    remote_log_storage_system_enable: bool = False
    remote_log_storage_manager_class_name: str = ""
    remote_log_manager_thread_pool_size: int = 10
    remote_log_manager_task_interval_ms: int = 30000
    remote_log_reader_threads: int = 10
    #: KIP-956's copy quota: the broker's uploads in bytes per second
    #: (Kafka's default, Long.MAX_VALUE: unlimited).
    remote_log_manager_copy_max_bytes_per_second: int = 9223372036854775807
    #: pluglog's own: child processes that run segment uploads, off the
    #: broker's GIL (0: the upload threads call the provider themselves).
    remote_log_copy_processes: int = 1
    #: Bounds the cache of remote indexes and record chunks together.
    remote_log_index_file_cache_total_size_bytes: int = 1073741824
    remote_log_metadata_topic_num_partitions: int = 50
    remote_log_metadata_topic_replication_factor: int = 3
    rsm_config_s3_bucket: str = ""
    rsm_config_s3_endpoint_url: str = ""
    rsm_config_s3_region: str = ""
    rsm_config_s3_prefix: str = ""
    #: Segments at least this large go up as S3 multipart uploads.
    rsm_config_s3_multipart_threshold_bytes: int = 8388608
    rsm_config_filesystem_root: str = ""
    #: Other ``rsm.config.*`` keys (a plugin provider's own), as given.
    rsm_config_extra: dict = field(default_factory=dict)
    topic_defaults: TopicConfig = field(default_factory=TopicConfig)
    plugin_sections: dict = field(default_factory=dict)
    #: Broker-level Kafka keys set in the config file or with --set
    #: (DescribeConfigs reports them as STATIC_BROKER_CONFIG).
    explicit_keys: frozenset = frozenset()

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    @property
    def data_dirs(self):
        """Every log dir of this broker, the first holding the broker-wide files."""
        return tuple(self.log_dirs) or (self.data_dir,)

    def rsm_config(self, name, default=""):
        """The remote storage provider's key ``rsm.config.<name>`` (a named
        key of the table or any other one given), as its typed value or
        ``default``."""
        attr = "rsm_config_" + name.replace(".", "_")
        if hasattr(self, attr):
            return getattr(self, attr)
        return self.rsm_config_extra.get("rsm.config." + name, default)

    def plugin_section(self, name):
        """The keys of the config file's ``[name]`` section (a plugin's own
        settings), as a new ``{key: str}`` dict; empty when there is none.
        The one API plugins read their configuration through."""
        return dict(self.plugin_sections.get(name, {}))


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
            topic_overrides["retention.ms"] = str(int_parser(-1)(key, value) * 3600000)
        elif key.startswith("rsm.config."):
            # A remote storage plugin's own key: passed through, unchecked here.
            extra = dict(broker_changes.get("rsm_config_extra", base.rsm_config_extra))
            extra[key] = str(value)
            broker_changes["rsm_config_extra"] = extra
        else:
            raise ConfigError(f"unknown config key {key!r}")
    if topic_overrides:
        broker_changes["topic_defaults"] = base.topic_defaults.with_overrides(topic_overrides)
    explicit = {k for k in settings if k in BROKER_KEYS}
    explicit |= {TOPIC_KEYS[k][3] for k in topic_overrides}
    broker_changes["explicit_keys"] = base.explicit_keys | explicit
    config = dataclasses.replace(base, **broker_changes)
    session = config.group_consumer_session_timeout_ms
    if config.group_consumer_heartbeat_interval_ms >= session:
        # Kafka's GroupCoordinatorConfig rule: members must beat within a session.
        raise ConfigError(
            "group.consumer.heartbeat.interval.ms: "
            f"{config.group_consumer_heartbeat_interval_ms} must be below "
            f"group.consumer.session.timeout.ms ({session})"
        )
    return config


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
