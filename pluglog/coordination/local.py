"""The ``local`` coordinator: single-node cluster metadata kept in the data dir.

The file ``<data-dir>/pluglog-metadata.json`` holds the cluster id and every
topic (partition count, config overrides, topic id). It is rewritten
atomically (write a temp file, fsync, rename, fsync the directory) on every
change, so a crash leaves either the old or the new metadata. This broker is
the only broker and the controller. ``meta.properties`` (Kafka's file, see
:mod:`pluglog.datadir`) records the cluster id too, with
``pluglog.coordinator=local``, so a ZooKeeper cluster member's data dir is
refused here and this one there.
"""

import json
import os
import uuid

from twisted.internet import defer
from zope.interface import implementer

from pluglog import topicids
from pluglog.coordination.state import PartitionState, TopicMetadata
from pluglog.coordination.topicchecks import (
    check_partition_count,
    refuse_existing,
    topic_configs,
    validate_topic_name,
)
from pluglog.datadir import COORDINATOR_KEY, LOCAL, check_all_meta_properties, read_meta_properties
from pluglog.errors import (
    ConfigError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from pluglog.fileutil import atomic_write
from pluglog.interfaces import ICoordinator

METADATA_FILE = "pluglog-metadata.json"


@implementer(ICoordinator)
class LocalCoordinator:
    """One broker, its own controller; metadata in a JSON file."""

    def __init__(self, config):
        self.config = config
        self.path = os.path.join(config.data_dir, METADATA_FILE)
        self._topics = {}
        self._cluster_id = config.cluster_id
        self._listeners = []
        self._client_quotas = {}
        self._broker_configs = {}

    def add_listener(self, listener):
        """``listener(event, topic_metadata)`` for 'created', 'deleted', 'changed'."""
        self._listeners.append(listener)

    def _notify(self, event, meta):
        for listener in list(self._listeners):
            listener(event, meta)

    def start(self):
        try:
            return self._start()
        except ConfigError:
            return defer.fail()

    def _start(self):
        os.makedirs(self.config.data_dir, exist_ok=True)
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as handle:
                state = json.load(handle)
            self._cluster_id = state.get("cluster_id") or self._cluster_id
            self._broker_configs = dict(state.get("broker_configs", {}))
            for item in state.get("client_quotas", []):
                entity = tuple(sorted((t, n) for t, n in item["entity"]))
                self._client_quotas[entity] = dict(item["values"])
            node = self.config.broker_id
            for name, info in state.get("topics", {}).items():
                count = info["partitions"]
                self._topics[name] = TopicMetadata(
                    name,
                    count,
                    dict(info.get("configs", {})),
                    # A topic from before topic ids gets one now, once (saved below).
                    info.get("topic_id") or topicids.new_topic_id(),
                    bool(info.get("internal", False)),
                    {p: [node] for p in range(count)},
                )
        props = read_meta_properties(self.config.data_dir)
        if not self._cluster_id and props and props.get(COORDINATOR_KEY) == LOCAL:
            self._cluster_id = props.get("cluster.id")
        if not self._cluster_id:
            self._cluster_id = _new_cluster_id()
        check_all_meta_properties(
            self.config.data_dirs,
            self._cluster_id,
            self.config.broker_id,
            LOCAL,
            f"the single-node cluster {self._cluster_id} of this --coordinator local broker",
        )
        self._save()
        return defer.succeed(None)

    def stop(self):
        return defer.succeed(None)

    def _save(self):
        state = {
            "version": 1,
            "cluster_id": self._cluster_id,
            "broker_id": self.config.broker_id,
            "topics": {
                t.name: {
                    "partitions": t.num_partitions,
                    "configs": t.configs,
                    "topic_id": t.topic_id,
                    "internal": t.internal,
                }
                for t in self._topics.values()
            },
            "broker_configs": self._broker_configs,
            "client_quotas": [
                {"entity": [list(pair) for pair in entity], "values": values}
                for entity, values in sorted(self._client_quotas.items(), key=repr)
            ],
        }
        atomic_write(self.path, json.dumps(state, indent=1, sort_keys=True).encode())

    def partition_state(self, topic, partition):
        """The only broker leads every partition, in epoch 0, alone in its ISR."""
        meta = self._topics.get(topic)
        if meta is None or not 0 <= partition < meta.num_partitions:
            return None
        node = self.config.broker_id
        return PartitionState(node, 0, (node,))

    def alter_isr(self, topic, partition, state, new_isr):
        # One replica: the ISR never changes, so there is nothing to store.
        return defer.succeed(self.partition_state(topic, partition))

    def elect_leaders(self, partitions, preferred=True):
        """Every partition already has its preferred (and only) leader."""
        return defer.succeed({tp: None for tp in partitions})

    def controlled_shutdown(self):
        return defer.succeed(None)

    def replicas_offline(self, partitions, log_dirs):
        """One broker: no other replica could lead them."""
        return defer.succeed(None)

    def brokers(self):
        config = self.config
        rack = config.broker_rack or None
        return [(config.broker_id, config.advertised_host, config.advertised_port, rack)]

    def controller_id(self):
        return self.config.broker_id

    def cluster_id(self):
        return self._cluster_id

    def topics(self):
        return dict(self._topics)

    def create_topic(
        self,
        name,
        num_partitions,
        replication_factor,
        configs,
        internal=False,
        validate_only=False,
        assignments=None,
        timeout=None,
    ):
        # (``timeout`` bounds a wait for leaders: here each partition has its
        # leader, this broker, as the topic is made.)
        try:
            validate_topic_name(name)
            if assignments:
                num_partitions, replication_factor = self._check_assignment(assignments, 0)
            refuse_existing(name, self._topics)
            check_partition_count(num_partitions)
            if replication_factor != 1:
                raise InvalidReplicationFactorError(
                    f"replication factor {replication_factor} exceeds the 1 available broker"
                    if replication_factor > 1
                    else f"replication factor must be >= 1, got {replication_factor}"
                )
            configs = topic_configs(configs)
        except Exception:
            return defer.fail()
        node = self.config.broker_id
        meta = TopicMetadata(
            name,
            num_partitions,
            configs,
            topicids.new_topic_id(),
            internal,
            {p: [node] for p in range(num_partitions)},
        )
        if validate_only:
            return defer.succeed(meta)
        self._topics[name] = meta
        self._save()
        self._notify("created", meta)
        return defer.succeed(meta)

    def delete_topic(self, name):
        meta = self._topics.pop(name, None)
        if meta is None:
            return defer.fail(UnknownTopicOrPartitionError(f"no topic {name!r}"))
        self._save()
        self._notify("deleted", meta)
        return defer.succeed(meta)

    def _check_assignment(self, assignments, first):
        """Explicit assignments can only name this broker, once per partition."""
        rows = list(assignments.values() if isinstance(assignments, dict) else assignments)
        node = self.config.broker_id
        if isinstance(assignments, dict) and sorted(assignments) != list(
            range(first, first + len(rows))
        ):
            raise InvalidReplicaAssignmentError(
                f"partitions of the assignment must start at {first} without gaps"
            )
        for replicas in rows:
            if list(replicas) != [node]:
                raise InvalidReplicaAssignmentError(
                    f"replicas {list(replicas)}: the only broker is {node}"
                )
        return len(rows), 1

    def reassign_partitions(self, targets):
        """One broker: the only valid target is the current replica list."""
        results = {}
        for (topic, partition), replicas in targets.items():
            meta = self._topics.get(topic)
            if meta is None or not 0 <= partition < meta.num_partitions:
                results[(topic, partition)] = UnknownTopicOrPartitionError(
                    f"no partition {topic}-{partition}"
                )
            elif replicas is None:
                results[(topic, partition)] = NoReassignmentInProgressError(
                    f"{topic}-{partition}: no reassignment in progress"
                )
            elif list(replicas) != [self.config.broker_id]:
                results[(topic, partition)] = InvalidReplicaAssignmentError(
                    f"replicas {list(replicas)}: the only broker is {self.config.broker_id}"
                )
            else:
                results[(topic, partition)] = None
        return defer.succeed(results)

    def list_reassignments(self):
        return {}

    def create_partitions(
        self, name, total_count, validate_only=False, assignments=None, timeout=None
    ):
        # (``timeout``: each new partition has its leader, this broker, as made.)
        meta = self._topics.get(name)
        if meta is None:
            return defer.fail(UnknownTopicOrPartitionError(f"no topic {name!r}"))
        if assignments:
            try:
                self._check_assignment(assignments, meta.num_partitions)
            except InvalidReplicaAssignmentError:
                return defer.fail()
        if total_count <= meta.num_partitions:
            return defer.fail(
                InvalidPartitionsError(
                    f"topic {name!r} has {meta.num_partitions} partitions; "
                    f"the new count {total_count} must be larger"
                )
            )
        if validate_only:
            return defer.succeed(meta)
        meta.num_partitions = total_count
        meta.assignment = {p: [self.config.broker_id] for p in range(total_count)}
        self._save()
        self._notify("changed", meta)
        return defer.succeed(meta)

    def alter_topic_config(self, name, configs):
        meta = self._topics.get(name)
        if meta is None:
            return defer.fail(UnknownTopicOrPartitionError(f"no topic {name!r}"))
        try:
            configs = topic_configs(configs)
        except InvalidConfigError:
            return defer.fail()
        meta.configs = configs
        self._save()
        self._notify("changed", meta)
        return defer.succeed(meta)

    def broker_configs(self, name=None):
        """The dynamic broker config overrides ({Kafka key: str}); one broker,
        so the default ("") and this broker's id name the same set."""
        return dict(self._broker_configs)

    def alter_broker_configs(self, configs, name=None):
        """Replace the dynamic broker config overrides; returns a Deferred."""
        self._broker_configs = {k: str(v) for k, v in configs.items()}
        self._save()
        return defer.succeed(None)

    def client_quotas(self):
        """``{entity: {key: value}}`` (see :mod:`pluglog.broker.quotas`)."""
        return {entity: dict(values) for entity, values in self._client_quotas.items()}

    def alter_client_quotas(self, changes):
        """Replace the values of each entity in ``changes`` ({entity: {key:
        value}}; an empty dict removes the entity), persist, notify
        ``client_quotas`` listeners; returns a Deferred."""
        for entity, values in changes.items():
            if values:
                self._client_quotas[entity] = dict(values)
            else:
                self._client_quotas.pop(entity, None)
        self._save()
        self._notify("client_quotas", self.client_quotas())
        return defer.succeed(None)


def _new_cluster_id():
    # Kafka cluster ids are 22-character URL-safe base64 UUIDs.
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def make_local(config, reactor):
    return LocalCoordinator(config)
