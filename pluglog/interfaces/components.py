"""The contracts of the other plugin kinds: partitioner, replica selector,
retention, serialization and schema registry, coordination, sinks,
authentication and authorization.

Like the storage contracts, their methods run on the reactor thread unless
an interface says otherwise.
"""

from zope.interface import Interface


class IPartitioner(Interface):
    """Chooses a partition for a keyed or unkeyed record (clients, CLI)."""

    def partition(topic, key, num_partitions):
        """Return a partition number in ``range(num_partitions)``."""


class IReplicaSelector(Interface):
    """Chooses the replica a consumer should fetch from (KIP-392).

    Chosen by name: ``replica.selector.class`` (built-in: ``leader``, the
    default, and ``rack-aware``; Kafka's class names for both are accepted).
    The leader calls it for a consumer's Fetch v11+ that names its rack
    (``client.rack``), per partition, when no preferred replica is cached."""

    def select(topic, partition, client_rack, leader, candidates):
        """Return the broker id the consumer should read from, or ``None``
        for the leader. ``leader`` and each of ``candidates`` (the leader
        first, then the followers that are alive, caught up and hold the
        fetch offset) is a :class:`pluglog.broker.replica_selection.ReplicaView`
        with ``broker_id``, ``rack`` and ``log_end_offset``."""


class IRetentionPolicy(Interface):
    """Decides which old segments of a log may be deleted.

    Chosen by name: ``retention.policy`` per topic, ``log.retention.policy``
    / ``--retention`` for the rest (built-in: ``delete``)."""

    def segments_to_delete(log, topic_config, now_ms):
        """Return how many of the oldest segments of ``log`` (an
        IPartitionLog; use ``log.segment_infos()`` and ``log.size_bytes``)
        to delete, never counting the active one. The broker calls it every
        ``log.retention.check.interval.ms`` for each hosted partition with
        the topic's TopicConfig, then ``log.delete_oldest_segments(count)``."""


class ISerializer(Interface):
    """Turns application values into record bytes and back."""

    def serialize(topic, value):
        """Return bytes for ``value``; ``None`` may stay ``None`` (a
        tombstone, as Kafka's serializers keep it)."""

    def deserialize(topic, data):
        """Return the value encoded in ``data`` (bytes, or ``None`` for a
        null value)."""


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
        name,
        num_partitions,
        replication_factor,
        configs,
        validate_only=False,
        assignments=None,
        timeout=None,
    ):
        """Create a topic; returns a Deferred. Fails with TopicExistsError,
        InvalidTopicError, InvalidPartitionsError, InvalidReplicationFactorError,
        InvalidReplicaAssignmentError or InvalidConfigError. ``validate_only``
        checks without creating; ``assignments`` (``{partition: [broker ids]}``,
        CreateTopics' explicit assignment) replaces the computed one. The
        Deferred fires once every partition has a leader; ``timeout``
        (seconds: what is left of a CreateTopics' ``timeout_ms``, passed by
        that request only, not by internal topics or auto-creation) bounds
        that wait: past it, the topic stays created and the Deferred fails
        with RequestTimedOutError, as Kafka answers."""

    def delete_topic(name):
        """Delete a topic; returns a Deferred."""

    def create_partitions(name, total_count, validate_only=False, assignments=None, timeout=None):
        """Grow a topic to ``total_count`` partitions; returns a Deferred.
        ``validate_only`` checks without growing; ``assignments`` (a list of
        broker-id lists, one per new partition) replaces the computed one;
        ``timeout`` (seconds, a CreatePartitions' own) bounds the wait for the
        new partitions' leaders, past which it fails with RequestTimedOutError
        (the partitions stay), as for :meth:`create_topic`."""

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

    def replicas_offline(partitions, log_dirs):
        """This broker's replicas of ``[(topic, partition)]`` went offline with
        their failed log dirs ``log_dirs``: leadership moves to other in-sync
        replicas and this broker leaves their ISRs until it restarts (a
        single-node coordinator has nothing to move). Returns a Deferred."""


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
