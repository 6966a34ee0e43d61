"""KafkaServerProtocol with StringTransport and Clock: framing, order, long polls."""

import shutil
import struct
import tempfile

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from pluglog import protocol as codec
from pluglog.broker.core import Broker
from pluglog.config import BrokerConfig
from pluglog.plugins import make_plugin_manager
from pluglog.protocol.records import Record, build_batch, iter_records
from pluglog.registry import Registry
from pluglog.server.protocol import KafkaServerFactory


def make_broker(data_dir):
    clock = Clock()
    clock.advance(1_700_000_000)
    config = BrokerConfig(data_dir=str(data_dir), storage="memory", advertised_port=9092)
    b = Broker(config, Registry(make_plugin_manager(autoload=False)), clock)
    b.start()
    b.create_topic("t", 2)
    return b


def connect(broker):
    proto = KafkaServerFactory(broker).buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    return proto, transport


def feed_bytewise(proto, data):
    for i in range(len(data)):
        proto.dataReceived(data[i : i + 1])


def responses(transport, api_versions):
    """Decode every response frame written so far; api_versions: [(key, version)]."""
    data = transport.value()
    transport.clear()
    out = []
    pos = 0
    for key, version in api_versions:
        (size,) = struct.unpack_from(">i", data, pos)
        out.append(codec.decode_response(key, version, data[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    assert pos == len(data), "unexpected extra bytes"
    return out


def req(key, version, cid, body):
    return codec.encode_request(key, version, cid, "test", body)


def produce_body(topic, partition, values, acks=1):
    batch = build_batch([Record(value=v) for v in values], base_timestamp=1)
    return {
        "acks": acks,
        "timeout_ms": 1000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
        ],
    }


def fetch_body(topic, partition, offset, max_wait=5000, min_bytes=1):
    return {
        "max_wait_ms": max_wait,
        "min_bytes": min_bytes,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "fetch_offset": offset,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
    }


BAD_FRAMES = [
    struct.pack(">i", 4) + b"\0\0\0\0",  # shorter than any header
    struct.pack(">ihhih", 10, 999, 0, 1, -1),  # unknown api key
    struct.pack(">ihhih", 10, codec.METADATA, 99, 1, -1),  # unknown version
    struct.pack(">ihhih", 14, codec.METADATA, 1, 1, -1) + struct.pack(">i", 10**9),
]


class ServerProtocolTests(SynchronousTestCase):
    """Driven by StringTransport and a Clock: deterministic, no sockets."""

    def setUp(self):
        # tempfile, not self.mktemp(): under pytest that would litter the checkout.
        data_dir = tempfile.mkdtemp(prefix="pluglog-server-test-")
        self.addCleanup(shutil.rmtree, data_dir, True)
        self.broker = make_broker(data_dir)

    def test_api_versions_fed_one_byte_at_a_time(self):
        broker = self.broker
        proto, transport = connect(broker)
        feed_bytewise(proto, req(codec.API_VERSIONS, 3, 1, {"client_software_name": "t"}))
        [(cid, body)] = responses(transport, [(codec.API_VERSIONS, 3)])
        assert cid == 1 and body["error_code"] == 0
        served = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
        assert served == codec.SUPPORTED

    def test_unknown_api_versions_version_gets_v0_fallback(self):
        broker = self.broker
        proto, transport = connect(broker)
        proto.dataReceived(struct.pack(">ihhih", 10, codec.API_VERSIONS, 77, 5, -1))
        [(cid, body)] = responses(transport, [(codec.API_VERSIONS, 0)])
        assert (cid, body["error_code"]) == (5, 35)
        assert body["api_keys"][0]["api_key"] == codec.API_VERSIONS
        assert not transport.disconnecting

    def test_produce_then_fetch_round_trip(self):
        broker = self.broker
        proto, transport = connect(broker)
        proto.dataReceived(
            req(codec.PRODUCE, 8, 1, produce_body("t", 1, [b"a", b"b"]))
            + req(codec.FETCH, 11, 2, fetch_body("t", 1, 0))
        )
        (_, produced), (_, fetched) = responses(transport, [(codec.PRODUCE, 8), (codec.FETCH, 11)])
        part = produced["responses"][0]["partition_responses"][0]
        assert (part["error_code"], part["base_offset"]) == (0, 0)
        data = fetched["responses"][0]["partitions"][0]
        assert data["high_watermark"] == 2
        assert [r.value for r in iter_records(data["records"])] == [b"a", b"b"]

    def test_broker_fetch_max_bytes_caps_the_response(self):
        broker = self.broker
        broker.config = broker.config.replace(fetch_max_bytes=10)
        proto, transport = connect(broker)
        proto.dataReceived(
            req(codec.PRODUCE, 8, 1, produce_body("t", 0, [b"a" * 50]))
            + req(codec.PRODUCE, 8, 2, produce_body("t", 0, [b"b" * 50]))
            + req(codec.FETCH, 11, 3, {**fetch_body("t", 0, 0), "max_bytes": 1 << 20})
        )
        *_, (_, fetched) = responses(
            transport, [(codec.PRODUCE, 8), (codec.PRODUCE, 8), (codec.FETCH, 11)]
        )
        data = fetched["responses"][0]["partitions"][0]
        # Only the first batch (KIP-74 lets one batch exceed the cap), not both.
        assert data["high_watermark"] == 2
        assert [r.value for r in iter_records(data["records"])] == [b"a" * 50]

    def test_long_poll_keeps_responses_in_order_and_wakes_on_append(self):
        broker = self.broker
        proto, transport = connect(broker)
        other, other_transport = connect(broker)
        proto.dataReceived(
            req(codec.FETCH, 11, 1, fetch_body("t", 0, 0))
            + req(codec.METADATA, 8, 2, {"topics": None})
        )
        assert transport.value() == b"", "metadata must wait behind the parked fetch"
        other.dataReceived(req(codec.PRODUCE, 8, 9, produce_body("t", 0, [b"x"])))
        responses(other_transport, [(codec.PRODUCE, 8)])
        assert transport.value() == b"", "the parked fetch re-reads at the next turn"
        broker.reactor.advance(0)
        (cid1, fetched), (cid2, meta) = responses(
            transport, [(codec.FETCH, 11), (codec.METADATA, 8)]
        )
        assert (cid1, cid2) == (1, 2)
        assert [
            r.value for r in iter_records(fetched["responses"][0]["partitions"][0]["records"])
        ] == [b"x"]
        assert meta["topics"][0]["name"] == "t"

    def test_long_poll_times_out_on_the_clock(self):
        broker = self.broker
        proto, transport = connect(broker)
        proto.dataReceived(req(codec.FETCH, 11, 1, fetch_body("t", 0, 0, max_wait=500)))
        assert transport.value() == b""
        broker.reactor.advance(0.499)
        assert transport.value() == b""
        broker.reactor.advance(0.002)
        [(cid, fetched)] = responses(transport, [(codec.FETCH, 11)])
        part = fetched["responses"][0]["partitions"][0]
        assert (cid, part["error_code"], bytes(part["records"] or b"")) == (1, 0, b"")

    def test_acks_zero_gets_no_response(self):
        broker = self.broker
        proto, transport = connect(broker)
        proto.dataReceived(
            req(codec.PRODUCE, 8, 1, produce_body("t", 0, [b"q"], acks=0))
            + req(
                codec.LIST_OFFSETS,
                5,
                2,
                {
                    "replica_id": -1,
                    "topics": [
                        {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}
                    ],
                },
            )
        )
        [(cid, offsets)] = responses(transport, [(codec.LIST_OFFSETS, 5)])
        assert cid == 2
        assert offsets["topics"][0]["partitions"][0]["offset"] == 1

    def test_acks_zero_failure_closes_the_connection(self):
        broker = self.broker
        proto, transport = connect(broker)
        proto.dataReceived(req(codec.PRODUCE, 8, 1, produce_body("nope", 0, [b"q"], acks=0)))
        assert transport.value() == b""
        assert transport.disconnecting

    def test_oversize_frame_closes_only_that_connection(self):
        broker = self.broker
        bad, bad_transport = connect(broker)
        good, good_transport = connect(broker)
        bad.dataReceived(struct.pack(">i", broker.config.socket_request_max_bytes + 1))
        assert bad_transport.disconnecting
        good.dataReceived(req(codec.API_VERSIONS, 0, 1, {}))
        assert responses(good_transport, [(codec.API_VERSIONS, 0)])[0][1]["error_code"] == 0

    def test_bad_frames_close_the_connection(self):
        broker = self.broker
        for frame in BAD_FRAMES:
            proto, transport = connect(broker)
            proto.dataReceived(frame)
            assert transport.disconnecting
            assert transport.value() == b""

    def test_sasl_handshake_without_a_sasl_listener_is_an_illegal_state(self):
        broker = self.broker
        proto, transport = connect(broker)
        # SaslHandshake is served (#16), but this connection is not on a SASL listener.
        proto.dataReceived(
            codec.encode_request(codec.SASL_HANDSHAKE, 1, 3, "t", {"mechanism": "PLAIN"})
        )
        [(cid, body)] = responses(transport, [(codec.SASL_HANDSHAKE, 1)])
        assert (cid, body["error_code"]) == (3, 34)  # ILLEGAL_SASL_STATE
        assert not transport.disconnecting

    def test_unadvertised_version_without_error_field_closes(self):
        broker = self.broker
        proto, transport = connect(broker)
        # OffsetCommit v1 is defined but not advertised, and its response has no
        # top-level error code to say so: close, as Kafka does.
        proto.dataReceived(
            codec.encode_request(codec.OFFSET_COMMIT, 1, 3, "t", {"group_id": "g", "topics": []})
        )
        assert transport.disconnecting
