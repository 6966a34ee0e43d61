"""Collectors of the broker's state, read on scrape: partitions, replication, groups.

Nothing here runs on the request path: each scrape walks the broker's
partition table, the replica manager's counters, the coordinator's cached
cluster state and the group coordinator's committed offsets, all on the
reactor thread (the ``/metrics`` resource is rendered there), so what one
scrape reports is one consistent moment.

* :class:`PartitionCollector`: per local replica (leader or follower) its log
  size, segments, log start and end offsets and high watermark.
* :class:`ReplicationCollector`: under-replicated partitions (reported by
  their leader, as Kafka's), offline partitions (by the controller), offline
  local replicas, ISR shrinks and expands, the controller flag and the
  ZooKeeper session state.
* :class:`FetchSessionCollector`: incremental fetch sessions (KIP-227) held,
  opened and evicted.
* :class:`GroupCollector`: committed offset and lag per group and partition
  for the groups this broker coordinates.
"""

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

#: kazoo's connection states, the ``state`` label of the session gauge.
ZK_STATES = ("CONNECTED", "SUSPENDED", "LOST")


def _partition_gauge(name, documentation):
    return GaugeMetricFamily(name, documentation, labels=["topic", "partition"])


class PartitionCollector:
    """Per-partition log gauges of this broker's replicas."""

    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        size = _partition_gauge("pluglog_log_size_bytes", "Bytes held by the log's segments.")
        segments = _partition_gauge("pluglog_log_segments", "Segments of the log.")
        start = _partition_gauge("pluglog_log_start_offset", "First offset still readable.")
        end = _partition_gauge("pluglog_log_end_offset", "Offset the next record gets.")
        hw = _partition_gauge(
            "pluglog_partition_high_watermark", "Offset below which consumers may read."
        )
        leader = _partition_gauge(
            "pluglog_partition_leader", "1 if this broker leads the partition, else 0."
        )
        follower_lag = GaugeMetricFamily(
            "pluglog_follower_lag_messages",
            "On the leader: offsets each follower is behind the leader's log end "
            "(by its last fetch; the whole log before its first).",
            labels=["topic", "partition", "follower"],
        )
        for (topic, index), part in sorted(self.broker.partitions.items()):
            if part.log_offline:
                continue
            labels = [topic, str(index)]
            plog = part.log
            size.add_metric(labels, plog.size_bytes)
            segments.add_metric(labels, len(plog.segment_infos()))
            start.add_metric(labels, plog.log_start_offset)
            end.add_metric(labels, plog.log_end_offset)
            hw.add_metric(labels, part.high_watermark)
            leader.add_metric(labels, 1 if part.is_leader else 0)
            if part.is_leader:
                leo = plog.log_end_offset
                for broker_id, remote in sorted(part.remotes.items()):
                    behind = leo - remote.leo if remote.leo >= 0 else leo - plog.log_start_offset
                    follower_lag.add_metric([*labels, str(broker_id)], max(0, behind))
        yield from (size, segments, start, end, hw, leader, follower_lag)


class ReplicationCollector:
    """Cluster health as this broker sees it."""

    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        broker = self.broker
        parts = list(broker.partitions.values())
        leading = [p for p in parts if p.is_leader and not p.offline]
        under = sum(1 for p in leading if len(p.isr) < len(p.replicas))
        yield GaugeMetricFamily(
            "pluglog_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replica set.",
            value=under,
        )
        yield GaugeMetricFamily(
            "pluglog_leader_partitions", "Partitions this broker leads.", value=len(leading)
        )
        yield GaugeMetricFamily(
            "pluglog_partitions", "Partition replicas on this broker.", value=len(parts)
        )
        yield GaugeMetricFamily(
            "pluglog_offline_replicas",
            "Replicas on this broker whose log could not be opened.",
            value=sum(1 for p in parts if p.log_offline),
        )
        coordinator = broker.coordinator
        controller = coordinator.controller_id() == broker.node_id
        yield GaugeMetricFamily(
            "pluglog_controller", "1 on the active controller, else 0.", value=int(controller)
        )
        yield GaugeMetricFamily(
            "pluglog_offline_partitions",
            "Partitions without a live leader (counted by the controller; 0 elsewhere).",
            value=_offline_partitions(coordinator, broker) if controller else 0,
        )
        replicas = broker.replicas
        shrinks = CounterMetricFamily(
            "pluglog_isr_shrinks",
            "ISR shrinks of partitions led here (its own or the controller's).",
        )
        expands = CounterMetricFamily("pluglog_isr_expands", "ISR expands of partitions led here.")
        shrinks.add_metric([], getattr(replicas, "isr_shrinks", 0))
        expands.add_metric([], getattr(replicas, "isr_expands", 0))
        yield shrinks
        yield expands
        client = getattr(coordinator, "client", None)
        if client is not None:
            session = GaugeMetricFamily(
                "pluglog_zookeeper_session_state",
                "1 for the ZooKeeper session's current state (kazoo's), else 0.",
                labels=["state"],
            )
            current = str(getattr(client, "state", ""))
            for state in ZK_STATES:
                session.add_metric([state], 1 if current == state else 0)
            yield session


def _offline_partitions(coordinator, broker):
    live = {entry[0] for entry in coordinator.brokers()}
    offline = 0
    for name, meta in coordinator.topics().items():
        for index in range(meta.num_partitions):
            state = coordinator.partition_state(name, index)
            if state is None or state.leader < 0 or state.leader not in live:
                offline += 1
            elif state.leader == broker.node_id:
                part = broker.partitions.get((name, index))
                if part is not None and part.log_offline:
                    offline += 1
    return offline


class GroupCollector:
    """Committed offsets and lag of the groups this broker coordinates."""

    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        committed = GaugeMetricFamily(
            "pluglog_consumer_group_committed_offset",
            "The group's committed offset of the partition.",
            labels=["group", "topic", "partition"],
        )
        lag = GaugeMetricFamily(
            "pluglog_consumer_group_lag",
            "High watermark minus the committed offset (partitions with a replica here).",
            labels=["group", "topic", "partition"],
        )
        members = GaugeMetricFamily(
            "pluglog_consumer_group_members", "Members of the group.", labels=["group"]
        )
        coordinator = getattr(self.broker, "group_coordinator", None)
        groups = {} if coordinator is None else coordinator.groups
        partitions = self.broker.partitions
        for group_id, group in sorted(groups.items()):
            members.add_metric([group_id], len(group.members))
            for (topic, index), om in sorted(group.offsets.items()):
                labels = [group_id, topic, str(index)]
                committed.add_metric(labels, om.offset)
                part = partitions.get((topic, index))
                if part is not None and not part.log_offline:
                    lag.add_metric(labels, max(part.high_watermark - om.offset, 0))
        yield committed
        yield lag
        yield members


class CleanerCollector:
    """The log cleaner's progress (compaction of ``cleanup.policy=compact``)."""

    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        cleaner = self.broker.cleaner
        if cleaner is None:
            return
        stats = cleaner.stats
        for key, name, doc in (
            ("passes", "pluglog_cleaner_passes", "Compaction passes finished."),
            ("bytes_read", "pluglog_cleaner_read_bytes", "Bytes the cleaner read."),
            ("bytes_written", "pluglog_cleaner_written_bytes", "Bytes the cleaner wrote."),
            (
                "records_removed",
                "pluglog_cleaner_removed_records",
                "Records compaction removed (superseded keys and expired tombstones).",
            ),
        ):
            yield CounterMetricFamily(name, doc, value=stats.get(key, 0))


class FetchSessionCollector:
    """The incremental fetch session cache (Kafka's NumIncrementalFetchSessions)."""

    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        cache = self.broker.fetch_sessions
        privileged = sum(1 for s in cache.sessions.values() if s.privileged)
        held = GaugeMetricFamily(
            "pluglog_fetch_sessions",
            "Incremental fetch sessions held, by kind (consumer or follower).",
            labels=["kind"],
        )
        held.add_metric(["consumer"], len(cache) - privileged)
        held.add_metric(["follower"], privileged)
        yield held
        yield GaugeMetricFamily(
            "pluglog_fetch_session_partitions",
            "Partitions in all incremental fetch sessions (NumIncrementalFetchPartitionsCached).",
            value=sum(len(s) for s in cache.sessions.values()),
        )
        yield CounterMetricFamily(
            "pluglog_fetch_sessions_created", "Fetch sessions opened.", value=cache.created
        )
        yield CounterMetricFamily(
            "pluglog_fetch_sessions_evicted",
            "Fetch sessions that lost their slot to a new one.",
            value=cache.evicted,
        )
