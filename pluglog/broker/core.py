"""The Broker: storage, coordinator and partitions wired together, no sockets.

This is the object handlers work against and the one plugins receive in the
lifecycle hooks. It owns the partition table, keeps it in step with the
coordinator's topic metadata, runs retention and flushes. All methods run on
the reactor thread; ``now_ms`` comes from the reactor's clock.
"""

from twisted.internet import defer
from twisted.logger import Logger

from pluglog.broker.partition import Partition
from pluglog.errors import (
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)

log = Logger()


class Broker:
    """One broker's components and partitions."""

    def __init__(self, config, registry, reactor):
        self.config = config
        self.registry = registry
        self.reactor = reactor
        self.hook = registry.manager.hook
        self.storage = registry.build("storage", config.storage, config, reactor)
        self.coordinator = registry.build("coordinator", config.coordinator, config, reactor)
        self.retention = registry.build("retention", "delete", config, reactor)
        self.partitions = {}
        self.topic_configs = {}
        self.node_id = config.broker_id
        self.advertised = (config.advertised_host, config.advertised_port)
        self.group_coordinator = None

    def now_ms(self):
        return int(self.reactor.seconds() * 1000)

    @defer.inlineCallbacks
    def start(self):
        yield self.coordinator.start()
        if hasattr(self.coordinator, "add_listener"):
            self.coordinator.add_listener(self._on_topic_event)
        for meta in self.coordinator.topics().values():
            self._open_topic(meta)
        from pluglog.group import GroupCoordinator

        self.group_coordinator = GroupCoordinator(self)
        # Not awaited: loading __consumer_offsets runs one read chunk per
        # reactor turn while group APIs answer COORDINATOR_LOAD_IN_PROGRESS;
        # a failed load is logged by start() and leaves produce/fetch working.
        self.group_coordinator.start().addErrback(lambda _failure: None)

    def _on_topic_event(self, event, meta):
        if event in ("created", "changed"):
            self._open_topic(meta)
            if event == "created":
                self.hook.pluglog_topic_created(
                    topic=meta.name, config=self.topic_configs[meta.name]
                )
        elif event == "deleted":
            self._drop_topic(meta.name)
            if self.group_coordinator is not None:
                self.group_coordinator.topic_deleted(meta.name)

    def _open_topic(self, meta):
        topic_config = self.config.topic_defaults.with_overrides(meta.configs)
        self.topic_configs[meta.name] = topic_config
        for index in range(meta.num_partitions):
            part = self.partitions.get((meta.name, index))
            if part is None:
                plog = self.storage.open_log(meta.name, index, topic_config)
                self.partitions[(meta.name, index)] = Partition(
                    meta.name, index, plog, topic_config
                )
            else:
                part.config = topic_config
                if hasattr(part.log, "update_config"):
                    part.log.update_config(topic_config)

    def _drop_topic(self, name):
        self.topic_configs.pop(name, None)
        for key in [k for k in self.partitions if k[0] == name]:
            self.partitions.pop(key)
            self.storage.delete_log(*key)

    def partition(self, topic, index):
        part = self.partitions.get((topic, index))
        if part is None:
            raise UnknownTopicOrPartitionError(f"no partition {topic}-{index}")
        return part

    def num_partitions(self, topic):
        meta = self.coordinator.topics().get(topic)
        return None if meta is None else meta.num_partitions

    def create_topic(
        self,
        name,
        num_partitions=-1,
        replication_factor=-1,
        configs=None,
        internal=False,
        validate_only=False,
    ):
        """Create (or with ``validate_only`` just check) a topic; -1 means the
        broker's num.partitions / default.replication.factor."""
        if num_partitions == -1:
            num_partitions = self.config.num_partitions
        if replication_factor == -1:
            replication_factor = self.config.default_replication_factor
        kwargs = {"internal": True} if internal else {}
        if validate_only:
            kwargs["validate_only"] = True
        return self.coordinator.create_topic(
            name, num_partitions, replication_factor, configs or {}, **kwargs
        )

    def delete_topic(self, name):
        if not self.config.delete_topic_enable:
            return defer.fail(InvalidRequestError("delete.topic.enable is false"))
        return self.coordinator.delete_topic(name)

    def run_retention(self):
        """Delete segments the retention policy releases; returns the count."""
        now = self.now_ms()
        deleted = 0
        for part in list(self.partitions.values()):
            count = self.retention.segments_to_delete(part.log, part.config, now)
            if count:
                part.log.delete_oldest_segments(count)
                deleted += count
                log.info(
                    "retention deleted {count} segment(s) of {topic}-{index}",
                    count=count,
                    topic=part.topic,
                    index=part.index,
                )
        return deleted

    def flush_due(self):
        """Flush logs whose flush.ms has passed (the 'interval' fsync policy)."""
        if self.config.fsync != "interval":
            return
        for part in list(self.partitions.values()):
            maybe = getattr(part.log, "maybe_flush", None)
            if maybe is not None:
                maybe(self.now_ms())

    def checkpoint(self):
        self.storage.flush_all()

    @defer.inlineCallbacks
    def stop(self):
        if self.group_coordinator is not None:
            yield self.group_coordinator.stop()
        for part in self.partitions.values():
            part._waiters.clear()
        self.storage.close()
        yield self.coordinator.stop()
