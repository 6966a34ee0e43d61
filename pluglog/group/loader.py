"""Rebuilds the groups and committed offsets of one ``__consumer_offsets`` partition.

The coordinator starts a :class:`Loader` when this broker becomes the leader
of an offsets partition (Kafka's GroupMetadataManager.loadGroupsAndOffsets).
It reads that partition from its log start to its end, one read chunk (at
most 8 MiB) per reactor turn so the reactor keeps answering other requests
(group APIs of that partition say COORDINATOR_LOAD_IN_PROGRESS until the
Deferred of :meth:`Loader.run` fires). Records are applied in log order, so
the last value of a key wins and a null value (tombstone) removes it, which
is exactly what compaction would have left. A load whose partition was
unloaded meanwhile (leadership moved on, the coordinator stopped) stops at
its next chunk and fires with None.

KIP-848 consumer groups (key versions 3-8) are gathered by
:class:`pluglog.group.consumer_records.ConsumerLoad` and come back with
their epochs, targets and members' current assignments.

Loaded classic groups with members come back Stable with their generation,
assignments and static members; their session timers start when the
coordinator installs them, so members that vanished while the group had no
coordinator expire after one session timeout. Groups with no members come
back Empty.
"""

import struct

from twisted.internet import defer
from twisted.logger import Logger

from pluglog.group.consumer_records import CONSUMER_KEY_VERSIONS, ConsumerLoad
from pluglog.group.model import EMPTY, STABLE, Group, Member
from pluglog.group.store import parse_group_value, parse_key, parse_offset_value
from pluglog.protocol.control import COMMIT, parse_marker

log = Logger()


class Loader:
    """One load of one offsets partition for a :class:`GroupCoordinator`.

    ``current()`` says whether the load is still wanted; it is asked before
    every chunk.
    """

    def __init__(self, coordinator, partition, current):
        self.coordinator = coordinator
        self.reactor = coordinator.reactor
        self.partition = partition
        self.current = current
        self.offsets = {}  # group -> {(topic, partition): OffsetAndMetadata}
        self.metadata = {}  # group -> GroupRecord, or None once deleted
        self.skipped = 0
        self.txn_records = {}  # producer id -> [(key, value)] of an open transaction
        self.consumer = ConsumerLoad()
        self.deferred = defer.Deferred()
        self._chunks = None

    def run(self):
        self._chunks = self.coordinator.store.read_batches(self.partition)
        self.reactor.callLater(0, self._step)
        return self.deferred

    def _step(self):
        if not self.current():
            # Unloaded or stopped while loading: the log may be changing or
            # closing under us, and nobody wants the result.
            self.deferred.callback(None)
            return
        try:
            chunk = next(self._chunks, None)
            if chunk is not None:
                for batch in chunk:
                    self._apply_batch(batch)
                self.reactor.callLater(0, self._step)
                return
            groups = self._build()
        except Exception:
            self.deferred.errback()
            return
        if self.skipped:
            log.warn(
                "skipped {n} unreadable record(s) in {topic}-{index}",
                n=self.skipped,
                topic=self.partition.topic,
                index=self.partition.index,
            )
        self.deferred.callback(groups)

    def _apply_batch(self, batch):
        # Offsets committed in a transaction count once its COMMIT marker
        # is read and never after an ABORT; still open at the end, they
        # become the group's pending transactional offsets.
        pid = batch.producer_id
        if batch.is_control:
            records = self.txn_records.pop(pid, ())
            if batch.records and parse_marker(batch.records[0].key)[0] == COMMIT:
                for key, value in records:
                    self._apply(key, value)
        elif batch.is_transactional:
            self.txn_records.setdefault(pid, []).extend((r.key, r.value) for r in batch.records)
        else:
            for record in batch.records:
                self._apply(record.key, record.value)

    def _apply(self, key, value, offsets=None):
        try:
            (version,) = struct.unpack_from(">h", key)
            if version in CONSUMER_KEY_VERSIONS:
                self.consumer.apply(version, key, value)
                return
            parsed = parse_key(key)
            if parsed[0] == "offset":
                _kind, group_id, topic, partition = parsed
                if offsets is None:
                    offsets = self.offsets.setdefault(group_id, {})
                else:
                    offsets = offsets.setdefault(group_id, {})
                if value is None:
                    offsets.pop((topic, partition), None)
                else:
                    offsets[(topic, partition)] = parse_offset_value(value)
            else:
                group_id = parsed[1]
                self.metadata[group_id] = None if value is None else parse_group_value(value)
        except (ValueError, TypeError, IndexError, struct.error) as exc:
            # One bad record (another writer, a newer format) must not hide
            # every other group; it is counted and reported once.
            self.skipped += 1
            log.debug("unreadable __consumer_offsets record: {exc}", exc=exc)

    def _build(self):
        now = self.coordinator.now_ms()
        groups = {}
        pending = {}  # group -> {pid: {(topic, partition): om}}
        for pid, records in self.txn_records.items():
            staged = {}
            for key, value in records:
                self._apply(key, value, staged)
            for group_id, offsets in staged.items():
                pending.setdefault(group_id, {})[pid] = offsets
        consumer = {g for g in self.consumer.groups if self.consumer.is_consumer(g)}
        for group_id in set(self.offsets) | set(self.metadata) | set(pending) | consumer:
            record = self.metadata.get(group_id)
            offsets = self.offsets.get(group_id) or {}
            if group_id in consumer:
                group = self.consumer.build(group_id, now)
                group.offsets = offsets
                group.pending_txn = pending.get(group_id, {})
                group.refresh_state(now)
                groups[group_id] = group
                continue
            if record is None and not offsets and group_id not in pending:
                continue
            group = Group(group_id, now)
            group.offsets = offsets
            group.pending_txn = pending.get(group_id, {})
            if record is not None:
                self._restore(group, record)
            groups[group_id] = group
        return groups

    @staticmethod
    def _restore(group, record):
        group.protocol_type = record.protocol_type or None
        group.generation_id = record.generation_id
        group.protocol_name = record.protocol_name
        if record.state_timestamp >= 0:
            group.state_timestamp = record.state_timestamp
        for fields in record.members:
            (
                member_id,
                instance_id,
                client_id,
                host,
                rebalance,
                session,
                subscription,
                assignment,
            ) = fields
            member = Member(
                member_id,
                instance_id,
                client_id,
                host,
                session,
                rebalance,
                group.protocol_type,
                [(group.protocol_name, subscription)],
            )
            member.assignment = assignment
            group.add(member)
        group.leader_id = record.leader_id if record.leader_id in group.members else None
        if group.leader_id is None and group.members:
            group.leader_id = next(iter(group.members))
        # Loading is not a transition: the group resumes where it was stored.
        group.state = STABLE if group.members else EMPTY
