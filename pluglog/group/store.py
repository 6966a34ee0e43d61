"""Persistence of committed offsets and group metadata in ``__consumer_offsets``.

The store writes through the ordinary log (``Partition.append``) of the
internal compacted topic ``__consumer_offsets`` and reads the whole topic back
when the coordinator starts. A group lives in partition
``abs(java_string_hashcode(group_id)) % offsets.topic.num.partitions``, as in
Kafka, so all of a group's records are ordered in one log.

Record layout (big-endian, Kafka's primitive encodings: strings are int16
length + UTF-8, nullable -1; bytes are int32 length + data), modelled on
Kafka's ``OffsetCommitKey/Value`` and ``GroupMetadataKey/Value``; see
docs/groups.rst for the table:

* key version 0 or 1, offset commit: ``group string, topic string, partition int32``
* key version 2, group metadata: ``group string``
* offset value v1: ``offset int64, metadata string, commit_ts int64, expire_ts int64``
  (written when the commit carried a retention time); v3: ``offset int64,
  leader_epoch int32, metadata string, commit_ts int64`` (v0/v2 are read too)
* group value v3: ``protocol_type string, generation int32, protocol
  nullable string, leader nullable string, state_ts int64, members
  [member_id string, instance_id nullable string, client_id string,
  client_host string, rebalance_timeout int32, session_timeout int32,
  subscription bytes, assignment bytes]`` (v0-v2 are read too)
* a null value (tombstone) deletes the key; compaction keeps the newest value.

Durability (Kafka's ``offsets.commit.required.acks=-1``): a write is
appended with acks=all semantics on the partition's leader and its Deferred
fires only once the partition's high watermark covers the batch, i.e. once
``min.insync.replicas`` replicas hold it; on a single broker that is at once.
A failed write errbacks with the log's KafkaError (:class:`UnacknowledgedWriteError` for
the codes the HW wait reports); :func:`coordinator_error` translates it into
what group clients expect (Kafka's GroupMetadataManager mapping).

The topic is created on first need with replication factor
min(``offsets.topic.replication.factor``, live brokers). Loading reads one
partition, when this broker becomes its leader (:mod:`.loader`).

Contract: runs on the reactor thread.
"""

import functools
import struct

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from pluglog.errors import (
    COORDINATOR_NOT_AVAILABLE,
    INVALID_FETCH_SIZE,
    KAFKA_STORAGE_ERROR,
    MESSAGE_TOO_LARGE,
    NONE,
    NOT_COORDINATOR,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    RECORD_LIST_TOO_LARGE,
    REQUEST_TIMED_OUT,
    UNKNOWN_TOPIC_OR_PARTITION,
    KafkaError,
    TopicExistsError,
)
from pluglog.group.model import OffsetAndMetadata
from pluglog.protocol import records as batches

log = Logger()

OFFSETS_TOPIC = "__consumer_offsets"
#: Kafka's GroupMetadataManager.offsetsTopicConfigs (min.insync.replicas is
#: the broker default, as in Kafka).
OFFSETS_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "104857600",
    "compression.type": "producer",
}

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def java_string_hashcode(text):
    """``String.hashCode()`` of Java: over UTF-16 code units, int32 overflow."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


@functools.lru_cache(maxsize=8192)
def partition_for(group_id, num_partitions):
    """Kafka's ``Utils.abs(groupId.hashCode) % n`` (abs(MIN_VALUE) is 0).

    Cached: every group request asks, and hashing is a Python loop per character.
    """
    h = java_string_hashcode(group_id)
    return (0 if h == -(2**31) else abs(h)) % num_partitions


# -- encoding ------------------------------------------------------------------


def _string(out, text):
    if text is None:
        out.append(_I16.pack(-1))
        return
    data = text.encode("utf-8")
    out.append(_I16.pack(len(data)))
    out.append(data)


def _bytes(out, data):
    data = bytes(data or b"")
    out.append(_I32.pack(len(data)))
    out.append(data)


def offset_key(group_id, topic, partition):
    out = [_I16.pack(OFFSET_KEY_VERSION)]
    _string(out, group_id)
    _string(out, topic)
    out.append(_I32.pack(partition))
    return b"".join(out)


def group_key(group_id):
    out = [_I16.pack(GROUP_KEY_VERSION)]
    _string(out, group_id)
    return b"".join(out)


def offset_value(om):
    if om.expire_timestamp >= 0:
        out = [_I16.pack(1), _I64.pack(om.offset)]
        _string(out, om.metadata)
        out += [_I64.pack(om.commit_timestamp), _I64.pack(om.expire_timestamp)]
    else:
        out = [_I16.pack(3), _I64.pack(om.offset), _I32.pack(om.leader_epoch)]
        _string(out, om.metadata)
        out.append(_I64.pack(om.commit_timestamp))
    return b"".join(out)


def group_value(group):
    out = [_I16.pack(3)]
    _string(out, group.protocol_type or "")
    out.append(_I32.pack(group.generation_id))
    _string(out, group.protocol_name)
    _string(out, group.leader_id)
    out.append(_I64.pack(group.state_timestamp))
    out.append(_I32.pack(len(group.members)))
    for m in group.members.values():
        _string(out, m.member_id)
        _string(out, m.instance_id)
        _string(out, m.client_id)
        _string(out, m.client_host)
        out += [_I32.pack(m.rebalance_timeout_ms), _I32.pack(m.session_timeout_ms)]
        _bytes(out, m.metadata(group.protocol_name))
        _bytes(out, m.assignment)
    return b"".join(out)


# -- decoding ------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def _take(self, fmt):
        (value,) = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return value

    def i16(self):
        return self._take(_I16)

    def i32(self):
        return self._take(_I32)

    def i64(self):
        return self._take(_I64)

    def string(self):
        length = self.i16()
        if length < 0:
            return None
        end = self.pos + length
        if end > len(self.buf):
            raise ValueError("string runs past the end of the record")
        text = bytes(self.buf[self.pos : end]).decode("utf-8")
        self.pos = end
        return text

    def bytes(self):
        length = self.i32()
        if length < 0:
            return b""
        end = self.pos + length
        if end > len(self.buf):
            raise ValueError("bytes run past the end of the record")
        data = bytes(self.buf[self.pos : end])
        self.pos = end
        return data


def parse_key(key):
    """``("offset", group, topic, partition)`` or ``("group", group)``."""
    r = _Reader(key)
    version = r.i16()
    if version in (0, 1):
        return ("offset", r.string(), r.string(), r.i32())
    if version == GROUP_KEY_VERSION:
        return ("group", r.string())
    raise ValueError(f"unknown key version {version}")


def parse_offset_value(value):
    r = _Reader(value)
    version = r.i16()
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    return OffsetAndMetadata(offset, epoch, metadata, commit_ts, expire_ts)


class GroupRecord:
    """Group metadata as read back from the log."""

    __slots__ = (
        "generation_id",
        "leader_id",
        "members",
        "protocol_name",
        "protocol_type",
        "state_timestamp",
    )


def parse_group_value(value):
    r = _Reader(value)
    version = r.i16()
    rec = GroupRecord()
    rec.protocol_type = r.string() or ""
    rec.generation_id = r.i32()
    rec.protocol_name = r.string()
    rec.leader_id = r.string()
    rec.state_timestamp = r.i64() if version >= 2 else -1
    rec.members = []
    for _ in range(r.i32()):
        member_id = r.string()
        instance_id = r.string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        subscription = r.bytes()
        assignment = r.bytes()
        rec.members.append(
            (
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    return rec


# -- the store -----------------------------------------------------------------


class UnacknowledgedWriteError(KafkaError):
    """A write that is in the leader's log but was not acknowledged: the HW
    wait answered NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT or
    NOT_LEADER_OR_FOLLOWER (``error_code``)."""

    def __init__(self, error_code, message):
        super().__init__(message)
        self.error_code = error_code


_UNAVAILABLE = frozenset(
    (
        UNKNOWN_TOPIC_OR_PARTITION,
        NOT_ENOUGH_REPLICAS,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        REQUEST_TIMED_OUT,
    )
)
_MOVED = frozenset((NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR))
_TOO_LARGE = frozenset((MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_FETCH_SIZE))


def coordinator_error(failure, too_large=COORDINATOR_NOT_AVAILABLE):
    """The group error for a failed ``__consumer_offsets`` write (Kafka's
    GroupMetadataManager/GroupCoordinatorService translation): the partition
    is short of replicas or timed out -> COORDINATOR_NOT_AVAILABLE, it moved
    -> NOT_COORDINATOR, both make clients look the coordinator up again; an
    oversized batch -> ``too_large`` (INVALID_COMMIT_OFFSET_SIZE for commits).
    """
    code = failure.value.error_code if failure.check(KafkaError) else None
    if code in _UNAVAILABLE:
        return COORDINATOR_NOT_AVAILABLE
    if code in _MOVED:
        return NOT_COORDINATOR
    if code in _TOO_LARGE:
        return too_large
    log.failure("writing to __consumer_offsets failed", failure)
    return COORDINATOR_NOT_AVAILABLE


def check_acknowledged(code, part):
    if code != NONE:
        raise UnacknowledgedWriteError(code, f"{part.topic}-{part.index}: write not acknowledged")


class InternalTopic:
    """Creates one internal topic on first need; callers meanwhile share
    the one creation (``__consumer_offsets``, ``__transaction_state``)."""

    def __init__(self, broker, name, internal=True):
        self.broker = broker
        self.name = name
        #: Created as internal (clients may not produce to it). Kafka's
        #: ``__remote_log_metadata`` is not: other brokers produce to it.
        self.internal = internal
        self._waiters = []

    def ensure(self, spec):
        """A Deferred that fires once the topic exists; ``spec()`` gives
        ``(partitions, replication factor, configs)`` when it must be made."""
        if self.broker.num_partitions(self.name) is not None:
            return defer.succeed(None)
        waiter = defer.Deferred()
        self._waiters.append(waiter)
        if len(self._waiters) == 1:
            count, factor, configs = spec()
            made = self.broker.create_topic(self.name, count, factor, configs, self.internal)
            made.addBoth(self._created)
        return waiter

    def _created(self, result):
        waiters, self._waiters = self._waiters, []
        # Losing a creation race to another broker is success too, even
        # before this broker's cache has seen the winner's topic: callers
        # answer a retriable COORDINATOR_NOT_AVAILABLE until it has.
        failed = (
            isinstance(result, Failure)
            and not result.check(TopicExistsError)
            and self.broker.num_partitions(self.name) is None
        )
        for waiter in waiters:
            if failed:
                waiter.errback(result)
            else:
                waiter.callback(None)


class OffsetStore:
    """Appends key/value records for groups and reads a partition back."""

    def __init__(self, broker):
        self.broker = broker
        self.num_partitions = broker.config.offsets_topic_num_partitions
        self.commit_timeout_s = broker.config.offsets_commit_timeout_ms / 1000.0
        self._topic = InternalTopic(broker, OFFSETS_TOPIC)

    def topic_exists(self):
        return self.broker.num_partitions(OFFSETS_TOPIC) is not None

    def replication_factor(self):
        """offsets.topic.replication.factor, capped at the live brokers so a
        small (or single-broker) cluster still gets its offsets topic."""
        live = len(self.broker.coordinator.brokers())
        return max(1, min(self.broker.config.offsets_topic_replication_factor, live))

    def ensure_topic(self):
        """A Deferred that fires once ``__consumer_offsets`` exists."""
        return self._topic.ensure(self._topic_spec)

    def _topic_spec(self):
        configs = dict(OFFSETS_TOPIC_CONFIGS)
        # Kafka's offsets.topic.segment.bytes: small segments let the
        # cleaner compact the topic early, so loading stays short.
        configs["segment.bytes"] = str(self.broker.config.offsets_topic_segment_bytes)
        return self.num_partitions, self.replication_factor(), configs

    def partition_of(self, group_id, count=None):
        # The topic's real partition count wins over the config: a broker
        # restarted with another offsets.topic.num.partitions must keep
        # finding groups where it wrote them.
        count = count or self.broker.num_partitions(OFFSETS_TOPIC) or self.num_partitions
        return partition_for(group_id, count)

    def append(self, group_id, entries, producer=None):
        """Append ``[(key, value or None)]`` for one group as a single batch.

        Returns a Deferred firing once the batch is acknowledged: in the log
        of the leader and covered by the partition's high watermark. It
        errbacks with the log's KafkaError (NotLeaderOrFollowerError,
        NotEnoughReplicasError, MessageTooLargeError, ...) or
        UnacknowledgedWriteError; :func:`coordinator_error` turns either into
        a group error code.
        """
        count = self.broker.num_partitions(OFFSETS_TOPIC)
        if count is None:
            return self.ensure_topic().addCallback(
                lambda _: self._write(group_id, entries, None, producer)
            )
        return defer.maybeDeferred(self._write, group_id, entries, count, producer)

    def _write(self, group_id, entries, count, producer=None):
        now = self.broker.now_ms()
        part = self.broker.partition(OFFSETS_TOPIC, self.partition_of(group_id, count))
        # ``producer``: (id, epoch) of a transaction (TxnOffsetCommit); its
        # batch is transactional, without sequence numbers, as Kafka writes it.
        pid, epoch = producer if producer is not None else (-1, -1)
        batch = batches.build_batch(
            [batches.Record(key, value, (), now) for key, value in entries],
            base_timestamp=now,
            producer_id=pid,
            producer_epoch=epoch,
            is_transactional=producer is not None,
        )
        info = part.append(batch, now, acks=-1, client=False)
        wait = part.wait_for_hw(info.last_offset + 1, self.commit_timeout_s, self.broker.reactor)
        return wait.addCallback(check_acknowledged, part)

    @staticmethod
    def read_chunks(partition, chunk_bytes=8 << 20):
        """Yield the decoded records of ``partition``'s log, one list per
        read; control batches (transaction markers) are left out."""
        for chunk in OffsetStore.read_batches(partition, chunk_bytes):
            yield [r for batch in chunk if not batch.is_control for r in batch.records]

    @staticmethod
    def read_batches(partition, chunk_bytes=8 << 20):
        """Yield the decoded batches of ``partition``'s log, one list per read."""
        plog = partition.log
        offset = plog.log_start_offset
        end = plog.log_end_offset
        while offset < end:
            result = plog.read(offset, chunk_bytes, max_offset=end)
            if not result.size:
                return
            data = result.records
            if not isinstance(data, bytes | bytearray | memoryview):
                data = data.read()
            chunk = []
            for batch in batches.iter_batches(data, verify_crc=False):
                offset = batch.base_offset + batch.last_offset_delta + 1
                chunk.append(batch)
            yield chunk
