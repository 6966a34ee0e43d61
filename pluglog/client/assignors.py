"""Partition assignors for the "consumer" group protocol, and its encodings.

The group leader runs one of these on the members' subscriptions; the names
are Kafka's protocol names, so a group can mix pluglog, Java, librdkafka and
kafka-python members as long as they share one strategy:

- ``range`` (Kafka's RangeAssignor): per topic, members sorted, each gets a
  contiguous range, the first ``partitions % members`` one extra.
- ``roundrobin`` (RoundRobinAssignor): every subscribed partition, sorted,
  dealt to the members in turn (skipping those not subscribed to its topic).
- ``sticky`` (StickyAssignor's contract): balanced like roundrobin but every
  member keeps as many of the partitions it owned (Subscription v1
  ``owned_partitions``) as balance allows.

Subscription and Assignment are Kafka's ConsumerProtocol structures
(ConsumerProtocolSubscription.json v1, ConsumerProtocolAssignment.json v0).
"""

import struct
from typing import NamedTuple

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class Subscription(NamedTuple):
    topics: list
    user_data: bytes | None = None
    owned_partitions: list = []  # [(topic, partition)]


# -- encodings --------------------------------------------------------------


def _string(out, text):
    data = text.encode("utf-8")
    out += _I16.pack(len(data)) + data


def _bytes(out, data):
    if data is None:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(data)) + bytes(data)


def _topic_partitions(out, pairs):
    by_topic = {}
    for topic, partition in pairs:
        by_topic.setdefault(topic, []).append(partition)
    out += _I32.pack(len(by_topic))
    for topic in sorted(by_topic):
        _string(out, topic)
        parts = sorted(by_topic[topic])
        out += _I32.pack(len(parts)) + struct.pack(f">{len(parts)}i", *parts)


def encode_subscription(topics, user_data=None, owned=()):
    out = bytearray(_I16.pack(1))
    out += _I32.pack(len(topics))
    for topic in sorted(topics):
        _string(out, topic)
    _bytes(out, user_data)
    _topic_partitions(out, owned)
    return bytes(out)


def encode_assignment(pairs, user_data=None):
    out = bytearray(_I16.pack(0))
    _topic_partitions(out, pairs)
    _bytes(out, user_data)
    return bytes(out)


class _Reader:
    def __init__(self, data):
        self.data = memoryview(bytes(data))
        self.pos = 0

    def done(self):
        return self.pos >= len(self.data)

    def unpack(self, fmt):
        value = fmt.unpack_from(self.data, self.pos)[0]
        self.pos += fmt.size
        return value

    def string(self):
        length = self.unpack(_I16)
        text = bytes(self.data[self.pos : self.pos + length]).decode("utf-8")
        self.pos += length
        return text

    def bytes(self):
        length = self.unpack(_I32)
        if length < 0:
            return None
        data = bytes(self.data[self.pos : self.pos + length])
        self.pos += length
        return data

    def topic_partitions(self):
        out = []
        for _ in range(self.unpack(_I32)):
            topic = self.string()
            for _ in range(self.unpack(_I32)):
                out.append((topic, self.unpack(_I32)))
        return out


def decode_subscription(data):
    r = _Reader(data)
    version = r.unpack(_I16)
    topics = [r.string() for _ in range(r.unpack(_I32))]
    user_data = None if r.done() else r.bytes()
    owned = r.topic_partitions() if version >= 1 and not r.done() else []
    return Subscription(topics, user_data, owned)


def decode_assignment(data):
    """``[(topic, partition)]`` of an Assignment (empty bytes: nothing)."""
    if not data:
        return []
    r = _Reader(data)
    r.unpack(_I16)
    return r.topic_partitions()


# -- assignors ----------------------------------------------------------------


def _sorted_members(subscriptions):
    return sorted(subscriptions)


def range_assign(partitions, subscriptions):
    """``partitions``: {topic: [ids]}; ``subscriptions``: {member: Subscription}."""
    out = {m: [] for m in subscriptions}
    for topic in sorted(partitions):
        members = [m for m in _sorted_members(subscriptions) if topic in subscriptions[m].topics]
        if not members:
            continue
        ids = sorted(partitions[topic])
        per, extra = divmod(len(ids), len(members))
        start = 0
        for i, member in enumerate(members):
            count = per + (1 if i < extra else 0)
            out[member] += [(topic, p) for p in ids[start : start + count]]
            start += count
    return out


def roundrobin_assign(partitions, subscriptions):
    out = {m: [] for m in subscriptions}
    members = _sorted_members(subscriptions)
    if not members:
        return out
    turn = 0
    for topic in sorted(partitions):
        for p in sorted(partitions[topic]):
            for _ in range(len(members)):
                member = members[turn % len(members)]
                turn += 1
                if topic in subscriptions[member].topics:
                    out[member].append((topic, p))
                    break
    return out


def sticky_assign(partitions, subscriptions):
    members = _sorted_members(subscriptions)
    out = {m: [] for m in members}
    if not members:
        return out
    valid = {(t, p) for t, ids in partitions.items() for p in ids}
    wanted = {tp for tp in valid if any(tp[0] in subscriptions[m].topics for m in members)}
    per, extra = divmod(len(wanted), len(members))
    claimed = set()
    # Members that owned the most keep theirs first, up to their fair share.
    order = sorted(members, key=lambda m: (-len(subscriptions[m].owned_partitions), m))
    bigger = extra
    for member in order:
        sub = subscriptions[member]
        keep = [
            tuple(tp)
            for tp in sorted(sub.owned_partitions)
            if tuple(tp) in wanted and tuple(tp) not in claimed and tp[0] in sub.topics
        ]
        quota = per + (1 if bigger > 0 and len(keep) > per else 0)
        if quota > per:
            bigger -= 1
        for tp in keep[:quota]:
            out[member].append(tp)
            claimed.add(tp)
    for tp in sorted(wanted - claimed):
        candidates = [m for m in members if tp[0] in subscriptions[m].topics]
        member = min(candidates, key=lambda m: (len(out[m]), m))
        out[member].append(tp)
    return out


ASSIGNORS = {"range": range_assign, "roundrobin": roundrobin_assign, "sticky": sticky_assign}
