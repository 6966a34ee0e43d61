"""Committed offsets and the group admin APIs of the coordinator.

OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups, DescribeGroups and
ListGroups, plus offset expiry (``offsets.retention.minutes``), as a base
class of :class:`pluglog.group.coordinator.GroupCoordinator` so they share its
groups and store. A commit is one batch (one append) for the whole request,
so it is all-or-nothing on disk; the in-memory offsets change only after the
append succeeded, so a fetch never returns an offset that is not in the log.

Commit validation follows Kafka's classic rules (kafka-protocol.md §5.2 step
6): generation -1 on an Empty group is a "simple" commit (``assign()`` users,
admin tools); otherwise the member must exist with the current generation,
and commits are refused with REBALANCE_IN_PROGRESS while CompletingRebalance.
"""

from twisted.internet import defer
from twisted.logger import Logger

from pluglog.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    GROUP_SUBSCRIBED_TO_TOPIC,
    ILLEGAL_GENERATION,
    INVALID_COMMIT_OFFSET_SIZE,
    NON_EMPTY_GROUP,
    NONE,
    OFFSET_METADATA_TOO_LARGE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from pluglog.group.model import COMPLETING_REBALANCE, DEAD, EMPTY, STABLE, Group, OffsetAndMetadata
from pluglog.group.store import coordinator_error, group_key, offset_key, offset_value

log = Logger()

#: the largest expire timestamp the offsets record can hold (int64)
_INT64_MAX = (1 << 63) - 1
#: Kafka's offset.metadata.max.bytes default
OFFSET_METADATA_MAX_BYTES = 4096
#: Kafka's offsets.retention.check.interval.ms default
RETENTION_CHECK_INTERVAL_MS = 600000


def _store_error(failure):
    """Kafka's mapping of a failed __consumer_offsets append to a commit error."""
    return coordinator_error(failure, INVALID_COMMIT_OFFSET_SIZE)


def _topic_results(topics, code_of):
    return [
        {
            "name": t["name"],
            "partitions": [
                {"partition_index": p["partition_index"], "error_code": code_of(t["name"], p)}
                for p in t["partitions"]
            ],
        }
        for t in topics
    ]


class OffsetOperations:
    """Offset and admin operations; needs ``groups``, ``store``, ``broker``."""

    # -- OffsetCommit ------------------------------------------------------------

    def commit_offsets(
        self, group_id, generation_id, member_id, instance_id, retention_time_ms, topics
    ):
        """Returns a Deferred firing with the OffsetCommit response ``topics``."""
        error = self.group_error(group_id)
        group = self.groups.get(group_id)
        if error == NONE:
            if group is None:
                if generation_id >= 0:
                    error = ILLEGAL_GENERATION
                else:
                    group = self.groups[group_id] = Group(group_id, self.now_ms())
            else:
                error = self._commit_error(group, generation_id, member_id, instance_id)
        if error != NONE:
            return defer.succeed(_topic_results(topics, lambda *_: error))
        now = self.now_ms()
        expire = (
            # A retention past int64 (OffsetCommit v2-4 lets a client send
            # 2^63-1) means "never": clamp, as the stored int64 must hold it.
            min(now + retention_time_ms, _INT64_MAX)
            if retention_time_ms is not None and retention_time_ms > 0
            else -1
        )
        codes, staged, entries = self.stage_offsets(group_id, topics, now, expire)

        def answer(code):
            for key in staged:
                codes[key] = code
            if group.is_empty_shell() and self.groups.get(group_id) is group:
                del self.groups[group_id]
            return _topic_results(topics, lambda name, p: codes[(name, p["partition_index"])])

        if not entries:
            return defer.succeed(answer(NONE))

        def stored(_):
            if self.groups.get(group_id) is group and group.state != DEAD:
                group.offsets.update(staged)
            return NONE

        d = self.store.append(group_id, entries)
        d.addCallbacks(stored, _store_error)
        return d.addCallback(answer)

    def stage_offsets(self, group_id, topics, now, expire):
        """Check an offset commit's partitions: ``(codes, staged, entries)``,
        the error of each refused partition, the OffsetAndMetadata of each
        accepted one and the records to append for them."""
        codes, staged, entries = {}, {}, []
        # Cluster metadata, not this broker's partitions: in a cluster the
        # coordinator takes commits for partitions other brokers host.
        cluster = self.broker.coordinator.topics()
        for topic in topics:
            name = topic["name"]
            meta = cluster.get(name)
            for p in topic["partitions"]:
                index = p["partition_index"]
                metadata = p.get("committed_metadata") or ""
                if meta is None or not 0 <= index < meta.num_partitions:
                    codes[(name, index)] = UNKNOWN_TOPIC_OR_PARTITION
                elif len(metadata.encode("utf-8")) > OFFSET_METADATA_MAX_BYTES:
                    codes[(name, index)] = OFFSET_METADATA_TOO_LARGE
                else:
                    om = OffsetAndMetadata(
                        p["committed_offset"],
                        p.get("committed_leader_epoch", -1),
                        metadata,
                        now,
                        expire,
                    )
                    staged[(name, index)] = om
                    entries.append((offset_key(group_id, name, index), offset_value(om)))
        return codes, staged, entries

    def _commit_error(self, group, generation_id, member_id, instance_id):
        if group.state == DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if getattr(group, "kind", None) == "consumer":
            return self.consumer_commit_error(group, generation_id, member_id)
        if group.is_static_fenced(member_id, instance_id):
            return FENCED_INSTANCE_ID
        if generation_id < 0 and group.state == EMPTY:
            return NONE
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ILLEGAL_GENERATION
        if group.state == COMPLETING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        # Stable or PreparingRebalance: the member learns of a rebalance from
        # its next heartbeat; a commit counts as a sign of life meanwhile.
        self._schedule_session(group, member)
        return NONE

    # -- OffsetFetch -------------------------------------------------------------

    def fetch_offsets(self, group_id, topics, member_id=None, member_epoch=-1):
        """``topics``: ``[(name, [partition])]`` or None for every committed one;
        ``member_id``/``member_epoch`` (OffsetFetch v9) are checked for
        KIP-848 groups only, as Kafka's classic groups ignore them.

        Returns ``(error, [(name, [(partition, OffsetAndMetadata or None)])])``.
        """
        error = self.group_error(group_id)
        if error == NONE:
            error = self.fetch_member_error(group_id, member_id, member_epoch)
        if error != NONE:
            return error, [(name, [(p, None) for p in parts]) for name, parts in topics or ()]
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        if topics is None:
            by_topic = {}
            for (name, index), om in sorted(offsets.items()):
                by_topic.setdefault(name, []).append((index, om))
            return NONE, list(by_topic.items())
        return NONE, [
            (name, [(p, offsets.get((name, p))) for p in parts]) for name, parts in topics
        ]

    # -- OffsetDelete ------------------------------------------------------------

    def delete_offsets(self, group_id, topics):
        """``topics``: ``[(name, [partition])]``. Returns a Deferred firing with
        ``(error, [(name, [(partition, error)])])``."""
        error = self.group_error(group_id)
        group = self.groups.get(group_id)
        if error == NONE and (group is None or group.state == DEAD):
            error = GROUP_ID_NOT_FOUND
        if error != NONE:
            return defer.succeed((error, []))
        subscribed = group.subscribed_topics() if group.state != EMPTY else set()
        results = []
        doomed = []
        for name, parts in topics:
            if subscribed is None or name in subscribed:
                results.append((name, [(p, GROUP_SUBSCRIBED_TO_TOPIC) for p in parts]))
                continue
            results.append((name, [(p, NONE) for p in parts]))
            doomed.extend((name, p) for p in parts if (name, p) in group.offsets)
        if not doomed:
            return defer.succeed((NONE, results))

        def deleted(_):
            for key in doomed:
                group.offsets.pop(key, None)
            return NONE, results

        def failed(failure):
            code = _store_error(failure)
            return code, [(n, [(p, code if c == NONE else c) for p, c in ps]) for n, ps in results]

        entries = [(offset_key(group_id, t, p), None) for t, p in doomed]
        return self.store.append(group_id, entries).addCallbacks(deleted, failed)

    def topic_deleted(self, topic):
        """Drop every group's committed offsets of a deleted topic, as Kafka
        does, writing tombstones so a reload does not bring them back.
        Returns how many offsets went."""
        removed = 0
        for group in list(self.groups.values()):
            keys = [key for key in group.offsets if key[0] == topic]
            if not keys:
                continue
            for key in keys:
                del group.offsets[key]
            entries = [(offset_key(group.group_id, t, p), None) for t, p in keys]
            self.store.append(group.group_id, entries).addErrback(_store_error)
            removed += len(keys)
        return removed

    # -- DeleteGroups ------------------------------------------------------------

    def delete_groups(self, group_ids):
        """Returns a Deferred firing with ``[(group_id, error)]`` in request order."""
        results = []
        for group_id in group_ids:
            error = self.group_error(group_id)
            group = self.groups.get(group_id)
            if error == NONE:
                if group is None or group.state == DEAD:
                    error = GROUP_ID_NOT_FOUND
                elif group.state != EMPTY or group.members:
                    error = NON_EMPTY_GROUP
            if error != NONE:
                results.append(defer.succeed((group_id, error)))
                continue
            # Dead at once: no join can revive it while its tombstones are written.
            consumer = getattr(group, "kind", None) == "consumer"
            entries = self.consumer_group_tombstones(group) if consumer else []
            group.transition(DEAD, self.now_ms())
            del self.groups[group_id]
            self._cancel(group.rebalance_call)
            entries.append((group_key(group_id), None))
            entries += [(offset_key(group_id, t, p), None) for t, p in sorted(group.offsets)]
            d = self.store.append(group_id, entries)
            d.addCallbacks(
                lambda _, g=group_id: (g, NONE),
                lambda f, g=group_id: (g, _store_error(f)),
            )
            results.append(d)
        return defer.gatherResults(results)

    # -- DescribeGroups / ListGroups ---------------------------------------------

    def describe_group(self, group_id):
        """A DescribeGroups ``groups`` entry (without authorized_operations)."""
        error = self.group_error(group_id)
        group = self.groups.get(group_id) if error == NONE else None
        described = {
            "error_code": error,
            "group_id": group_id,
            "group_state": DEAD,
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        }
        if group is None or getattr(group, "kind", None) == "consumer":
            # Kafka's classicGroup() lookup fails for a consumer group: Dead.
            return described
        stable = group.state == STABLE
        described["group_state"] = group.state
        described["protocol_type"] = group.protocol_type or ""
        described["protocol_data"] = (group.protocol_name or "") if stable else ""
        described["members"] = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                # Kafka only shows subscription and assignment once Stable.
                "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                "member_assignment": m.assignment if stable else b"",
            }
            for m in group.members.values()
        ]
        return described

    def protocol_of(self, group_id):
        """A classic group's ``(protocol type, protocol name)``, or None."""
        group = self.groups.get(group_id)
        if (
            group is None
            or group.protocol_type is None
            or getattr(group, "kind", None) == "consumer"
        ):
            # A consumer group's classic members each have their own
            # protocol name (KIP-1099): SyncGroup checks it per member.
            return None
        return group.protocol_type, group.protocol_name

    def pending_offset(self, group_id, key):
        """Whether a transaction holds an unpublished offset of ``key``."""
        group = self.groups.get(group_id)
        return group is not None and self.has_pending_txn(group, key)

    def list_groups(self):
        """Returns ``(error, [(group_id, protocol_type, state, type)])``."""
        if not self.active:
            return COORDINATOR_NOT_AVAILABLE, []
        self.sweep_ownership()
        if self.loading or self.any_loading():
            return COORDINATOR_LOAD_IN_PROGRESS, []
        # Only groups of the offsets partitions this broker leads are loaded.
        return NONE, [
            (g.group_id, g.protocol_type or "", g.state, getattr(g, "kind", "classic"))
            for g in self.groups.values()
            if g.state != DEAD
        ]

    # -- offset expiry -----------------------------------------------------------

    def _schedule_expiry(self):
        self._expiry_call = self.reactor.callLater(
            RETENTION_CHECK_INTERVAL_MS / 1000.0, self._expiry_tick
        )

    def _expiry_tick(self):
        try:
            self.expire_offsets()
        except Exception:
            log.failure("offset expiry failed")
        if self.active:
            self._schedule_expiry()

    def expire_offsets(self):
        """Drop offsets past retention (Kafka's rules for Empty and simple
        groups) and groups left with nothing; returns how many offsets went."""
        now = self.now_ms()
        retention = self.offsets_retention_ms
        expired_total = 0
        for group in list(self.groups.values()):
            if group.state != EMPTY:
                continue
            if group.protocol_type:
                # A consumer group that became Empty keeps its offsets for the
                # retention period counted from when it became Empty.
                gone = group.state_timestamp + retention <= now
                expired = [
                    k for k, om in group.offsets.items() if gone or 0 <= om.expire_timestamp <= now
                ]
            else:
                expired = [
                    k
                    for k, om in group.offsets.items()
                    if om.commit_timestamp + retention <= now or 0 <= om.expire_timestamp <= now
                ]
            entries = [(offset_key(group.group_id, t, p), None) for t, p in expired]
            for key in expired:
                del group.offsets[key]
            if not group.offsets and not group.pending_members:
                if getattr(group, "kind", None) == "consumer":
                    entries += self.consumer_group_tombstones(group)
                group.transition(DEAD, now)
                del self.groups[group.group_id]
                entries.append((group_key(group.group_id), None))
            if entries:
                self.store.append(group.group_id, entries).addErrback(_store_error)
            expired_total += len(expired)
        return expired_total
