"""The type and one-line documentation of every config key DescribeConfigs reports.

DescribeConfigs v3+ answers each config with Kafka's ConfigType id and, when
asked (``include_documentation``), its documentation. The types are Kafka's
for its own keys (``ConfigDef.Type``: ``segment.ms`` is a LONG,
``segment.bytes`` an INT, ``cleanup.policy`` a LIST...), and those of
pluglog's own keys follow the same rules. The texts say what the key does
*here* (they are docs/configuration.rst's "meaning" column); a unit test
keeps this table complete for every key of :mod:`pluglog.config_keys`.
"""

# DescribeConfigsResponse.ConfigType (apache/kafka
# clients/.../requests/DescribeConfigsResponse.java).
UNKNOWN, BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(10)

_B, _S, _I, _L, _D, _LIST, _P = BOOLEAN, STRING, INT, LONG, DOUBLE, LIST, PASSWORD

#: key -> (ConfigType id, documentation)
CONFIG_DOCS = {
    # Broker keys
    "broker.id": (_I, "This broker's node id (same as --broker-id)."),
    "num.partitions": (_I, "Partitions of automatically created topics."),
    "default.replication.factor": (_I, "Replication factor of new topics that name none."),
    "auto.create.topics.enable": (_B, "Whether a Metadata request creates unknown topics."),
    "delete.topic.enable": (_B, "Whether DeleteTopics is allowed."),
    "socket.request.max.bytes": (_I, "Largest request frame accepted."),
    "log.retention.check.interval.ms": (_L, "How often retention runs."),
    "log.flush.scheduler.interval.ms": (_L, "How often flush.ms is checked."),
    "log.flush.offset.checkpoint.interval.ms": (
        _I,
        "Period of the fsync and recovery checkpoint of every log.",
    ),
    "group.initial.rebalance.delay.ms": (
        _I,
        "How long a new consumer group waits for more members before its first generation.",
    ),
    "group.min.session.timeout.ms": (_I, "Smallest session timeout a group member may ask for."),
    "group.max.session.timeout.ms": (_I, "Largest session timeout a group member may ask for."),
    "group.consumer.assignors": (
        _LIST,
        "Server-side assignors of consumer groups (KIP-848), uniform and range; first is default.",
    ),
    "group.consumer.session.timeout.ms": (
        _I,
        "A consumer-group (KIP-848) member that sends no heartbeat for this long is removed.",
    ),
    "group.consumer.heartbeat.interval.ms": (
        _I,
        "How often consumer-group (KIP-848) members are told to heartbeat.",
    ),
    "group.consumer.max.size": (_I, "Most members of one consumer group (KIP-848)."),
    "group.consumer.migration.policy": (
        _S,
        "Which way a group with members converts between the classic and consumer protocols.",
    ),
    "offsets.topic.num.partitions": (_I, "Partitions of __consumer_offsets."),
    "offsets.retention.minutes": (_I, "Committed offsets of an empty group expire after this."),
    "cluster.id": (_S, "The cluster id reported in Metadata (generated when not set)."),
    "fetch.max.bytes": (_I, "Cap on the record bytes of one fetch response."),
    "max.incremental.fetch.session.cache.slots": (
        _I,
        "Incremental fetch sessions (KIP-227) the broker keeps at once; 0 declines them.",
    ),
    "zookeeper.connect": (_S, "HOST:PORT[,...][/chroot] of ZooKeeper; empty for a single node."),
    "zookeeper.session.timeout.ms": (_I, "ZooKeeper session timeout."),
    "zookeeper.connection.timeout.ms": (
        _I,
        "How long start-up waits for ZooKeeper (0: the session timeout).",
    ),
    "broker.rack": (_S, "Rack of this broker, for rack-aware replica assignment."),
    "replica.selector.class": (
        CLASS,
        "Which replica a consumer with client.rack reads from: leader (default) or "
        "rack-aware (Kafka's RackAwareReplicaSelector class name is accepted).",
    ),
    "replica.lag.time.max.ms": (_L, "A follower this far behind leaves the ISR."),
    "replica.fetch.wait.max.ms": (_I, "Longest wait of a follower's fetch for new data."),
    "replica.fetch.max.bytes": (_I, "Bytes per partition a follower fetches at once."),
    "replica.fetch.backoff.ms": (_I, "A follower's pause after a failed fetch."),
    "num.replica.fetchers": (
        _I,
        "Fetchers (connections and fetch sessions) a follower runs per leader broker.",
    ),
    "replica.socket.timeout.ms": (_I, "A follower's connect and request timeout."),
    "controlled.shutdown.enable": (_B, "Move leaderships away before shutting down."),
    "controlled.shutdown.timeout.ms": (_L, "Longest wait for that move."),
    "auto.leader.rebalance.enable": (_B, "Elect preferred replicas back as leaders."),
    "leader.imbalance.check.interval.seconds": (_L, "How often leadership balance is checked."),
    "offsets.topic.replication.factor": (
        _I,
        "Replication factor of __consumer_offsets, capped at the live brokers.",
    ),
    "leader.replication.throttled.rate": (_L, "Bytes per second of throttled leader replicas."),
    "follower.replication.throttled.rate": (
        _L,
        "Bytes per second of throttled follower replicas.",
    ),
    "replica.alter.log.dirs.io.max.bytes.per.second": (
        _L,
        "Bytes per second an AlterReplicaLogDirs move copies at.",
    ),
    "replication.quota.window.num": (_I, "Samples the replication throttle rate spans."),
    "replication.quota.window.size.seconds": (_I, "Length of one replication throttle sample."),
    "offsets.commit.timeout.ms": (_I, "How long a group write waits for the ISR."),
    "offsets.topic.segment.bytes": (_I, "Segment size of __consumer_offsets."),
    "transaction.state.log.num.partitions": (_I, "Partitions of __transaction_state."),
    "transaction.state.log.replication.factor": (
        SHORT,
        "Replication factor of __transaction_state, capped at the live brokers.",
    ),
    "transaction.state.log.min.isr": (_I, "The min.insync.replicas of __transaction_state."),
    "transaction.state.log.segment.bytes": (_I, "Segment size of __transaction_state."),
    "transaction.max.timeout.ms": (_I, "Largest transaction.timeout.ms a producer may ask for."),
    "transactional.id.expiration.ms": (
        _I,
        "How long an idle transactional id is kept before it is forgotten.",
    ),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        _I,
        "How often open transactions are checked against their timeout.",
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        _I,
        "How often idle transactional ids are checked for expiry.",
    ),
    "console.read.only": (_B, "Refuse the web console's actions (create, delete, reset)."),
    "console.lag.sample.interval.ms": (
        _L,
        "How often the broker samples consumer lag for the console's chart.",
    ),
    "log.cleaner.enable": (_B, "Run the log cleaner (compaction) at all."),
    "log.cleaner.backoff.ms": (_L, "Pause between the cleaner's checks for cleanable logs."),
    "log.cleaner.threads": (_I, "Cleaner worker processes (logs cleaned at once)."),
    "log.cleaner.io.max.bytes.per.second": (
        _D,
        "Read plus write rate cap of each cleaner worker.",
    ),
    "log.cleaner.dedupe.buffer.size": (_L, "Memory of the cleaners' key maps."),
    "quota.producer.default": (_L, "Produce bytes per second of a client without a quota."),
    "quota.consumer.default": (_L, "Fetched bytes per second of a client without a quota."),
    "quota.window.num": (_I, "Samples in a client quota's rate window."),
    "quota.window.size.seconds": (_I, "Length of one quota sample; also the longest throttle."),
    "max.partitions.per.request": (
        _I,
        "Partitions one CreateTopics or CreatePartitions request may add.",
    ),
    "max.broker.partitions": (_I, "Partitions this broker may hold in all."),
    "max.connections": (_I, "Client connections at once."),
    "max.connections.per.ip": (_I, "Client connections from one address at once."),
    "max.connections.per.ip.overrides": (
        _S,
        "Exceptions to max.connections.per.ip, as host:count,host:count.",
    ),
    "connections.max.idle.ms": (
        _L,
        "Close a connection idle this long (nothing sent, no answer pending); -1 never.",
    ),
    "request.read.timeout.ms": (
        _I,
        "Close a connection whose started request is not complete after this long; -1 never.",
    ),
    "queued.max.request.bytes": (
        _L,
        "Bytes of requests being read by all connections before reading pauses; -1 no cap.",
    ),
    "metadata.max.topics.per.request": (_I, "Topics one Metadata request may name."),
    "log.max.open.files": (
        _I,
        "Descriptors segment files hold at once, least recently used closed first "
        "(0: from log.max.open.segments, else the descriptor limit less a quarter).",
    ),
    "log.max.open.segments": (
        _I,
        "Older form of log.max.open.files: a budget of three descriptors per segment.",
    ),
    "metrics.enabled": (_B, "Count requests for Prometheus and serve /metrics."),
    # Listeners and security
    "listeners": (_S, "The NAME://host:port,... addresses the broker listens on."),
    "advertised.listeners": (
        _S,
        "The NAME://host:port,... addresses clients are told to connect to.",
    ),
    "listener.security.protocol.map": (
        _S,
        "The security protocol of each listener, as NAME:PROTOCOL,...",
    ),
    "sasl.enabled.mechanisms": (_LIST, "SASL mechanisms offered on SASL listeners."),
    "ssl.keystore.location": (_S, "PEM file with the certificate chain (and key)."),
    "ssl.key.location": (_S, "PEM file with the unencrypted private key."),
    "ssl.truststore.location": (_S, "PEM file with the CAs client certificates are checked with."),
    "ssl.client.auth": (_S, "Client certificates on SSL listeners: none, requested or required."),
    "ssl.principal.mapping.rules": (_S, "Rules mapping certificate subjects to principals."),
    "super.users": (_S, "Principals every ACL check allows, as User:a;User:b."),
    "authorizer.class.name": (_S, "The authorizer provider; empty for none."),
    "allow.everyone.if.no.acl.found": (_B, "Allow a resource no ACL names (with an authorizer)."),
    "connection.failed.authentication.delay.ms": (
        _I,
        "How long a failed authentication waits before its connection is closed.",
    ),
    "connections.max.reauth.ms": (
        _L,
        "Lifetime of a SASL session: a client must re-authenticate within it or its "
        "connection is closed at its next request (0: no limit).",
    ),
    "inter.broker.listener.name": (_S, "The listener replica fetchers connect to."),
    "security.inter.broker.protocol": (
        _S,
        "Security protocol of broker-to-broker connections.",
    ),
    "sasl.mechanism.inter.broker.protocol": (
        _S,
        "SASL mechanism brokers log in to each other with.",
    ),
    "inter.broker.sasl.username": (_S, "The brokers' own SASL user."),
    "inter.broker.sasl.password": (_P, "The password of that user."),
    "log.dirs": (_S, "The directory holding this broker's logs (--data-dir)."),
    "log.dir": (_S, "The one log dir when log.dirs is unset; wins over --data-dir."),
    "remote.log.storage.system.enable": (_B, "Turn tiered storage (KIP-405) on for this broker."),
    "remote.log.storage.manager.class.name": (
        _S,
        "The remote storage provider by name: s3, filesystem or a plugin's.",
    ),
    "remote.log.manager.thread.pool.size": (
        _I,
        "Threads that upload and delete remote segments (the reactor never waits on them).",
    ),
    "remote.log.manager.task.interval.ms": (
        _L,
        "How often each led partition is checked for segments to upload or expire.",
    ),
    "remote.log.reader.threads": (_I, "Threads that read remote segments for fetches."),
    "remote.log.copy.processes": (
        _I,
        "Child processes that run segment uploads off the broker's GIL (0: in its threads).",
    ),
    "remote.log.manager.copy.max.bytes.per.second": (
        _L,
        "The broker's remote uploads in bytes per second (KIP-956; default unlimited).",
    ),
    "remote.log.index.file.cache.total.size.bytes": (
        _L,
        "Bytes of remote indexes and record chunks kept in memory (LRU).",
    ),
    "remote.log.metadata.topic.num.partitions": (_I, "Partitions of __remote_log_metadata."),
    "remote.log.metadata.topic.replication.factor": (
        SHORT,
        "Replication factor of __remote_log_metadata, capped at the live brokers.",
    ),
    "rsm.config.s3.bucket": (_S, "The S3 bucket of the remote tier (must exist)."),
    "rsm.config.s3.endpoint.url": (
        _S,
        "The S3 endpoint URL (empty: AWS's own); any S3-compatible server.",
    ),
    "rsm.config.s3.region": (_S, "The S3 region (empty: boto3's usual sources)."),
    "rsm.config.s3.prefix": (_S, "Key prefix of every object pluglog writes in the bucket."),
    "rsm.config.s3.multipart.threshold.bytes": (
        _L,
        "Objects at least this large are uploaded in parts (multipart upload).",
    ),
    "rsm.config.filesystem.root": (
        _S,
        "The directory of the filesystem provider (e.g. a network mount).",
    ),
    # Topic keys
    "segment.bytes": (_I, "Roll a segment at this size."),
    "segment.ms": (_L, "Roll a segment at this age."),
    "segment.index.bytes": (_I, "Roll a segment when its index reaches this size."),
    "index.interval.bytes": (_I, "Bytes between sparse offset index entries."),
    "retention.ms": (_L, "Delete segments older than this (-1: never)."),
    "retention.bytes": (
        _L,
        "Delete the oldest segments above this size per partition (-1: none).",
    ),
    "cleanup.policy": (_LIST, "Delete old segments, compact, or both (delete, compact)."),
    "retention.policy": (_S, "The retention policy provider by name (pluglog's own key)."),
    "max.message.bytes": (_I, "Largest record batch accepted."),
    "flush.messages": (_L, "Fsync after this many records."),
    "flush.ms": (_L, "Fsync after this long."),
    "file.delete.delay.ms": (_L, "Keep deleted segment files this long."),
    "message.timestamp.type": (
        _S,
        "Record timestamps as sent (CreateTime) or as appended (LogAppendTime).",
    ),
    "min.insync.replicas": (_I, "In-sync replicas an acks=all produce needs."),
    "min.cleanable.dirty.ratio": (_D, "Dirty ratio at which a compacted log is cleaned."),
    "min.compaction.lag.ms": (_L, "Never compact records younger than this."),
    "max.compaction.lag.ms": (
        _L,
        "Compact a log whose dirty records are older than this, whatever its ratio.",
    ),
    "delete.retention.ms": (_L, "Keep compaction tombstones this long."),
    "compression.type": (
        _S,
        "Keep batches as the producer compressed them (producer), or a codec to recompress to.",
    ),
    "unclean.leader.election.enable": (_B, "Elect out-of-sync replicas as leaders."),
    "leader.replication.throttled.replicas": (
        _LIST,
        "Replicas the leader throttle applies to: * or partition:broker,...",
    ),
    "follower.replication.throttled.replicas": (
        _LIST,
        "Replicas the follower throttle applies to: * or partition:broker,...",
    ),
    "confluent.key.schema.validation": (_B, "Refuse keys without a registered schema id."),
    "confluent.value.schema.validation": (_B, "Refuse values without a registered schema id."),
    "remote.storage.enable": (
        _B,
        "Keep closed segments in the remote tier (needs remote.log.storage.system.enable).",
    ),
    "local.retention.ms": (
        _L,
        "Delete uploaded local segments older than this (-2: as retention.ms).",
    ),
    "local.retention.bytes": (
        _L,
        "Delete uploaded local segments above this size (-2: as retention.bytes).",
    ),
}

# The broker-level defaults of the topic keys: the same type and text.
_BROKER_NAMES = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "retention.policy": "log.retention.policy",
    "max.message.bytes": "message.max.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "message.timestamp.type": "log.message.timestamp.type",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
}
for _topic_key, _broker_key in _BROKER_NAMES.items():
    _type, _doc = CONFIG_DOCS[_topic_key]
    CONFIG_DOCS[_broker_key] = (_type, f"Default of the topic config {_topic_key}: {_doc}")


def config_type(key):
    """Kafka's ConfigType id of ``key`` (UNKNOWN for a key not in the table)."""
    return CONFIG_DOCS.get(key, (UNKNOWN, None))[0]


def documentation(key):
    """The documentation of ``key``, or None."""
    return CONFIG_DOCS.get(key, (UNKNOWN, None))[1]
