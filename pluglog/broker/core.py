"""The Broker: storage, coordinator and partitions wired together, no sockets.

This is the object handlers work against and the one plugins receive in the
lifecycle hooks. It owns the partition table, keeps it in step with the
coordinator's topic metadata, runs retention and flushes. All methods run on
the reactor thread; ``now_ms`` comes from the reactor's clock.
"""

from twisted.internet import defer
from twisted.logger import Logger

from pluglog.broker import dynamic_config, limits, topic_ids
from pluglog.broker.capabilities import StorageChecks
from pluglog.broker.checkpoint import Checkpointer
from pluglog.broker.fetch_sessions import FetchSessionCache
from pluglog.broker.log_dirs import check_log_dirs, report_offline_at_start
from pluglog.broker.log_moves import LogDirMover
from pluglog.broker.log_opening import NewLogs
from pluglog.broker.partition import Partition
from pluglog.broker.producer_ids import ProducerIdAllocator
from pluglog.broker.quotas import ClientQuotas
from pluglog.broker.quotas import attach as attach_quotas
from pluglog.broker.remote_config import check_remote_storage
from pluglog.broker.topic_ids import TopicIds
from pluglog.broker.txn_markers import write_txn_markers
from pluglog.config_keys import INT64_MAX
from pluglog.datadir import DataDirLocks
from pluglog.errors import (
    ConfigError,
    InvalidConfigError,
    InvalidRequestError,
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    PluginError,
    UnknownTopicOrPartitionError,
)
from pluglog.interfaces import IDirectoryLog, IFlushableLog, IOfflineLog, IScheduledFlushStorage
from pluglog.serialization.validation import schema_check_for
from pluglog.storage.offline import OfflineLog

log = Logger()

#: Kafka's Topic.INTERNAL_TOPICS: internal whatever their metadata says
INTERNAL_TOPICS = frozenset(("__consumer_offsets", "__transaction_state", "__share_group_state"))


def is_internal(meta):
    """Kafka's Topic.isInternal, plus topics created as internal."""
    return bool(getattr(meta, "internal", False)) or meta.name in INTERNAL_TOPICS


class Broker:
    """One broker's components and partitions."""

    def __init__(self, config, registry, reactor):
        self.config = config
        self.registry = registry
        self.reactor = reactor
        self.hook = registry.manager.hook
        # Before anything reads or writes in the data dir (recovery, the
        # clean-shutdown marker, the coordinator's files): a second broker
        # process on the same dir stops here, having touched nothing.
        self.data_dir_lock = DataDirLocks.acquire(config.data_dirs)
        #: Opened by start() once the coordinator has checked meta.properties.
        self.storage = None
        self.storage_checks = None
        #: log dirs whose partitions were taken offline (broker.log_dirs)
        self.failed_log_dirs = set()
        #: AlterReplicaLogDirs moves (broker.log_moves)
        self.log_mover = LogDirMover(self)
        self._starting = True
        try:
            self.coordinator = registry.build("coordinator", config.coordinator, config, reactor)
            #: IRetentionPolicy providers by name (``retention.policy``), built on first use
            self.retention_policies = {}
            self._missing_policies = set()
            self.retention = self.retention_policy(config.topic_defaults.retention_policy)
            #: IReplicaSelector (``replica.selector.class``), None: consumers read the leader
            self.replica_selector = None
            if config.replica_selector_class:
                self.replica_selector = registry.build(
                    "replica_selector", config.replica_selector_class, config, reactor
                )
        except BaseException:
            self.data_dir_lock.release()
            raise
        self.partitions = {}
        #: new partitions' logs being opened and synced (CreateTopics waits)
        self.new_logs = NewLogs(self)
        self.checkpointer = Checkpointer(self)
        self.topic_configs = {}
        #: topic id -> name (KIP-516), kept in step with the coordinator
        self.topic_ids = TopicIds()
        self.node_id = config.broker_id
        self.advertised = (config.advertised_host, config.advertised_port)
        self.group_coordinator = None
        self.txn_coordinator = None
        self._producer_ids = None
        self.replicas = None
        self.quotas = ClientQuotas(config)
        #: incremental fetch sessions (KIP-227) of consumers and followers
        self.fetch_sessions = FetchSessionCache(
            config.max_incremental_fetch_session_cache_slots,
            config.fetch_max_bytes,
            lookup=self._session_partition,
        )
        #: The built-in schema registry once the --http listener loaded it.
        self.schema_registry = None
        #: The built-in log cleaner once its service is made (its ``stats``
        #: are read by pluglog.metrics); None when log.cleaner.enable is false.
        self.cleaner = None
        #: The remote log manager (pluglog.tiered) when tiered storage is on.
        self.remote_log_manager = None

    def _session_partition(self, key, name, index):
        """A fetch session entry's Partition (``key``: "topic_id" from v13)."""
        if key == "topic_id":
            name = self.topic_ids.name_of(name)
        return self.partitions.get((name, index))

    def now_ms(self):
        return int(self.reactor.seconds() * 1000)

    def retention_policy(self, name):
        """The IRetentionPolicy provider called ``name`` (built once); raises
        PluginError naming the value and the known names."""
        policy = self.retention_policies.get(name)
        if policy is None:
            policy = self.registry.build("retention", name, self.config, self.reactor)
            self.retention_policies[name] = policy
        return policy

    def check_topic_configs(self, configs, topic="", replication_factor=1):
        """Raise a KafkaError when topic ``configs`` name a provider that is
        not installed, or need a capability the storage lacks (CreateTopics,
        AlterConfigs). Malformed values are left to the coordinator."""
        name = configs.get("retention.policy")
        if name is not None and str(name).strip() not in self.registry.names("retention"):
            known = ", ".join(self.registry.names("retention"))
            raise InvalidConfigError(
                f"retention.policy: no retention policy named {name!r} (known: {known})"
            )
        try:
            effective = self.config.topic_defaults.with_overrides(configs)
        except ConfigError:
            return  # the coordinator answers INVALID_CONFIG
        if effective.remote_storage_enable:
            check_remote_storage(effective, self.config.remote_log_storage_system_enable)
        elif topic in self.topic_configs and self.topic_configs[topic].remote_storage_enable:
            # Kafka 3.6-3.8's rule: its remote data would be left unreachable
            # (and its local segments kept for an upload that never comes).
            raise InvalidConfigError(
                "Disabling remote storage feature on the topic level is not supported."
            )
        self.storage_checks.new_topic(topic, effective, replication_factor)

    @defer.inlineCallbacks
    def start(self):
        from pluglog.replication.manager import ReplicaManager

        yield self.coordinator.start()
        # Only now that the coordinator has refused a data dir of another
        # cluster (meta.properties) are the logs opened and recovered.
        self.storage = self.registry.build(
            "storage", self.config.storage, self.config, self.reactor
        )
        self.storage_checks = StorageChecks(
            self.storage,
            self.config.storage,
            self.registry.plugin_of("storage", self.config.storage),
        )
        self.storage_checks.verify_log_class()
        attach_quotas(self)
        dynamic_config.apply(self)
        dynamic_config.follow(self)
        self.replicas = ReplicaManager(self)
        self.coordinator.add_listener(self._on_topic_event)
        for meta in self.coordinator.topics().values():
            self._open_topic(meta)
        self._starting = False
        self.replicas.start()
        report_offline_at_start(self)
        from pluglog.group import GroupCoordinator

        self.group_coordinator = GroupCoordinator(self)
        # Not awaited: loading __consumer_offsets runs one read chunk per
        # reactor turn while group APIs answer COORDINATOR_LOAD_IN_PROGRESS;
        # a failed load is logged by start() and leaves produce/fetch working.
        self.group_coordinator.start().addErrback(lambda _failure: None)
        from pluglog.replication.peer import connect
        from pluglog.txn import TransactionCoordinator

        self.txn_coordinator = TransactionCoordinator(self, self.allocate_producer_id, connect)
        self.txn_coordinator.start()

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
        """Open the logs of the topic's partitions this broker hosts (it is
        in their replica assignment); drop those reassigned away. New ones
        are opened at once at start-up, else by ``new_logs`` (in slices of
        the reactor, then synced together)."""
        adopted = meta.topic_id and self.topic_ids.id_of(meta.name) != meta.topic_id
        self.topic_ids.update(meta)
        topic_config = self.config.topic_defaults.with_overrides(meta.configs)
        self.topic_configs[meta.name] = topic_config
        new = []
        for index in range(meta.num_partitions):
            key = (meta.name, index)
            part = self.partitions.get(key)
            hosted = self.node_id in meta.replicas(index)
            if part is None and hosted:
                new.append(index)
            elif part is not None and not hosted:
                self._drop_partition(key)
            elif part is not None:
                part.config = topic_config
                part.log.update_config(topic_config)
                if adopted:
                    # The topic was given its id now (an upgraded cluster).
                    topic_ids.adopt(meta, part.log)
                part.schema_check = schema_check_for(self, meta.name, topic_config)
        if not new:
            return
        if self._starting or is_internal(meta):
            # Internal topics (50 partitions at most by default) open in
            # this turn, as before log_opening: their coordinators serve as
            # soon as FindCoordinator names them.
            for index in new:
                self.open_new_partition(meta, index)
        else:
            self.new_logs.open(meta.name, new)

    def open_new_partition(self, meta, index, sync=True):
        """Open (creating it if need be) the log of hosted partition
        ``index`` of ``meta`` and serve it; ``sync=False`` writes its
        ``partition.metadata`` without fsyncs (``new_logs`` syncs the new
        logs together). Returns the log's directory to sync, or None (not
        hosted here, already open, no directory)."""
        key = (meta.name, index)
        topic_config = self.topic_configs.get(meta.name)
        if key in self.partitions or topic_config is None:
            return None
        if index >= meta.num_partitions or self.node_id not in meta.replicas(index):
            return None
        plog = self._open_log(meta, index, topic_config, sync)
        part = Partition(
            meta.name,
            index,
            plog,
            topic_config,
            node_id=self.node_id,
            internal=is_internal(meta),
        )
        part.high_watermark = self.replicas.initial_high_watermark(
            meta.name, index, plog.log_end_offset
        )
        # No role until the coordinator's state says which.
        part.become_follower(-1, -1, meta.replicas(index), ())
        self.partitions[key] = part
        self.replicas.refresh(meta.name, index)
        part.schema_check = schema_check_for(self, meta.name, topic_config)
        if IDirectoryLog.providedBy(plog) and not IOfflineLog.providedBy(plog):
            return plog.directory
        return None

    def _open_log(self, meta, index, topic_config, sync=True):
        """The partition's log, checked for what the topic needs; an
        OfflineLog when it cannot be opened. A log lacking a capability the
        topic needs stops the broker at start, and is offline (one error
        line) when the topic appears later."""
        try:
            plog = self.storage.open_log(meta.name, index, topic_config)
            plog = topic_ids.stamp(self.storage, meta, index, plog, topic_config, sync)
            self.storage_checks.opened(plog, meta.name, topic_config, len(meta.replicas(index)))
        except PluginError as exc:
            if self._starting:
                raise
            plog = OfflineLog(meta.name, index, str(exc))
            log.error("{p} is offline: {reason}", p=plog, reason=str(exc))
        except (KafkaStorageError, OSError) as exc:
            # One unreadable partition must not stop the broker.
            plog = OfflineLog(meta.name, index, str(exc))
            log.error("{p} is offline: {reason}", p=plog, reason=str(exc))
        return plog

    def _drop_partition(self, key):
        part = self.partitions.pop(key)
        self.replicas.partition_removed(*key)
        part.go_offline()
        self.storage.delete_log(*key)

    def _drop_topic(self, name):
        self.new_logs.forget(name)
        self.topic_configs.pop(name, None)
        self.topic_ids.forget(name)
        for key in [k for k in self.partitions if k[0] == name]:
            self._drop_partition(key)

    def partition(self, topic, index):
        part = self.partitions.get((topic, index))
        if part is None:
            meta = self.coordinator.topics().get(topic)
            if meta is not None and 0 <= index < meta.num_partitions:
                raise NotLeaderOrFollowerError(
                    f"broker {self.node_id} does not host {topic}-{index}"
                )
            raise UnknownTopicOrPartitionError(f"no partition {topic}-{index}")
        return part

    def leadership_changed(self, part):
        """A hosted partition became leader or stopped leading."""
        if self.group_coordinator is not None:
            self.group_coordinator.leadership_changed(part)
        if self.txn_coordinator is not None:
            self.txn_coordinator.leadership_changed(part)

    def allocate_producer_id(self):
        """A producer id never handed out before, by this broker or another
        (:mod:`pluglog.broker.producer_ids`)."""
        if self._producer_ids is None:
            self._producer_ids = ProducerIdAllocator(self.config.data_dir, broker_id=self.node_id)
        return self._producer_ids.allocate()

    def write_txn_markers(self, markers):
        """WriteTxnMarkers for the partitions led here (a Deferred of the response)."""
        return write_txn_markers(self, markers)

    def is_internal(self, topic):
        """Whether ``topic`` is internal (clients may not produce, delete or
        DeleteRecords it)."""
        meta = self.coordinator.topics().get(topic)
        return topic in INTERNAL_TOPICS or (meta is not None and is_internal(meta))

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
        assignments=None,
        timeout=None,
    ):
        """Create (or with ``validate_only`` just check) a topic; -1 means the
        broker's num.partitions / default.replication.factor. ``assignments``
        ({partition: [broker ids]}) replaces both, as in CreateTopics;
        ``timeout`` (seconds) bounds the wait for the partitions' leaders
        (RequestTimedOutError past it; see ICoordinator.create_topic)."""
        if num_partitions == -1:
            num_partitions = self.config.num_partitions
        if replication_factor == -1:
            replication_factor = self.config.default_replication_factor
        most = max(map(len, assignments.values())) if assignments else replication_factor
        try:
            self.check_topic_configs(configs or {}, name, most)
        except KafkaError:
            return defer.fail()
        if num_partitions > 0:
            try:
                limits.check_new_partitions(self, num_partitions)
            except KafkaError:
                return defer.fail()
        kwargs = {"internal": True} if internal else {}
        if validate_only:
            kwargs["validate_only"] = True
        if assignments:
            kwargs["assignments"] = assignments
        if timeout is not None:
            kwargs["timeout"] = timeout
        d = self.coordinator.create_topic(
            name, num_partitions, replication_factor, configs or {}, **kwargs
        )
        if not validate_only:
            # Answer once the logs made here are durable (log_opening).
            d.addCallback(lambda meta: self.new_logs.wait(name).addCallback(lambda _: meta))
        return d

    def delete_topic(self, name):
        if not self.config.delete_topic_enable:
            return defer.fail(InvalidRequestError("delete.topic.enable is false"))
        return self.coordinator.delete_topic(name)

    def run_retention(self):
        """Delete segments the retention policy releases; returns the count."""
        now = self.now_ms()
        deleted = 0
        for part in list(self.partitions.values()):
            try:
                policy = self.retention_policy(part.config.retention_policy)
            except PluginError as exc:
                # Installed when the topic was made, gone since: keep the data.
                if part.config.retention_policy not in self._missing_policies:
                    self._missing_policies.add(part.config.retention_policy)
                    log.error("{topic}: no retention: {exc}", topic=part.topic, exc=exc)
                continue
            count = policy.segments_to_delete(part.log, part.config, now)
            if count:
                part.log.delete_oldest_segments(count)
                part.log_start_moved()
                deleted += count
                log.info(
                    "retention deleted {count} segment(s) of {topic}-{index}",
                    count=count,
                    topic=part.topic,
                    index=part.index,
                )
        return deleted

    def flush_due(self):
        """Flush logs whose flush.ms has passed (the 'interval' fsync policy);
        first, take the partitions of a failed log dir offline."""
        check_log_dirs(self)
        if self.config.fsync != "interval":
            return
        # Once a second: the clock is read once, not per log (6 % of a
        # 10,000-partition follower's event loop), and a storage that keeps
        # the logs that can be due visits only those (session 14). Other
        # storages are walked, skipping logs whose flush.ms is the default
        # (never due by time; flush.messages flushes in the append).
        now = self.now_ms()
        if IScheduledFlushStorage.providedBy(self.storage):
            self.storage.flush_due_logs(now)
            return
        for part in list(self.partitions.values()):
            if part.config.flush_ms >= INT64_MAX:
                continue
            plog = part.log
            if IFlushableLog.providedBy(plog):
                plog.maybe_flush(now)

    def checkpoint(self):
        """Flush every log, checkpoint the HWs and snapshot the producer
        state; with many logs over several turns (pluglog.broker.checkpoint)."""
        self.checkpointer.checkpoint()

    def _snapshot_producers(self):
        """A clean stop's snapshots: fsynced, the older ones unlinked at once."""
        for part in list(self.partitions.values()):
            try:
                part.snapshot_producers()
            except OSError as exc:
                log.warn("producer snapshot of {p} failed: {e}", p=part.log, e=exc)

    def controlled_shutdown(self):
        """Ask the coordinator to move leadership away and take this broker
        out of the ISRs; partitions leave its fetches as they leave its ISRs."""
        if not self.config.controlled_shutdown_enable:
            return defer.succeed(None)
        if self.replicas is not None:
            self.replicas.shutting_down()
        return self.coordinator.controlled_shutdown()

    @defer.inlineCallbacks
    def stop(self):
        if self.txn_coordinator is not None:
            yield self.txn_coordinator.stop()
        self.checkpointer.stop()
        self._snapshot_producers()
        if self.group_coordinator is not None:
            yield self.group_coordinator.stop()
        if self.replicas is not None:
            self.replicas.stop()
        self.log_mover.stop()
        for part in self.partitions.values():
            part._waiters.clear()
        self.new_logs.stop()
        if self.storage is not None:
            self.storage.close()
        yield self.coordinator.stop()
        self.data_dir_lock.release()
