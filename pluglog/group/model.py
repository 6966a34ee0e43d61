"""Group and member records of the classic group protocol, without timers or I/O.

A :class:`Group` holds what Kafka's ``ClassicGroup``/``GroupMetadata`` holds:
state, generation, the chosen protocol, the leader, members in join order,
pending members (handed an id by MEMBER_ID_REQUIRED but not joined yet), the
static-member map ``group.instance.id -> member id`` and the committed offsets
of the group. The coordinator drives the transitions; this module only checks
that each one is legal (kafka-protocol.md §5.1), so a wrong transition is a
loud bug rather than a silently odd group.

Protocol metadata and assignments are opaque bytes: the broker never parses
the "consumer" protocol except to tell OffsetDelete which topics a group is
subscribed to (:func:`subscribed_topics`).
"""

import struct
from collections import namedtuple

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

# target state -> states it may be entered from (ClassicGroupState.java)
_VALID_PREVIOUS = {
    EMPTY: (PREPARING_REBALANCE,),
    PREPARING_REBALANCE: (STABLE, COMPLETING_REBALANCE, EMPTY),
    COMPLETING_REBALANCE: (PREPARING_REBALANCE,),
    STABLE: (COMPLETING_REBALANCE,),
    DEAD: (STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD),
}

OffsetAndMetadata = namedtuple(
    "OffsetAndMetadata", "offset leader_epoch metadata commit_timestamp expire_timestamp"
)
OffsetAndMetadata.__doc__ = """A committed offset; ``expire_timestamp`` is -1 unless the
commit carried a retention time (OffsetCommit v2-4)."""


class Member:
    """One member of a group and the requests it has parked."""

    __slots__ = (
        "assignment",
        "client_host",
        "client_id",
        "heard_at",
        "heartbeat_call",
        "instance_id",
        "is_new",
        "join_deferred",
        "member_id",
        "protocol_type",
        "protocols",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "sync_deferred",
    )

    def __init__(
        self,
        member_id,
        instance_id,
        client_id,
        client_host,
        session_timeout_ms,
        rebalance_timeout_ms,
        protocol_type,
        protocols,
    ):
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols  # [(name, metadata bytes)] in the member's preference order
        self.assignment = b""
        self.join_deferred = None
        self.sync_deferred = None
        self.heartbeat_call = None
        #: reactor seconds of the member's last request (its session runs from there)
        self.heard_at = 0.0
        self.is_new = False

    def protocol_names(self):
        return [name for name, _ in self.protocols]

    def metadata(self, protocol_name):
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return b""

    def matches(self, protocols):
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def vote(self, candidates):
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        return None


class Group:
    """A consumer group's membership, generation and committed offsets."""

    def __init__(self, group_id, now_ms):
        self.group_id = group_id
        self.state = EMPTY
        self.state_timestamp = now_ms
        self.generation_id = 0
        self.protocol_type = None
        self.protocol_name = None
        self.leader_id = None
        self.members = {}  # member id -> Member, in join order
        self.pending_members = {}  # member id -> IDelayedCall expiring it
        self.static_members = {}  # group.instance.id -> member id
        self.offsets = {}  # (topic, partition) -> OffsetAndMetadata
        #: Offsets committed inside open transactions: producer id ->
        #: {(topic, partition): OffsetAndMetadata}; published by the
        #: transaction's COMMIT marker, dropped by its ABORT marker.
        self.pending_txn = {}
        self.new_member_added = False
        self.initial_delay = False
        self.rebalance_call = None
        # Members of the current generation that have not sent SyncGroup yet,
        # and the timer that removes them (Kafka's pending-sync rule).
        self.pending_sync = set()
        self.sync_call = None

    def __repr__(self):
        return (
            f"<Group {self.group_id!r} {self.state} gen={self.generation_id} "
            f"members={len(self.members)}>"
        )

    def transition(self, state, now_ms):
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id!r}: illegal {self.state} -> {state}")
        self.state = state
        self.state_timestamp = now_ms

    def add(self, member):
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id):
        member = self.members.pop(member_id)
        if member.instance_id is not None:
            if self.static_members.get(member.instance_id) == member_id:
                del self.static_members[member.instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_member_id(self, old_id, new_id):
        """Give a static member a fresh member id (its rejoin after a restart)."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[member.instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def is_static_fenced(self, member_id, instance_id):
        """True if ``instance_id`` belongs to a different member id than ``member_id``."""
        if instance_id is None:
            return False
        known = self.static_members.get(instance_id)
        return known is not None and known != member_id

    def supports_protocols(self, protocol_type, names):
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        return any(
            all(name in m.protocol_names() for m in self.members.values()) for name in names
        )

    def candidate_protocols(self):
        members = list(self.members.values())
        first = members[0].protocol_names()
        return [n for n in first if all(n in m.protocol_names() for m in members[1:])]

    def select_protocol(self):
        """Most votes among the protocols every member supports; ties go to the
        earlier candidate in the first member's preference order."""
        candidates = self.candidate_protocols()
        votes = dict.fromkeys(candidates, 0)
        for member in self.members.values():
            choice = member.vote(candidates)
            if choice is not None:
                votes[choice] += 1
        return max(candidates, key=lambda name: votes[name]) if candidates else None

    def all_joined(self):
        return not self.pending_members and all(
            m.join_deferred is not None for m in self.members.values()
        )

    def max_rebalance_timeout_ms(self):
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def is_empty_shell(self):
        """Nothing worth keeping: no members, offsets or generation history."""
        return (
            self.state == EMPTY
            and not self.members
            and not self.pending_members
            and not self.offsets
            and not self.pending_txn
            and self.generation_id == 0
        )

    def subscribed_topics(self):
        """Topics the members subscribe to, or None if that is unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None if self.members else set()
        topics = set()
        for member in self.members.values():
            found = subscribed_topics(member.metadata(self.protocol_name))
            if found is None:
                return None
            topics.update(found)
        return topics


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscribed_topics(metadata):
    """Topic names of a "consumer" protocol Subscription, or None if unreadable.

    Layout (every version): int16 version, int32 count, count x (int16 length,
    UTF-8 name), then fields this function does not need.
    """
    try:
        pos = _I16.size
        (count,) = _I32.unpack_from(metadata, pos)
        pos += _I32.size
        topics = set()
        for _ in range(count):
            (length,) = _I16.unpack_from(metadata, pos)
            pos += _I16.size
            if length < 0 or pos + length > len(metadata):
                return None
            topics.add(bytes(metadata[pos : pos + length]).decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError, TypeError):
        return None
