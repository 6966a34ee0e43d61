"""Offsets committed inside transactions (TxnOffsetCommit) and their completion.

A mixin of :class:`pluglog.group.coordinator.GroupCoordinator`, as Kafka's
GroupMetadataManager does it: TxnOffsetCommit appends the offsets to the
group's ``__consumer_offsets`` partition in a transactional batch of the
producer (its id and epoch, no sequence), and keeps them in the group's
``pending_txn`` under the producer id. They are not visible to OffsetFetch
until the transaction's COMMIT marker reaches that partition
(:meth:`TxnOffsetOperations.complete_txn`, called by the broker's marker
writer); an ABORT marker drops them. OffsetFetch with ``require_stable``
answers UNSTABLE_OFFSET_COMMIT for a partition with pending offsets.

KIP-447 fencing (TxnOffsetCommit v3+): a member id the group does not know
gets UNKNOWN_MEMBER_ID, a generation other than the group's
ILLEGAL_GENERATION, a replaced static member FENCED_INSTANCE_ID. A
producer whose epoch was bumped by a newer producer is refused by the
partition (INVALID_PRODUCER_EPOCH).
"""

from twisted.internet import defer

from pluglog.errors import (
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    INVALID_PRODUCER_EPOCH,
    NONE,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
    KafkaError,
)
from pluglog.group.model import DEAD, Group
from pluglog.group.store import coordinator_error


def _results(topics, code_of):
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


def _store_error(failure):
    if failure.check(KafkaError) and failure.value.error_code == INVALID_PRODUCER_EPOCH:
        return INVALID_PRODUCER_EPOCH
    return coordinator_error(failure)


class TxnOffsetOperations:
    """TxnOffsetCommit; needs ``groups``, ``store``, ``broker``."""

    def txn_commit_offsets(
        self, group_id, producer_id, producer_epoch, generation_id, member_id, instance_id, topics
    ):
        """A Deferred of the TxnOffsetCommit response ``topics``."""
        error = self.group_error(group_id)
        group = self.groups.get(group_id)
        if error == NONE:
            if group is None:
                group = self.groups[group_id] = Group(group_id, self.now_ms())
            error = self._txn_commit_error(group, generation_id, member_id, instance_id)
        if error != NONE:
            return defer.succeed(_results(topics, lambda *_: error))
        codes, staged, entries = self.stage_offsets(group_id, topics, self.now_ms(), -1)

        def answer(code):
            for key in staged:
                codes[key] = code
            return _results(topics, lambda name, p: codes[(name, p["partition_index"])])

        if not entries:
            return defer.succeed(answer(NONE))

        def stored(_):
            if self.groups.get(group_id) is group and group.state != DEAD:
                group.pending_txn.setdefault(producer_id, {}).update(staged)
            return NONE

        d = self.store.append(group_id, entries, producer=(producer_id, producer_epoch))
        d.addCallbacks(stored, _store_error)
        return d.addCallback(answer)

    def _txn_commit_error(self, group, generation_id, member_id, instance_id):
        # Kafka's GroupCoordinator.doTxnCommitOffsets.
        if group.state == DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if group.is_static_fenced(member_id, instance_id):
            return FENCED_INSTANCE_ID
        if member_id and member_id not in group.members:
            return UNKNOWN_MEMBER_ID
        if getattr(group, "kind", None) == "consumer":
            # TxnOffsetCommit v3+ carries the KIP-848 member epoch.
            member = group.members.get(member_id)
            if generation_id >= 0 and (member is None or generation_id != member.member_epoch):
                return ILLEGAL_GENERATION if member is None else STALE_MEMBER_EPOCH
            return NONE
        if generation_id >= 0 and generation_id != group.generation_id:
            return ILLEGAL_GENERATION
        return NONE

    def complete_txn(self, partition_index, producer_id, commit):
        """The transaction of ``producer_id`` ended in offsets partition
        ``partition_index``: publish (commit) or drop its pending offsets."""
        for group in list(self.groups.values()):
            if self.store.partition_of(group.group_id) != partition_index:
                continue
            offsets = group.pending_txn.pop(producer_id, None)
            if offsets and commit:
                group.offsets.update(offsets)

    def has_pending_txn(self, group, key):
        """Whether a transaction holds an unpublished offset for ``key``."""
        return any(key in offsets for offsets in group.pending_txn.values())
