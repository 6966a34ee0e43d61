"""The configuration key tables: every Kafka-named key pluglog accepts.

``TOPIC_KEYS`` maps a topic config name to its attribute of
:class:`pluglog.config.TopicConfig`, its value parser, its default and the
broker-level key that sets that default; ``BROKER_KEYS`` maps the other
broker keys to attributes of :class:`pluglog.config.BrokerConfig` and their
parsers. Each parser is ``parse(key, value)`` and raises
:class:`pluglog.errors.ConfigError` naming key and value. The classes and the
settings/INI readers that use these tables are in :mod:`pluglog.config`.
"""

import os

from pluglog.errors import ConfigError


def _parse_bool(key, value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{key}: expected true or false, got {value!r}")


def int_parser(minimum=None, maximum=None):
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


#: Kafka's ``group.consumer.migration.policy`` values (KIP-1099): which way a
#: group with members may convert between the classic and consumer protocols
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")

#: the server-side assignors of KIP-848 consumer groups
CONSUMER_ASSIGNORS = ("uniform", "range")
#: Kafka's class names for them, accepted as the short names
_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def _assignors(key, value):
    names = [_ASSIGNOR_CLASSES.get(n.strip(), n.strip()) for n in str(value).split(",")]
    names = [n for n in names if n]
    bad = [n for n in names if n not in CONSUMER_ASSIGNORS]
    if not names or bad:
        raise ConfigError(f"{key}: {value!r} names no assignor among uniform, range")
    return ",".join(dict.fromkeys(names))


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


def _dir_list(key, value):
    """``log.dirs``: comma-separated directories, none empty, none twice."""
    dirs = [part.strip() for part in str(value).split(",")]
    if not all(dirs):
        raise ConfigError(f"{key}: empty directory in {value!r}")
    absolute = [os.path.abspath(d) for d in dirs]
    if len(set(absolute)) != len(absolute):
        raise ConfigError(f"{key}: a directory is listed twice in {value!r}")
    return tuple(absolute)


def _one_dir(key, value):
    """``log.dir``: one directory (Kafka's key for when ``log.dirs`` is unset)."""
    text = str(value).strip()
    if not text:
        raise ConfigError(f"{key}: empty directory in {value!r}")
    if "," in text:
        raise ConfigError(f"{key}: one directory only, got {value!r} (list several in log.dirs)")
    return os.path.abspath(text)


def _provider_name(key, value):
    """A plugin provider's name (``retention.policy``): checked against the
    registry by the broker, which knows the installed plugins."""
    text = str(value).strip()
    if not text or not all(c.isalnum() or c in "_-." for c in text):
        raise ConfigError(f"{key}: {value!r} is not a provider name")
    return text


#: Kafka's class names for the built-in replica selectors (pluglog.broker.replica_selection).
REPLICA_SELECTOR_CLASSES = {
    "org.apache.kafka.common.replica.LeaderSelector": "leader",
    "org.apache.kafka.common.replica.RackAwareReplicaSelector": "rack-aware",
}


def _replica_selector(key, value):
    """``replica.selector.class``: a selector's name, Kafka's class name for
    a built-in one (LeaderSelector, RackAwareReplicaSelector), or empty."""
    text = str(value).strip()
    if not text:
        return ""
    return REPLICA_SELECTOR_CLASSES.get(text) or _provider_name(key, text)


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
        out.append((host.strip("[]"), int_parser(0)(key, count)))
    return tuple(out)


INT64_MAX = 2**63 - 1


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
    "segment.bytes": ("segment_bytes", int_parser(14), 1073741824, "log.segment.bytes"),
    "segment.ms": ("segment_ms", int_parser(1), 604800000, "log.roll.ms"),
    "segment.index.bytes": (
        "segment_index_bytes",
        int_parser(8),
        10485760,
        "log.index.size.max.bytes",
    ),
    "index.interval.bytes": (
        "index_interval_bytes",
        int_parser(0),
        4096,
        "log.index.interval.bytes",
    ),
    "retention.ms": ("retention_ms", int_parser(-1), 604800000, "log.retention.ms"),
    "retention.bytes": ("retention_bytes", int_parser(-1), -1, "log.retention.bytes"),
    "cleanup.policy": ("cleanup_policy", _cleanup_policy, "delete", "log.cleanup.policy"),
    # pluglog's own key (Kafka has none): the IRetentionPolicy provider by name.
    "retention.policy": ("retention_policy", _provider_name, "delete", "log.retention.policy"),
    "max.message.bytes": (
        "max_message_bytes",
        int_parser(0),
        1048588,
        "message.max.bytes",
    ),
    "flush.messages": (
        "flush_messages",
        int_parser(1),
        INT64_MAX,
        "log.flush.interval.messages",
    ),
    "flush.ms": ("flush_ms", int_parser(0), INT64_MAX, "log.flush.interval.ms"),
    "file.delete.delay.ms": (
        "file_delete_delay_ms",
        int_parser(0),
        60000,
        "log.segment.delete.delay.ms",
    ),
    "message.timestamp.type": (
        "message_timestamp_type",
        _choice_parser("CreateTime", "LogAppendTime"),
        "CreateTime",
        "log.message.timestamp.type",
    ),
    "min.insync.replicas": ("min_insync_replicas", int_parser(1), 1, "min.insync.replicas"),
    "min.cleanable.dirty.ratio": (
        "min_cleanable_dirty_ratio",
        _ratio,
        0.5,
        "log.cleaner.min.cleanable.ratio",
    ),
    "min.compaction.lag.ms": (
        "min_compaction_lag_ms",
        int_parser(0),
        0,
        "log.cleaner.min.compaction.lag.ms",
    ),
    "max.compaction.lag.ms": (
        "max_compaction_lag_ms",
        int_parser(1),
        INT64_MAX,
        "log.cleaner.max.compaction.lag.ms",
    ),
    "delete.retention.ms": (
        "delete_retention_ms",
        int_parser(0),
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
    # Tiered storage (KIP-405), Kafka's names: -2 means "as retention.*".
    "remote.storage.enable": (
        "remote_storage_enable",
        _parse_bool,
        False,
        "remote.storage.enable",
    ),
    "local.retention.ms": ("local_retention_ms", int_parser(-2), -2, "log.local.retention.ms"),
    "local.retention.bytes": (
        "local_retention_bytes",
        int_parser(-2),
        -2,
        "log.local.retention.bytes",
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


# Broker-level keys that are not topic defaults: key -> (attribute, parser).
BROKER_KEYS = {
    "broker.id": ("broker_id", int_parser(0)),
    "log.dirs": ("log_dirs", _dir_list),
    "log.dir": ("log_dir", _one_dir),
    "num.partitions": ("num_partitions", int_parser(1, 100000)),
    "default.replication.factor": ("default_replication_factor", int_parser(1)),
    "auto.create.topics.enable": ("auto_create_topics_enable", _parse_bool),
    "delete.topic.enable": ("delete_topic_enable", _parse_bool),
    "socket.request.max.bytes": ("socket_request_max_bytes", int_parser(1024)),
    "log.retention.check.interval.ms": (
        "retention_check_interval_ms",
        int_parser(1),
    ),
    "log.flush.scheduler.interval.ms": ("flush_scheduler_interval_ms", int_parser(1)),
    "log.flush.offset.checkpoint.interval.ms": (
        "checkpoint_interval_ms",
        int_parser(1),
    ),
    "group.initial.rebalance.delay.ms": (
        "group_initial_rebalance_delay_ms",
        int_parser(0),
    ),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", int_parser(0)),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", int_parser(0)),
    # KIP-848 consumer groups (Kafka's names and defaults).
    "group.consumer.assignors": ("group_consumer_assignors", _assignors),
    "group.consumer.session.timeout.ms": ("group_consumer_session_timeout_ms", int_parser(1)),
    "group.consumer.heartbeat.interval.ms": (
        "group_consumer_heartbeat_interval_ms",
        int_parser(1),
    ),
    "group.consumer.max.size": ("group_consumer_max_size", int_parser(1)),
    "group.consumer.migration.policy": (
        "group_consumer_migration_policy",
        _choice_parser(*MIGRATION_POLICIES),
    ),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", int_parser(1)),
    "offsets.retention.minutes": ("offsets_retention_minutes", int_parser(1)),
    "cluster.id": ("cluster_id", _string),
    "fetch.max.bytes": ("fetch_max_bytes", int_parser(0)),
    "max.incremental.fetch.session.cache.slots": (
        "max_incremental_fetch_session_cache_slots",
        int_parser(0),
    ),
    # Cluster (ZooKeeper coordinator and replication), Kafka's names and defaults.
    "zookeeper.connect": ("zookeeper_connect", _string),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", int_parser(1000)),
    "zookeeper.connection.timeout.ms": ("zookeeper_connection_timeout_ms", int_parser(1)),
    "broker.rack": ("broker_rack", _string),
    "replica.selector.class": ("replica_selector_class", _replica_selector),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", int_parser(1)),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", int_parser(0)),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", int_parser(1)),
    "replica.fetch.backoff.ms": ("replica_fetch_backoff_ms", int_parser(0)),
    "num.replica.fetchers": ("num_replica_fetchers", int_parser(1)),
    "replica.socket.timeout.ms": ("replica_socket_timeout_ms", int_parser(1)),
    "controlled.shutdown.enable": ("controlled_shutdown_enable", _parse_bool),
    "controlled.shutdown.timeout.ms": ("controlled_shutdown_timeout_ms", int_parser(0)),
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", _parse_bool),
    "leader.imbalance.check.interval.seconds": (
        "leader_imbalance_check_interval_seconds",
        int_parser(1),
    ),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", int_parser(1)),
    "leader.replication.throttled.rate": ("leader_replication_throttled_rate", int_parser(1)),
    "follower.replication.throttled.rate": (
        "follower_replication_throttled_rate",
        int_parser(1),
    ),
    "replica.alter.log.dirs.io.max.bytes.per.second": (
        "replica_alter_log_dirs_io_max_bytes_per_second",
        int_parser(1),
    ),
    "replication.quota.window.num": ("replication_quota_window_num", int_parser(2)),
    "replication.quota.window.size.seconds": (
        "replication_quota_window_size_seconds",
        int_parser(1),
    ),
    "offsets.commit.timeout.ms": ("offsets_commit_timeout_ms", int_parser(1)),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", int_parser(14)),
    # The transaction coordinator and __transaction_state, Kafka's names.
    "transaction.state.log.num.partitions": (
        "transaction_state_log_num_partitions",
        int_parser(1),
    ),
    "transaction.state.log.replication.factor": (
        "transaction_state_log_replication_factor",
        int_parser(1),
    ),
    "transaction.state.log.min.isr": ("transaction_state_log_min_isr", int_parser(1)),
    "transaction.state.log.segment.bytes": (
        "transaction_state_log_segment_bytes",
        int_parser(14),
    ),
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", int_parser(1)),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", int_parser(1)),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
        int_parser(1),
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "transaction_remove_expired_transaction_cleanup_interval_ms",
        int_parser(1),
    ),
    # The log cleaner (compaction), Kafka's names and defaults.
    "log.cleaner.enable": ("log_cleaner_enable", _parse_bool),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", int_parser(0)),
    "log.cleaner.threads": ("log_cleaner_threads", int_parser(0, 64)),
    "log.cleaner.io.max.bytes.per.second": (
        "log_cleaner_io_max_bytes_per_second",
        _positive_rate,
    ),
    "log.cleaner.dedupe.buffer.size": ("log_cleaner_dedupe_buffer_size", int_parser(1024)),
    # Tiered storage (KIP-405), Kafka's names (RemoteLogManagerConfig). The
    # provider's own keys are rsm.config.* (Kafka's default prefix).
    "remote.log.storage.system.enable": ("remote_log_storage_system_enable", _parse_bool),
    "remote.log.storage.manager.class.name": (
        "remote_log_storage_manager_class_name",
        _string,
    ),
    "remote.log.manager.thread.pool.size": (
        "remote_log_manager_thread_pool_size",
        int_parser(1, 1024),
    ),
    "remote.log.manager.task.interval.ms": (
        "remote_log_manager_task_interval_ms",
        int_parser(1),
    ),
    "remote.log.reader.threads": ("remote_log_reader_threads", int_parser(1, 1024)),
    "remote.log.copy.processes": ("remote_log_copy_processes", int_parser(0, 64)),
    "remote.log.manager.copy.max.bytes.per.second": (
        "remote_log_manager_copy_max_bytes_per_second",
        int_parser(1),
    ),
    "remote.log.index.file.cache.total.size.bytes": (
        "remote_log_index_file_cache_total_size_bytes",
        int_parser(1),
    ),
    "remote.log.metadata.topic.num.partitions": (
        "remote_log_metadata_topic_num_partitions",
        int_parser(1),
    ),
    "remote.log.metadata.topic.replication.factor": (
        "remote_log_metadata_topic_replication_factor",
        int_parser(1),
    ),
    "rsm.config.s3.bucket": ("rsm_config_s3_bucket", _string),
    "rsm.config.s3.endpoint.url": ("rsm_config_s3_endpoint_url", _string),
    "rsm.config.s3.region": ("rsm_config_s3_region", _string),
    "rsm.config.s3.prefix": ("rsm_config_s3_prefix", _string),
    "rsm.config.s3.multipart.threshold.bytes": (
        "rsm_config_s3_multipart_threshold_bytes",
        int_parser(5 << 20),
    ),
    "rsm.config.filesystem.root": ("rsm_config_filesystem_root", _string),
    # Client quotas: static per-client-id defaults and the rate windows.
    "quota.producer.default": ("quota_producer_default", int_parser(1)),
    "quota.consumer.default": ("quota_consumer_default", int_parser(1)),
    "quota.window.num": ("quota_window_num", int_parser(1)),
    "quota.window.size.seconds": ("quota_window_size_seconds", int_parser(1)),
    # Resource limits (docs/configuration.rst, "Limits").
    "max.partitions.per.request": ("max_partitions_per_request", int_parser(1)),
    "max.broker.partitions": ("max_broker_partitions", int_parser(1)),
    "max.connections": ("max_connections", int_parser(1)),
    "max.connections.per.ip": ("max_connections_per_ip", int_parser(0)),
    "max.connections.per.ip.overrides": ("max_connections_per_ip_overrides", _ip_overrides),
    "connections.max.idle.ms": ("connections_max_idle_ms", int_parser(-1)),
    "request.read.timeout.ms": ("request_read_timeout_ms", int_parser(-1)),
    "queued.max.request.bytes": ("queued_max_request_bytes", int_parser(-1)),
    "metadata.max.topics.per.request": ("metadata_max_topics_per_request", int_parser(1)),
    "log.max.open.files": ("log_max_open_files", int_parser(0)),
    "log.max.open.segments": ("log_max_open_segments", int_parser(0)),
    "metrics.enabled": ("metrics_enabled", _parse_bool),
    # The web console (docs/operations.rst, "Console").
    "console.read.only": ("console_read_only", _parse_bool),
    "console.lag.sample.interval.ms": ("console_lag_sample_interval_ms", int_parser(100)),
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
        int_parser(0),
    ),
    "connections.max.reauth.ms": ("connections_max_reauth_ms", int_parser(0)),
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
