"""KIP-848 consumer groups in ``__consumer_offsets``: Kafka's record types.

Keys are an int16 version then a non-flexible struct; values an int16
version (0) then a flexible struct, exactly as Kafka's group coordinator
writes them (``group-coordinator/src/main/resources/common/message``):

===  ===========================================  ===========================================
key  record (key fields)                          value (v0, flexible)
===  ===========================================  ===========================================
3    ConsumerGroupMetadata (group)                Epoch
5    ConsumerGroupMemberMetadata (group, member)  InstanceId, RackId, ClientId, ClientHost,
                                                  SubscribedTopicNames, SubscribedTopicRegex,
                                                  RebalanceTimeoutMs, ServerAssignor,
                                                  tag 0: ClassicMemberMetadata (KIP-1099)
6    ConsumerGroupTargetAssignmentMetadata (g)    AssignmentEpoch
7    ConsumerGroupTargetAssignmentMember (g, m)   TopicPartitions [TopicId, Partitions]
8    ConsumerGroupCurrentMemberAssignment (g, m)  MemberEpoch, PreviousMemberEpoch, State,
                                                  AssignedPartitions, PartitionsPendingRevocation
===  ===========================================  ===========================================

Key 4 (ConsumerGroupPartitionMetadata, the subscribed topics' metadata) is
not written: the coordinator recomputes it from the cluster metadata after a
load, and a Kafka 4.1 coordinator no longer writes it either; it is read and
ignored. A null value deletes its key. :class:`ConsumerLoad` gathers what a
partition's records say and builds the groups once the load ends.
"""

import uuid

from pluglog.group.consumer_model import ConsumerGroup, ConsumerMember, freeze
from pluglog.protocol import primitives as p
from pluglog.protocol.compiler import compile_struct
from pluglog.protocol.schema import F, Struct

METADATA, PARTITION_METADATA, MEMBER, TARGET_METADATA, TARGET_MEMBER, CURRENT = range(3, 9)
CONSUMER_KEY_VERSIONS = frozenset(range(3, 9))

_TOPIC_PARTITIONS = [F("topic_id", "uuid"), F("partitions", "[]int32")]
_VALUES = {
    METADATA: [F("epoch", "int32")],
    MEMBER: [
        F("instance_id", "string", nullable="0+"),
        F("rack_id", "string", nullable="0+"),
        F("client_id", "string"),
        F("client_host", "string"),
        F("subscribed_topic_names", "[]string"),
        F("subscribed_topic_regex", "string", nullable="0+"),
        F("rebalance_timeout_ms", "int32", default=-1),
        F("server_assignor", "string", nullable="0+"),
        # KIP-1099: set for a classic member of a consumer group.
        F(
            "classic_member_metadata",
            Struct(
                [
                    F("session_timeout_ms", "int32"),
                    F("supported_protocols", [F("name", "string"), F("metadata", "bytes")]),
                ]
            ),
            nullable="0+",
            default=None,
            tag=0,
        ),
    ],
    TARGET_METADATA: [F("assignment_epoch", "int32")],
    TARGET_MEMBER: [F("topic_partitions", _TOPIC_PARTITIONS)],
    CURRENT: [
        F("member_epoch", "int32"),
        F("previous_member_epoch", "int32"),
        F("state", "int8"),
        F("assigned_partitions", _TOPIC_PARTITIONS),
        F("partitions_pending_revocation", _TOPIC_PARTITIONS),
    ],
}
_GROUP_ONLY = frozenset((METADATA, PARTITION_METADATA, TARGET_METADATA))


def _key(version, group_id, member_id=None):
    out = [p.INT16.pack(version)]
    for text in (group_id,) if member_id is None else (group_id, member_id):
        data = text.encode("utf-8")
        out += [p.INT16.pack(len(data)), data]
    return b"".join(out)


def _value(version, fields):
    out = [p.INT16.pack(0)]
    compile_struct(_VALUES[version], 0, True)[1](fields, out)
    return b"".join(bytes(x) for x in out)


def _wire(assignment):
    return [
        {"topic_id": uuid.UUID(hex=t), "partitions": sorted(ps)}
        for t, ps in sorted(assignment.items())
    ]


def _unwire(topic_partitions):
    return freeze({tp["topic_id"].hex: tp["partitions"] for tp in topic_partitions})


def group_records(group):
    return [(_key(METADATA, group.group_id), _value(METADATA, {"epoch": group.group_epoch}))]


def member_records(group, member):
    """The subscription of ``member`` (key 5)."""
    fields = dict(
        zip(
            (
                "instance_id",
                "rack_id",
                "client_id",
                "client_host",
                "subscribed_topic_names",
                "subscribed_topic_regex",
                "server_assignor",
                "rebalance_timeout_ms",
            ),
            member.metadata_fields(),
        )
    )
    fields["subscribed_topic_names"] = list(fields["subscribed_topic_names"])
    if member.classic is not None:
        session, protocols = member.classic
        fields["classic_member_metadata"] = {
            "session_timeout_ms": session,
            "supported_protocols": [{"name": n, "metadata": m} for n, m in protocols],
        }
    return [(_key(MEMBER, group.group_id, member.member_id), _value(MEMBER, fields))]


def target_records(group, member_ids):
    """The target of ``member_ids`` (key 7) and the assignment epoch (key 6)."""
    out = [
        (
            _key(TARGET_MEMBER, group.group_id, m),
            _value(TARGET_MEMBER, {"topic_partitions": _wire(group.target.get(m, {}))}),
        )
        for m in member_ids
    ]
    epoch = {"assignment_epoch": group.assignment_epoch}
    out.append((_key(TARGET_METADATA, group.group_id), _value(TARGET_METADATA, epoch)))
    return out


def current_records(group, member):
    """``member``'s epochs, state and partitions (key 8)."""
    value = {
        "member_epoch": member.member_epoch,
        "previous_member_epoch": member.previous_member_epoch,
        "state": member.state,
        "assigned_partitions": _wire(member.assigned),
        "partitions_pending_revocation": _wire(member.pending_revocation),
    }
    return [(_key(CURRENT, group.group_id, member.member_id), _value(CURRENT, value))]


def member_tombstones(group_id, member_id):
    # Kafka's order: current assignment, target, then the subscription.
    return [(_key(v, group_id, member_id), None) for v in (CURRENT, TARGET_MEMBER, MEMBER)]


def group_tombstones(group_id):
    return [(_key(v, group_id), None) for v in (TARGET_METADATA, METADATA)]


def _read_string(buf, pos):
    (length,) = p.INT16.unpack_from(buf, pos)
    pos += 2
    if length < 0 or pos + length > len(buf):
        raise ValueError("bad string in a consumer group key")
    return bytes(buf[pos : pos + length]).decode("utf-8"), pos + length


def parse_key(version, key):
    """``(group_id, member_id or None)`` of a consumer group key."""
    group_id, pos = _read_string(key, 2)
    if version in _GROUP_ONLY:
        return group_id, None
    member_id, _ = _read_string(key, pos)
    return group_id, member_id


def parse_value(version, value):
    """The value's fields, or None for key 4 (read and ignored)."""
    if version not in _VALUES:
        return None
    return compile_struct(_VALUES[version], 0, True)[0](memoryview(value), 2)[0]


class ConsumerLoad:
    """The consumer groups of one offsets partition, as its records say."""

    def __init__(self):
        self.groups = {}  # group id -> {"epoch", "assignment_epoch", "members", "deleted"}

    def _state(self, group_id):
        return self.groups.setdefault(
            group_id, {"epoch": None, "assignment_epoch": 0, "members": {}}
        )

    def apply(self, version, key, value):
        group_id, member_id = parse_key(version, key)
        fields = None if value is None else parse_value(version, value)
        state = self._state(group_id)
        if version == METADATA:
            if fields is None:
                self.groups.pop(group_id, None)
            else:
                state["epoch"] = fields["epoch"]
        elif version == TARGET_METADATA:
            state["assignment_epoch"] = 0 if fields is None else fields["assignment_epoch"]
        elif member_id is not None:
            slot = state["members"].setdefault(member_id, {})
            if fields is None:
                slot.pop(version, None)
                if not slot:
                    del state["members"][member_id]
            else:
                slot[version] = fields

    def is_consumer(self, group_id):
        state = self.groups.get(group_id)
        return state is not None and state["epoch"] is not None

    def build(self, group_id, now_ms):
        """A loaded :class:`ConsumerGroup` (offsets are added by the loader)."""
        state = self.groups[group_id]
        group = ConsumerGroup(group_id, now_ms)
        group.group_epoch = state["epoch"]
        group.assignment_epoch = state["assignment_epoch"]
        for member_id, slot in state["members"].items():
            meta = slot.get(MEMBER)
            if meta is None:
                continue  # only a stale assignment left: the member had gone
            member = ConsumerMember(member_id, meta["client_id"], meta["client_host"])
            member.instance_id = meta["instance_id"]
            member.rack_id = meta["rack_id"]
            member.subscribed_topic_names = list(meta["subscribed_topic_names"])
            member.subscribed_topic_regex = meta["subscribed_topic_regex"]
            member.server_assignor = meta["server_assignor"]
            member.rebalance_timeout_ms = meta["rebalance_timeout_ms"]
            classic = meta.get("classic_member_metadata")
            if classic is not None:
                member.classic = (
                    classic["session_timeout_ms"],
                    [(p["name"], bytes(p["metadata"])) for p in classic["supported_protocols"]],
                )
                member.session_timeout_ms = classic["session_timeout_ms"]
            current = slot.get(CURRENT)
            if current is not None:
                member.member_epoch = current["member_epoch"]
                member.previous_member_epoch = current["previous_member_epoch"]
                member.state = current["state"]
                member.assigned = _unwire(current["assigned_partitions"])
                member.pending_revocation = _unwire(current["partitions_pending_revocation"])
            target = slot.get(TARGET_MEMBER)
            if target is not None:
                group.target[member_id] = _unwire(target["topic_partitions"])
            group.add(member)
        return group
