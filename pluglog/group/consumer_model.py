"""Group and member records of the KIP-848 consumer group protocol, without timers or I/O.

A :class:`ConsumerGroup` is what Kafka's ``ConsumerGroup`` holds: the group
epoch (bumped whenever membership or the subscribed topics' metadata
changes), the target assignment and its epoch, each member's current
assignment with its member epoch, and the committed offsets. It subclasses
the classic :class:`pluglog.group.model.Group` so the offset, expiry,
deletion and ownership code of the coordinator treat both kinds alike; the
classic-only parts (protocol election, join/sync parking) are unused.

Assignments map a topic id (32-character hex, ``TopicMetadata.topic_id``)
to a frozenset of partitions, as Kafka keys them by ``Uuid``, so a topic
deleted and created again under its name is another topic.

:func:`reconcile` is Kafka's ``CurrentAssignmentBuilder``: a member moves to
its target in steps, first giving up (revoking) what it must lose, keeping
its epoch until it has, then taking its new partitions; a partition is
handed to its new owner only once no other member holds it or still has it
pending revocation.
"""

from pluglog.group.model import DEAD, Group

#: ConsumerGroup states (``ConsumerGroup.ConsumerGroupState``)
EMPTY = "Empty"
ASSIGNING = "Assigning"
RECONCILING = "Reconciling"
STABLE = "Stable"

#: MemberState of ``ConsumerGroupCurrentMemberAssignmentValue.State``
MEMBER_STABLE = 0
UNREVOKED_PARTITIONS = 1
UNRELEASED_PARTITIONS = 2

CONSUMER = "consumer"


def freeze(assignment):
    """``{topic_id: iterable}`` -> ``{topic_id: frozenset}`` without empty topics."""
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def minus(a, b):
    return freeze({t: ps - b.get(t, frozenset()) for t, ps in a.items()})


def intersect(a, b):
    return freeze({t: ps & b.get(t, frozenset()) for t, ps in a.items()})


def union(a, b):
    out = dict(a)
    for t, ps in b.items():
        out[t] = out.get(t, frozenset()) | ps
    return freeze(out)


def count(assignment):
    return sum(len(ps) for ps in assignment.values())


class ConsumerMember:
    """One member of a consumer group (``ConsumerGroupMember``)."""

    __slots__ = (
        "assigned",
        "classic",
        "client_host",
        "client_id",
        "heartbeat_call",
        "instance_id",
        "join_deferred",
        "member_epoch",
        "member_id",
        "pending_revocation",
        "previous_member_epoch",
        "rack_id",
        "rebalance_timeout_ms",
        "replaced_id",
        "revocation_call",
        "server_assignor",
        "session_timeout_ms",
        "state",
        "subscribed_topic_names",
        "subscribed_topic_regex",
        "sync_deferred",
    )

    def __init__(self, member_id, client_id="", client_host=""):
        self.member_id = member_id
        self.instance_id = None
        self.rack_id = None
        self.client_id = client_id
        self.client_host = client_host
        self.subscribed_topic_names = []
        self.subscribed_topic_regex = None
        self.server_assignor = None
        self.rebalance_timeout_ms = 300000
        self.session_timeout_ms = 45000
        self.member_epoch = 0
        self.previous_member_epoch = 0
        self.state = MEMBER_STABLE
        self.assigned = {}
        self.pending_revocation = {}
        self.heartbeat_call = None
        self.revocation_call = None
        #: the member id of the static member this one replaced, if any
        self.replaced_id = None
        # The classic coordinator's release code looks for parked requests.
        self.join_deferred = None
        self.sync_deferred = None
        #: a classic member's ``(session timeout ms, [(protocol, metadata)])``
        #: (KIP-1099: it speaks JoinGroup/SyncGroup in a consumer group), else None
        self.classic = None

    @property
    def protocol_type(self):
        return CONSUMER

    def uses_classic(self):
        """True for a classic (JoinGroup) member of a consumer group (KIP-1099)."""
        return self.classic is not None

    def metadata_fields(self):
        """What ``ConsumerGroupMemberMetadataValue`` stores (the subscription)."""
        return (
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            tuple(self.subscribed_topic_names),
            self.subscribed_topic_regex,
            self.server_assignor,
            self.rebalance_timeout_ms,
        )


class ConsumerGroup(Group):
    """A KIP-848 consumer group."""

    kind = CONSUMER

    def __init__(self, group_id, now_ms):
        super().__init__(group_id, now_ms)
        self.protocol_type = CONSUMER
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.assignor_name = ""
        #: member id -> {topic_id: frozenset}: what the assignor decided
        self.target = {}
        #: the subscribed topics' (name, id, partition count) the target was made for
        self.topics_seen = None
        #: ((topics generation, group epoch), subscribed topics) of the last look
        self.topics_cache = None

    def __repr__(self):
        return (
            f"<ConsumerGroup {self.group_id!r} {self.state} epoch={self.group_epoch} "
            f"assignment={self.assignment_epoch} members={len(self.members)}>"
        )

    def transition(self, state, now_ms):
        # States follow from the epochs (:meth:`refresh_state`); Dead is final.
        if self.state != state:
            self.state = state
            self.state_timestamp = now_ms

    def refresh_state(self, now_ms):
        if self.state == DEAD:
            return
        if not self.members:
            state = EMPTY
        elif self.assignment_epoch < self.group_epoch:
            state = ASSIGNING
        elif any(
            m.member_epoch != self.assignment_epoch or m.state != MEMBER_STABLE
            for m in self.members.values()
        ):
            state = RECONCILING
        else:
            state = STABLE
        self.transition(state, now_ms)

    def add(self, member):
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove(self, member_id):
        member = self.members.pop(member_id)
        if member.instance_id is not None:
            if self.static_members.get(member.instance_id) == member_id:
                del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def is_empty_shell(self):
        return (
            not self.members
            and not self.offsets
            and not self.pending_txn
            and self.group_epoch == 0
        )

    def subscribed_topics(self):
        names = set()
        for member in self.members.values():
            names.update(member.subscribed_topic_names)
        return names

    def owners(self, exclude=None):
        """``{(topic_id, partition): member id}`` of partitions members hold or
        still have to revoke, leaving out ``exclude``."""
        held = {}
        for member in self.members.values():
            if member.member_id == exclude:
                continue
            for source in (member.assigned, member.pending_revocation):
                for topic, parts in source.items():
                    for p in parts:
                        held[(topic, p)] = member.member_id
        return held


def reconcile(group, member, owned):
    """Move ``member`` towards its target assignment (one step per heartbeat).

    ``owned`` is the heartbeat's TopicPartitions (``{topic_id: frozenset}``)
    or None when the member did not send them. Returns True when the member's
    epoch, state or partitions changed.
    """
    target = group.target.get(member.member_id, {})
    epoch = group.assignment_epoch
    before = _snapshot(member)
    if member.state == UNREVOKED_PARTITIONS:
        # The member keeps its epoch until it says it let the partitions go.
        still = owned is None or any(
            member.pending_revocation.get(t, frozenset()) & ps for t, ps in owned.items()
        )
        if still:
            return False
        member.pending_revocation = {}
    if member.member_epoch == epoch and member.state == MEMBER_STABLE:
        return False
    keep = intersect(member.assigned, target)
    revoke = minus(member.assigned, target)
    # A member that says it no longer owns them need not be asked to revoke
    # them (an eager classic member rejoins owning nothing): Kafka's rule.
    if revoke and (owned is None or intersect(owned, revoke)):
        member.assigned = keep
        member.pending_revocation = revoke
        member.state = UNREVOKED_PARTITIONS
    else:
        taken = group.owners(exclude=member.member_id)
        wanted = minus(target, keep)
        free = freeze({t: {p for p in ps if (t, p) not in taken} for t, ps in wanted.items()})
        member.assigned = union(keep, free)
        member.state = UNRELEASED_PARTITIONS if count(free) < count(wanted) else MEMBER_STABLE
        if member.member_epoch != epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = epoch
    return before != _snapshot(member)


def _snapshot(member):
    return (member.member_epoch, member.state, member.assigned, member.pending_revocation)
