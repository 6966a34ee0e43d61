"""Every zope.interface contract a pluglog component implements.

Plugins provide these through the pluggy registration hooks in
:mod:`pluglog.hookspecs`; :mod:`pluglog.registry` builds the chosen provider by
name and checks it with ``zope.interface.verify.verifyObject``.

Conventions shared by all storage interfaces:

* Offsets are Kafka offsets (int64). ``log_end_offset`` is the offset the
  next appended record will get.
* Nothing here reads the wall clock: callers pass ``now_ms``.
* Everything runs on the reactor thread; methods are synchronous and cheap
  (page-cache writes, no fsync unless the fsync policy says so).
"""

from zope.interface import Attribute, Interface


class IFileRange(Interface):
    """A byte range of an open file: what a fetch sends with ``os.sendfile``."""

    fileno = Attribute("callable returning the OS file descriptor to read from")
    position = Attribute("byte offset of the range inside the file")
    size = Attribute("length of the range in bytes")

    def read():
        """Return the range's bytes (the copy-through path: TLS, tests)."""


class IPartitionLog(Interface):
    """One topic-partition's append-only log of magic-2 record batches."""

    topic = Attribute("topic name (str)")
    partition = Attribute("partition number (int)")
    log_start_offset = Attribute("first offset still readable (int)")
    log_end_offset = Attribute("offset the next appended record gets (int)")
    recovery_point = Attribute("every offset below this is known flushed to disk (int)")
    size_bytes = Attribute("total bytes held by the log's segments (int)")

    def append(batches, now_ms, leader_epoch=0):
        """Validate and append one or more v2 record batches (bytes-like).

        Checks each batch header and its CRC-32C, assigns offsets by patching
        ``baseOffset`` and stamps ``partitionLeaderEpoch``; never decodes
        records. Returns a :class:`pluglog.storage.records.AppendInfo`.
        Raises :class:`pluglog.errors.CorruptRecordError` (bad CRC) or
        :class:`pluglog.errors.InvalidRecordError` (bad structure); nothing is
        written when either is raised.

        Optional: a log whose ``answers_early`` attribute is true also takes
        ``answer=``, a callable of ``(first_offset, log_append_time,
        log_start_offset)`` to call exactly once on success, as soon as the
        batches are written and no flush is due (before the log's own
        bookkeeping: the produce response leaves sooner); see
        :meth:`pluglog.storage.log.BasePartitionLog.append`. Logs without the
        attribute are called without it.
        """

    def read(offset, max_bytes, max_offset=None, min_one_batch=True):
        """Return a :class:`pluglog.storage.records.ReadResult`.

        The records are whole batches starting at the batch containing
        ``offset``, from a single segment, at most ``max_bytes`` long unless
        ``min_one_batch`` lets the first batch exceed it (KIP-74); batches
        starting at or after ``max_offset`` (exclusive bound, e.g. the high
        watermark) are left out. Raises
        :class:`pluglog.errors.OffsetOutOfRangeError` when ``offset`` is
        outside [log_start_offset, log_end_offset].
        """

    def offset_for_timestamp(timestamp_ms):
        """Return ``(offset, timestamp)`` of the first batch whose max
        timestamp is >= ``timestamp_ms``, or ``None`` if there is none."""

    def batch_headers(start_offset=0):
        """Iterate over :class:`pluglog.storage.records.BatchHeader` objects of
        the batches at or after ``start_offset`` (recovery of producer state,
        compaction, tools). Reads headers only."""

    def roll(now_ms):
        """Close the active segment and start a new one at log_end_offset."""

    def delete_records_before(offset):
        """Advance log_start_offset to ``offset`` (DeleteRecords); whole
        segments below it are removed."""

    def truncate_to(offset):
        """Drop every batch at or after ``offset`` (follower truncation)."""

    def segment_infos():
        """Return a list of :class:`pluglog.storage.records.SegmentInfo`,
        oldest first, the active segment last."""

    def delete_oldest_segments(count):
        """Remove the ``count`` oldest segments (never the active one);
        log_start_offset moves to the next segment's base offset."""

    def flush():
        """fsync everything written so far and advance the recovery point."""

    def close():
        """Flush and release file handles."""


class ILogStorage(Interface):
    """The set of partition logs of one broker (a data directory)."""

    def open_log(topic, partition, topic_config):
        """Return the IPartitionLog for the partition, creating it if missing."""

    def get_log(topic, partition):
        """Return the IPartitionLog, or ``None`` if the partition has no log."""

    def delete_log(topic, partition):
        """Remove the partition's log and all of its data."""

    def logs():
        """Return a list of every open IPartitionLog."""

    def flush_all():
        """fsync every log and write the recovery-point checkpoint."""

    def close():
        """Flush, write the recovery-point checkpoint, release every file."""


class IPartitioner(Interface):
    """Chooses a partition for a keyed or unkeyed record (clients, CLI)."""

    def partition(topic, key, num_partitions):
        """Return a partition number in ``range(num_partitions)``."""


class IRetentionPolicy(Interface):
    """Decides which old segments of a log may be deleted."""

    def segments_to_delete(log, topic_config, now_ms):
        """Return how many of the oldest segments of ``log`` to delete."""


class ISerializer(Interface):
    """Turns application values into record bytes and back."""

    def serialize(topic, value):
        """Return bytes for ``value``."""

    def deserialize(topic, data):
        """Return the value encoded in ``data`` (bytes)."""


class ISchemaRegistry(Interface):
    """Stores schemas and hands out their integer ids.

    Schemas are JSON text (Avro); errors are
    :class:`pluglog.serialization.registry.RegistryError` carrying the
    Confluent Schema Registry's HTTP status and error code."""

    def register(subject, schema):
        """Return the id of ``schema`` under ``subject`` (idempotent)."""

    def get_schema(schema_id):
        """Return the schema stored under ``schema_id``."""

    def lookup(subject, schema):
        """Return the id of ``schema`` if registered under ``subject``
        (never registers)."""

    def get_latest(subject):
        """Return ``(schema id, version, schema)`` of the subject's latest
        live version."""

    def subjects():
        """Return the names of the subjects that have live versions."""


class ICoordinator(Interface):
    """Cluster metadata: brokers, topics, partition leaders, controller.

    Records and the listener/event contract are in
    :mod:`pluglog.coordination.state`. Every method runs on the reactor
    thread; blocking clients (kazoo) stay in their own threads."""

    def start():
        """Begin coordinating; returns a Deferred fired when ready."""

    def stop():
        """Stop coordinating; returns a Deferred."""

    def brokers():
        """Return a list of ``(node_id, host, port, rack)`` tuples."""

    def controller_id():
        """Return the node id of the controller."""

    def cluster_id():
        """Return the cluster id string."""

    def topics():
        """Return a dict ``{topic: TopicMetadata}``."""

    def create_topic(
        name, num_partitions, replication_factor, configs, validate_only=False, assignments=None
    ):
        """Create a topic; returns a Deferred. Fails with TopicExistsError,
        InvalidTopicError, InvalidPartitionsError, InvalidReplicationFactorError,
        InvalidReplicaAssignmentError or InvalidConfigError. ``validate_only``
        checks without creating; ``assignments`` (``{partition: [broker ids]}``,
        CreateTopics' explicit assignment) replaces the computed one."""

    def delete_topic(name):
        """Delete a topic; returns a Deferred."""

    def create_partitions(name, total_count, validate_only=False, assignments=None):
        """Grow a topic to ``total_count`` partitions; returns a Deferred.
        ``validate_only`` checks without growing; ``assignments`` (a list of
        broker-id lists, one per new partition) replaces the computed one."""

    def alter_topic_config(name, configs):
        """Replace the topic's overridden configs; returns a Deferred."""

    def add_listener(listener):
        """Call ``listener(event, payload)`` on metadata changes (see
        :mod:`pluglog.coordination.state` for the events)."""

    def partition_state(topic, partition):
        """Return the partition's PartitionState, or ``None`` if unknown."""

    def alter_isr(topic, partition, state, new_isr):
        """Conditionally replace the ISR of a partition this broker leads;
        returns a Deferred of the new PartitionState or fails with
        StaleStateError when ``state`` is no longer current."""

    def elect_leaders(partitions, preferred=True):
        """Elect the preferred (or, with ``preferred=False``, any live,
        unclean if needed) leader of ``[(topic, partition)]``; returns a
        Deferred of ``{(topic, partition): None | KafkaError}``."""

    def reassign_partitions(targets):
        """Start (``{(topic, partition): [broker ids]}``) or cancel (``None``
        instead of the list) replica reassignments; returns a Deferred of
        ``{(topic, partition): None | KafkaError}``."""

    def list_reassignments():
        """Return ``{(topic, partition): {"replicas", "adding_replicas",
        "removing_replicas"}}`` of reassignments in progress."""

    def controlled_shutdown():
        """Move leadership away from this broker before it stops; returns a
        Deferred fired when no partition it leads has another live ISR member."""


class ISink(Interface):
    """Copies topics somewhere else by reading the log like a consumer."""

    def make_service(broker, name, settings):
        """Return an IService that runs the sink alongside the broker.

        ``name`` is the NAME of the broker config section ``[sink:NAME]`` and
        ``settings`` its keys (strings); bad settings raise ConfigError naming
        the key and value."""


class IAuthenticator(Interface):
    """Authenticates a connection (SASL mechanisms)."""

    def mechanisms():
        """Return the SASL mechanism names offered."""

    def start(mechanism, store):
        """Begin one server-side SASL exchange of ``mechanism`` checked
        against ``store`` (``scram_credentials()``: salted credentials only).

        Returns an object with ``step(token) -> bytes`` (the challenge to
        send; raises :class:`pluglog.security.sasl.AuthenticationFailed`
        with a reason that never holds the password), ``complete`` (bool)
        and ``username`` (str, once complete)."""


class IAuthorizer(Interface):
    """Decides whether a principal may perform an operation on a resource (ACLs)."""

    def authorize(principal, host, operation, resource_type, resource_name):
        """Return True when allowed (Kafka's rules: deny wins, super users pass)."""

    def create_acls(bindings):
        """Add ACL bindings; return per binding None (added), an error message
        (answered INVALID_REQUEST) or a ``(code, message)`` pair."""

    def describe_acls(binding_filter):
        """Return the bindings matching a filter."""

    def delete_acls(filters):
        """Remove and return the bindings matching each filter (one list per filter)."""
