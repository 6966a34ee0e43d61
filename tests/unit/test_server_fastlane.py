"""The produce fast lane answers byte for byte like the general path, or declines."""

import random
import shutil
import struct
import tempfile

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from pluglog import errors
from pluglog import protocol as codec
from pluglog.broker.core import Broker
from pluglog.config import BrokerConfig
from pluglog.plugins import make_plugin_manager
from pluglog.protocol.records import Record, build_batch
from pluglog.registry import Registry
from pluglog.server.fastlane import produce_fast
from pluglog.server.handlers import NO_RESPONSE, CloseConnection, RequestContext
from pluglog.server.handlers.produce import handle_produce
from pluglog.server.protocol import KafkaServerFactory

CLOSE = "close"


def make_broker(data_dir, storage):
    clock = Clock()
    clock.advance(1_700_000_000.5)
    config = BrokerConfig(data_dir=str(data_dir), storage=storage, advertised_port=9092)
    broker = Broker(config, Registry(make_plugin_manager(autoload=False)), clock)
    broker.start()
    broker.create_topic("t", 2)
    broker.create_topic("small", 1, configs={"max.message.bytes": "200"})
    broker.create_topic("logtime", 1, configs={"message.timestamp.type": "LogAppendTime"})
    broker.create_topic("u_9.x-y", 1)
    broker.create_topic("strict", 1, configs={"min.insync.replicas": "2"})
    broker.create_topic("compacted", 1, configs={"cleanup.policy": "compact"})
    broker.create_topic("zstd", 1, configs={"compression.type": "zstd"})
    return broker


def general_frame(broker, payload):
    """What the general path writes for ``payload``: the response frame, None
    (no response) or CLOSE (the connection would be dropped)."""
    payload = memoryview(payload)
    try:
        header = codec.parse_request_header(payload)
        request = codec.decode_request(header, payload)
        result = handle_produce(RequestContext(broker, header, "peer"), request)
    except (ValueError, CloseConnection):
        return CLOSE
    if result is NO_RESPONSE:
        return None
    parts = codec.encode_response(0, header.api_version, header.correlation_id, result)
    body = b"".join(bytes(p) for p in parts)
    return struct.pack(">i", len(body)) + body


def batch(values=(b"v",), producer_id=-1, sequence=-1, timestamp=1):
    return build_batch(
        [Record(value=v) for v in values],
        base_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=sequence,
    )


def produce_request(topic_data, version=8, acks=1, client_id="c", cid=7, transactional_id=None):
    """A whole Produce frame (size prefix included)."""
    body = {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout_ms": 1000,
        "topic_data": topic_data,
    }
    return codec.encode_request(codec.PRODUCE, version, cid, client_id, body)


def one_partition(records, topic="t", index=0):
    return [{"name": topic, "partition_data": [{"index": index, "records": records}]}]


def produce_payload(version, records, topic="t", index=0, acks=1, client_id="c", cid=7):
    """A one-partition Produce payload (no size prefix), as the protocol hands it on."""
    return produce_request(one_partition(records, topic, index), version, acks, client_id, cid)[4:]


class FastLaneEquivalenceTests(SynchronousTestCase):
    """Two brokers fed the same requests: one through the fast lane, one through
    the general path. Every answer must be the same bytes."""

    storage = "memory"

    def setUp(self):
        self.dirs = [tempfile.mkdtemp(prefix="pluglog-fast-") for _ in range(2)]
        self.fast = make_broker(self.dirs[0], self.storage)
        self.general = make_broker(self.dirs[1], self.storage)

    def tearDown(self):
        for broker in (self.fast, self.general):
            broker.storage.close()
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)

    def same(self, payload):
        """Assert the fast lane takes ``payload`` and answers like the general path."""
        expected = general_frame(self.general, payload)
        got = produce_fast(self.fast, memoryview(payload))
        assert got is not None, "the fast lane declined a one-partition produce"
        assert got == expected
        return got

    def declined(self, payload):
        """Assert the fast lane leaves ``payload`` to the general path (and the
        broker untouched)."""
        before = {k: p.log.log_end_offset for k, p in self.fast.partitions.items()}
        assert produce_fast(self.fast, memoryview(payload)) is None
        assert {k: p.log.log_end_offset for k, p in self.fast.partitions.items()} == before

    def test_success_every_version_acks_and_client_id(self):
        for version in range(3, 12):
            for acks in (1, -1):
                for client_id in ("c", None, "", "ĉlïent"):
                    payload = produce_payload(
                        version, batch([b"a", b"bb"]), acks=acks, client_id=client_id
                    )
                    self.same(payload)
        # The offsets advanced on both brokers alike.
        assert self.fast.partition("t", 0).log.log_end_offset == 2 * 9 * 2 * 4
        # A log start offset above 0 is reported from v5 on.
        for broker in (self.fast, self.general):
            broker.partition("t", 0).log.delete_records_before(5)
        for version in range(3, 12):
            got = self.same(produce_payload(version, batch()))
            if version >= 5:
                assert struct.pack(">q", 5) in got[-30:]

    def test_compacted_topic_refuses_keyless_records_alike(self):
        keyless = batch([b"a"])
        keyed = build_batch([Record(b"k", b"v"), Record(b"k2", None)], compression=2)
        half = build_batch([Record(b"k", b"v"), Record(None, b"x")], compression=3)
        for version in (3, 5, 8):
            for records in (keyless, keyed, half):
                self.same(produce_payload(version, records, topic="compacted"))
        got = self.same(produce_payload(8, half, topic="compacted"))
        assert b"without a key" in got
        assert self.fast.partition("compacted", 0).log.log_end_offset == 2 * 3

    def test_record_errors_name_every_keyless_record_alike(self):
        # KIP-467: the answer names each bad record by its batch index, on
        # both paths alike (v8+; earlier versions have no such field).
        records = [Record(None if i in (1, 4, 7) else b"k%d" % i, b"v") for i in range(9)]
        mixed = build_batch(records, compression=1)
        for version in (3, 7, 9, 11, 8):
            got = self.same(produce_payload(version, mixed, topic="compacted"))
        _, body = codec.decode_response(codec.PRODUCE, 8, got[4:])
        [part] = body["responses"][0]["partition_responses"]
        assert part["error_code"] == errors.INVALID_RECORD
        assert [e["batch_index"] for e in part["record_errors"]] == [1, 4, 7]
        messages = [e["batch_index_error_message"] for e in part["record_errors"]]
        assert all("without a key" in m for m in messages)
        assert "3 record(s) of the batch refused" in part["error_message"]
        assert self.fast.partition("compacted", 0).log.log_end_offset == 0

    def test_compression_type_recompresses_alike(self):
        from pluglog.protocol.records import iter_batches

        plain = batch([b"a" * 100, b"b"])
        gzipped = build_batch([Record(b"k", b"v" * 50)], compression=1)
        for version in (3, 8):
            for records in (plain, gzipped):
                self.same(produce_payload(version, records, topic="zstd"))
        log = self.fast.partition("zstd", 0).log
        stored = log.read(0, 1 << 20).records
        stored = stored.read() if hasattr(stored, "read") else stored
        found = list(iter_batches(stored))  # CRCs verified
        assert [b.compression for b in found] == [4, 4, 4, 4]
        assert [len(b.records) for b in found] == [2, 1, 2, 1]
        assert [b.base_offset for b in found] == [0, 2, 3, 5]
        assert found[1].records[0].value == b"v" * 50

    def test_log_append_time_and_other_topic_names(self):
        for version in (3, 5, 8, 9, 10):
            self.same(produce_payload(version, batch(), topic="logtime"))
            self.same(produce_payload(version, batch(), topic="u_9.x-y"))
            self.same(produce_payload(version, batch(), topic="ünï"))  # unknown

    def test_errors_match(self):
        good = batch([b"x"])
        corrupt = bytearray(good)
        corrupt[-1] ^= 0xFF  # CRC mismatch
        magic = bytearray(good)
        magic[16] = 1
        control = build_batch([Record(value=b"c")], base_timestamp=1, is_control=True)
        mismatch = bytearray(good)
        mismatch[23:27] = struct.pack(">i", 3)  # lastOffsetDelta != count - 1 (CRC covers it)
        for version in range(3, 12):
            self.same(produce_payload(version, good, topic="missing"))  # unknown topic
            self.same(produce_payload(version, good, index=9))  # unknown partition
            self.same(produce_payload(version, bytes(corrupt)))
            self.same(produce_payload(version, bytes(magic)))
            self.same(produce_payload(version, control))
            self.same(produce_payload(version, bytes(mismatch)))
            self.same(produce_payload(version, batch([b"y" * 300]), topic="small"))
            self.same(
                produce_payload(version, good, topic="strict", acks=-1)
            )  # NOT_ENOUGH_REPLICAS
            self.same(produce_payload(version, good, topic="strict", acks=1))

    def test_idempotent_duplicates_and_gaps_match(self):
        pid = 4242
        for version in (3, 8, 10):
            base = {3: 0, 8: 1000, 10: 2000}[version]
            first = batch([b"a", b"b"], producer_id=pid, sequence=base)
            self.same(produce_payload(version, first, index=1))
            self.same(produce_payload(version, first, index=1))  # duplicate: same offsets
            gap = batch([b"c"], producer_id=pid, sequence=base + 5)
            self.same(produce_payload(version, gap, index=1))  # OUT_OF_ORDER_SEQUENCE
            self.same(
                produce_payload(
                    version, batch([b"d"], producer_id=pid, sequence=base + 2), index=1
                )
            )

    def test_other_shapes_are_declined(self):
        one = batch()
        two_partitions = produce_request(
            [
                {
                    "name": "t",
                    "partition_data": [{"index": 0, "records": one}, {"index": 1, "records": one}],
                }
            ]
        )[4:]
        two_topics = produce_request(one_partition(one) + one_partition(one, "u_9.x-y"))[4:]
        transactional = produce_request(one_partition(one), acks=-1, transactional_id="tx")[4:]
        valid = produce_payload(8, one)
        bad_client_id = bytearray(valid)
        bad_client_id[10] = 0xFF  # client id "c" -> invalid UTF-8
        for payload in (
            two_partitions,
            two_topics,
            transactional,
            produce_payload(8, one, acks=0),
            produce_payload(8, one, acks=2),
            produce_payload(8, None),
            produce_payload(8, one + one),  # two batches
            produce_payload(8, one[:-1] + b""),  # short batch, length mismatch
            valid + b"\x00",  # trailing byte
            bytes(bad_client_id),
        ):
            self.declined(payload)
        # ...and every truncation of a valid frame.
        for cut in range(len(valid)):
            self.declined(valid[:cut])

    def test_flexible_versions_decline_other_shapes_and_mutations_match(self):
        # v9-v11 (compact fields, tag buffers): what librdkafka >= 2.5 sends.
        one = batch()
        for version in (9, 10, 11):
            valid = produce_payload(version, one, client_id="flex")
            two_partitions = produce_request(
                [
                    {
                        "name": "t",
                        "partition_data": [
                            {"index": 0, "records": one},
                            {"index": 1, "records": one},
                        ],
                    }
                ],
                version,
            )[4:]
            transactional = produce_request(
                one_partition(one), version, acks=-1, transactional_id="tx"
            )[4:]
            header_tags = bytearray(valid)
            header_tags[14] = 1  # the header's tag count (after client id "flex")
            for payload in (
                two_partitions,
                transactional,
                produce_payload(version, one, acks=0),
                produce_payload(version, None),
                produce_payload(version, one + one),
                valid + b"\x00",
                bytes(header_tags),
            ):
                self.declined(payload)
            for cut in range(len(valid)):
                self.declined(valid[:cut])
        rng = random.Random(10)
        valid = produce_payload(10, batch([b"m" * 20]), client_id="rand")
        taken = 0
        for _ in range(2000):
            payload = bytearray(valid)
            for _ in range(rng.randint(1, 3)):
                payload[rng.randrange(4, len(payload))] = rng.randrange(256)
            expected = general_frame(self.general, bytes(payload))
            got = produce_fast(self.fast, memoryview(bytes(payload)))
            if got is None:
                general_frame(self.fast, bytes(payload))
                continue
            taken += 1
            assert expected != CLOSE, bytes(payload)
            assert got == expected
        assert taken > 50

    def test_acks_all_on_a_replicated_partition_is_left_to_the_general_path(self):
        # Three replicas, all in sync: acks=all must wait for the followers,
        # which only the general path (a delayed answer) does; acks=1 stays fast.
        for broker in (self.fast, self.general):
            part = broker.partitions[("t", 0)]
            part.become_leader(1, (0, 1, 2), (0, 1, 2), now_ms=0)
        self.declined(produce_payload(8, batch(), acks=-1))
        self.same(produce_payload(8, batch(), acks=1))
        payload = memoryview(produce_payload(8, batch(), acks=-1))
        header = codec.parse_request_header(payload)
        request = codec.decode_request(header, payload)
        answer = handle_produce(RequestContext(self.general, header, "peer"), request)
        results = []
        answer.addCallback(results.append)
        assert results == []  # parked until the ISR has the batch
        part = self.general.partitions[("t", 0)]
        end = part.log.log_end_offset
        part.update_follower(1, end, now_ms=1)
        assert results == []
        part.update_follower(2, end, now_ms=1)
        (response,) = results
        result = response["responses"][0]["partition_responses"][0]
        assert result["error_code"] == 0 and result["base_offset"] == end - 1

    def test_random_mutations_decline_or_match(self):
        rng = random.Random(6)
        valid = produce_payload(8, batch([b"m" * 20]), client_id="rand")
        taken = 0
        for _ in range(3000):
            payload = bytearray(valid)
            for _ in range(rng.randint(1, 3)):
                payload[rng.randrange(4, len(payload))] = rng.randrange(256)
            expected = general_frame(self.general, bytes(payload))
            got = produce_fast(self.fast, memoryview(bytes(payload)))
            if got is None:
                # Declined: feed the general path on the fast broker too, so
                # both brokers keep the same state.
                general_frame(self.fast, bytes(payload))
                continue
            taken += 1
            assert expected != CLOSE, (
                f"fast lane answered a frame the general path refuses: {bytes(payload)!r}"
            )
            assert got == expected
        assert taken > 100, "mutations of the correlation id, acks and records must still be taken"


class FastLaneSegmentsTests(FastLaneEquivalenceTests):
    storage = "segments"


class FastLaneProtocolTests(SynchronousTestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pluglog-fast-")
        self.broker = make_broker(self.dir, "memory")

    def tearDown(self):
        self.broker.storage.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def connect(self):
        proto = KafkaServerFactory(self.broker).buildProtocol(None)
        transport = StringTransport()
        proto.makeConnection(transport)
        return proto, transport

    def test_produce_waits_behind_a_parked_fetch(self):
        proto, transport = self.connect()
        fetch = {
            "max_wait_ms": 5000,
            "min_bytes": 1,
            "topics": [
                {
                    "topic": "t",
                    "partitions": [
                        {"partition": 1, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        }
        proto.dataReceived(
            codec.encode_request(codec.FETCH, 11, 1, "c", fetch)
            + produce_request(one_partition(batch()), cid=2)
        )
        assert transport.value() == b"", "the produce answer must wait behind the fetch"
        self.broker.reactor.advance(5.1)
        data = transport.value()
        (size,) = struct.unpack_from(">i", data, 0)
        cid_fetch = struct.unpack_from(">i", data, 4)[0]
        cid_produce = struct.unpack_from(">i", data, 4 + size + 4)[0]
        assert (cid_fetch, cid_produce) == (1, 2)
        cid, body = codec.decode_response(codec.PRODUCE, 8, data[4 + size + 4 :])
        assert body["responses"][0]["partition_responses"][0]["base_offset"] == 0

    def test_a_crash_in_the_fast_lane_closes_only_that_connection(self):
        proto, transport = self.connect()

        def broken(*args, **kwargs):
            raise RuntimeError("disk on fire")

        self.broker.partition("t", 0).append = broken
        proto.dataReceived(produce_request(one_partition(batch()), cid=1))
        assert transport.disconnecting
        assert transport.value() == b""
        self.flushLoggedErrors(RuntimeError)
        other, other_transport = self.connect()
        other.dataReceived(produce_request(one_partition(batch(), index=1), cid=3))
        assert not other_transport.disconnecting
        assert struct.unpack_from(">i", other_transport.value(), 4)[0] == 3


class EarlyAnswerFailureTests(SynchronousTestCase):
    """A failing answer (the early one, sent from inside the log's append)
    closes the connection and leaves the log's bookkeeping complete."""

    def test_a_failing_send_closes_the_connection_and_the_log_stays_whole(self):
        data_dir = tempfile.mkdtemp(prefix="pluglog-fast-")
        self.addCleanup(shutil.rmtree, data_dir, True)
        broker = make_broker(data_dir, "segments")
        self.addCleanup(broker.storage.close)
        proto = KafkaServerFactory(broker).buildProtocol(None)
        transport = StringTransport()
        proto.makeConnection(transport)

        def broken_write(data):
            raise RuntimeError("socket on fire")

        transport.write = broken_write
        proto.dataReceived(produce_request(one_partition(batch([b"a", b"b"])), cid=1))
        self.flushLoggedErrors(RuntimeError)
        assert transport.disconnecting
        part = broker.partition("t", 0)
        # Written and fully accounted for: end offset and high watermark moved.
        assert part.log.log_end_offset == 2
        assert part.high_watermark == 2
