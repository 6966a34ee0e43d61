"""``__remote_log_metadata``: where the remote tier's segment states are kept.

Each state change of a remote segment
(:mod:`pluglog.storage.remote.metadata`) is one record, keyed by topic,
partition and segment id, whose value is the whole
:class:`~pluglog.storage.remote.metadata.RemoteSegment` in its new state; a
finished deletion is a tombstone. The topic is compacted, so it keeps one
record per live segment however long the topic lives. A partition's
records go to metadata partition ``abs(java hash("topic-partition")) %
remote.log.metadata.topic.num.partitions``. Appends use acks=all
semantics: the Deferred fires once the high watermark covers the record,
so a state the manager acted on survives a failover (docs/storage.rst
explains why a topic rather than ZooKeeper).

:meth:`MetadataStore.load` reads one metadata partition from its local
replica, one chunk per reactor turn. Runs on the reactor thread.
"""

from twisted.internet import defer, task

from pluglog.errors import NONE, OFFSET_OUT_OF_RANGE, KafkaError
from pluglog.group.store import InternalTopic, OffsetStore, check_acknowledged, partition_for
from pluglog.protocol import api_keys
from pluglog.protocol import records as batches
from pluglog.storage.remote.metadata import (
    DELETE_SEGMENT_FINISHED,
    RemoteSegment,
    parse_key,
    start_key,
)

METADATA_TOPIC = "__remote_log_metadata"
#: Produce to another broker's metadata partition: non-flexible, acks=all.
_PRODUCE_VERSION = 8
#: Reads of a metadata partition no local replica holds: Fetch v11 (non-flexible).
_FETCH_VERSION = 11
_FETCH_BYTES = 8 << 20
_CONNECT_TIMEOUT_S = 10.0


class PartitionMetadata:
    """One user partition's remote segments, newest state of each."""

    __slots__ = ("segments", "start_offset")

    def __init__(self):
        #: segment id -> RemoteSegment
        self.segments = {}
        self.start_offset = -1

    def apply(self, segment):
        if segment.state == DELETE_SEGMENT_FINISHED:
            self.segments.pop(segment.segment_id, None)
        else:
            self.segments[segment.segment_id] = segment

    def in_state(self, *states):
        return sorted(
            (s for s in self.segments.values() if s.state in states), key=lambda s: s.base_offset
        )


class MetadataStore:
    """Appends and reads ``__remote_log_metadata`` records."""

    def __init__(self, broker, connect=None):
        self.broker = broker
        self.num_partitions = broker.config.remote_log_metadata_topic_num_partitions
        self.write_timeout_s = broker.config.offsets_commit_timeout_ms / 1000.0
        # Not internal, as in Kafka: brokers produce to the partitions others lead.
        self._topic = InternalTopic(broker, METADATA_TOPIC, internal=False)
        #: ``connect(reactor, config, host, port, client_id, timeout)``: the
        #: inter-broker connection (pluglog.replication.peer) for writes to a
        #: metadata partition another broker leads.
        self.connect = connect
        self._peers = {}

    def ensure_topic(self):
        """A Deferred that fires once the topic exists."""
        return self._topic.ensure(self._topic_spec)

    def _topic_spec(self):
        config = self.broker.config
        live = len(self.broker.coordinator.brokers())
        factor = max(1, min(config.remote_log_metadata_topic_replication_factor, live))
        configs = {
            "cleanup.policy": "compact",
            "min.insync.replicas": str(min(2, factor)),
            "segment.bytes": str(100 << 20),
        }
        return self.num_partitions, factor, configs

    def partition_of(self, topic, partition):
        count = self.broker.num_partitions(METADATA_TOPIC) or self.num_partitions
        return partition_for(f"{topic}-{partition}", count)

    def local_partition(self, topic, partition, leader=False):
        """The hosted metadata partition of ``topic``-``partition`` (led here
        when ``leader``), or None."""
        part = self.broker.partitions.get((METADATA_TOPIC, self.partition_of(topic, partition)))
        if part is None or leader and not part.is_leader:
            return None
        return part

    def write(self, segment):
        """Append ``segment``'s state (a tombstone for DELETE_SEGMENT_FINISHED);
        a Deferred fired once the high watermark covers it."""
        value = None if segment.state == DELETE_SEGMENT_FINISHED else segment.to_json()
        return self._append(segment.topic, segment.partition, segment.key_bytes(), value)

    def write_start(self, topic, partition, offset):
        """Record the partition's remote log start (DeleteRecords)."""
        return self._append(topic, partition, start_key(topic, partition), str(offset).encode())

    def _append(self, topic, partition, key, value):
        part = self.local_partition(topic, partition, leader=True)
        if part is None:
            # Led by another broker (a cluster): a Produce with acks=all to it.
            return self._produce_remote(self.partition_of(topic, partition), key, value)
        return defer.maybeDeferred(self._write, part, key, value)

    @defer.inlineCallbacks
    def _leader_connection(self, index):
        """The inter-broker connection to the leader of metadata partition
        ``index``: a Deferred of ``(leader id, protocol)``."""
        state = self.broker.coordinator.partition_state(METADATA_TOPIC, index)
        leader = getattr(state, "leader", -1)
        address = None
        for node, host, port, _rack in self.broker.coordinator.brokers():
            if node == leader:
                address = (host, port)
        if address is None or self.connect is None:
            raise RuntimeError(f"{METADATA_TOPIC}-{index} has no reachable leader")
        proto = self._peers.get(leader)
        if proto is None or not proto.connected:
            proto = yield self.connect(
                self.broker.reactor,
                self.broker.config,
                address[0],
                address[1],
                f"remote-log-metadata-{self.broker.node_id}",
                _CONNECT_TIMEOUT_S,
            )
            self._peers[leader] = proto
        return leader, proto

    @defer.inlineCallbacks
    def _request(self, index, api_key, version, body):
        leader, proto = yield self._leader_connection(index)
        try:
            response = yield proto.request(api_key, version, body)
        except Exception:
            self._peers.pop(leader, None)
            proto.close()
            raise
        return leader, response

    @defer.inlineCallbacks
    def _produce_remote(self, index, key, value):
        now = self.broker.now_ms()
        batch = batches.build_batch([batches.Record(key, value, (), now)], base_timestamp=now)
        request = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": int(self.write_timeout_s * 1000),
            "topic_data": [
                {"name": METADATA_TOPIC, "partition_data": [{"index": index, "records": batch}]}
            ],
        }
        leader, response = yield self._request(index, api_keys.PRODUCE, _PRODUCE_VERSION, request)
        code = response["responses"][0]["partition_responses"][0]["error_code"]
        if code != NONE:
            raise KafkaError(f"{METADATA_TOPIC}-{index} on broker {leader}: error {code}")

    def close(self):
        for proto in self._peers.values():
            proto.close()
        self._peers.clear()

    def _write(self, part, key, value):
        now = self.broker.now_ms()
        batch = batches.build_batch([batches.Record(key, value, (), now)], base_timestamp=now)
        info = part.append(batch, now, acks=-1, client=False)
        wait = part.wait_for_hw(info.last_offset + 1, self.write_timeout_s, self.broker.reactor)
        return wait.addCallback(check_acknowledged, part)

    def load(self, part):
        """Read metadata partition ``part`` (a local replica): a Deferred of
        ``{(topic, partition): PartitionMetadata}``."""
        found = {}

        @defer.inlineCallbacks
        def run():
            for chunk in OffsetStore.read_chunks(part):
                apply_records(found, chunk)
                # One chunk per reactor turn: other requests keep flowing.
                yield task.deferLater(self.broker.reactor, 0, lambda: None)
            return found

        return run()

    @defer.inlineCallbacks
    def load_remote(self, index):
        """Read metadata partition ``index`` from its leader, as a consumer
        (below its high watermark), for a broker that hosts no in-sync
        replica of it: a Deferred like :meth:`load`'s."""
        found = {}
        offset = 0
        while True:
            body = {
                "replica_id": -1,
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": _FETCH_BYTES,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,  # sessionless (KIP-227)
                "topics": [
                    {
                        "topic": METADATA_TOPIC,
                        "partitions": [
                            {
                                "partition": index,
                                "current_leader_epoch": -1,
                                "fetch_offset": offset,
                                "log_start_offset": -1,
                                "partition_max_bytes": _FETCH_BYTES,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            }
            leader, response = yield self._request(index, api_keys.FETCH, _FETCH_VERSION, body)
            answer = response["responses"][0]["partitions"][0]
            code = answer["error_code"]
            if code == OFFSET_OUT_OF_RANGE and offset < answer["log_start_offset"]:
                offset = answer["log_start_offset"]
                continue
            if code != NONE:
                raise KafkaError(f"{METADATA_TOPIC}-{index} on broker {leader}: error {code}")
            data = answer["records"] or b""
            if not isinstance(data, bytes | bytearray | memoryview):
                data = data.read()
            chunk = []
            for batch in batches.iter_batches(bytes(data), verify_crc=False):
                offset = batch.base_offset + batch.last_offset_delta + 1
                if not batch.is_control:
                    chunk.extend(batch.records)
            apply_records(found, chunk)
            if offset >= answer["high_watermark"] or not chunk and not data:
                return found


def apply_records(found, records):
    """Fold ``__remote_log_metadata`` records (anything with ``key`` and
    ``value``) into ``found``: ``{(topic, partition): PartitionMetadata}``.
    Also the decoder of pluglog-spark's direct remote reads."""
    for record in records:
        key = parse_key(record.key)
        tp = (key[1], key[2])
        meta = found.get(tp)
        if meta is None:
            meta = found[tp] = PartitionMetadata()
        if key[0] == "start":
            if record.value is not None:
                meta.start_offset = int(record.value)
        elif record.value is None:
            meta.segments.pop(key[3], None)
        else:
            meta.apply(RemoteSegment.from_json(record.value))
