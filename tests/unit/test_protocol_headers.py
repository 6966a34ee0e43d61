"""Header rules, ApiVersions special cases, zero-copy records, aiokafka cross-checks."""

import pytest
from aiokafka.protocol.admin import ApiVersionResponse_v0
from aiokafka.protocol.commit import OffsetFetchResponse_v3
from aiokafka.protocol.fetch import FetchResponse_v11
from aiokafka.protocol.group import JoinGroupRequest_v5
from aiokafka.protocol.metadata import MetadataRequest_v5, MetadataResponse_v5
from aiokafka.protocol.produce import ProduceRequest_v7

import pluglog.protocol as proto
from pluglog.protocol import primitives as p
from pluglog.protocol.errors import DecodeError


def test_request_header_v1_for_non_flexible_versions():
    frame = proto.encode_request(3, 8, 7, "cid", {"topics": None})
    # size, key 3, version 8, correlation 7, client_id "cid", then the body at once.
    assert frame[4:17] == b"\x00\x03\x00\x08\x00\x00\x00\x07\x00\x03cid"
    header = proto.parse_request_header(memoryview(frame)[4:])
    assert header == proto.RequestHeader(3, 8, 7, "cid", 13)


def test_request_header_v2_keeps_client_id_non_compact_and_skips_unknown_tags():
    body = {"client_software_name": "x", "client_software_version": "1"}
    frame = proto.encode_request(18, 3, 9, "cid", body)
    payload = frame[4:]
    assert payload[8:13] == b"\x00\x03cid"  # int16 length, not a compact string
    assert payload[13] == 0  # the header's empty tag buffer
    # Add two unknown header tags; the parser must skip them.
    tagged = payload[:13] + b"\x02\x05\x02ab\x09\x00" + payload[14:]
    header = proto.parse_request_header(tagged)
    assert header.body_offset == 13 + 7
    assert proto.decode_request(header, tagged) == body


def test_null_client_id():
    frame = proto.encode_request(12, 0, 1, None, {"group_id": "g", "member_id": "m"})
    assert proto.parse_request_header(frame[4:]).client_id is None


def test_unknown_api_and_version_still_give_correlation_id():
    unknown_key = b"\x03\xe7\x00\x00\x00\x00\x00\x2a\x00\x01c"
    assert proto.parse_request_header(unknown_key) == (999, 0, 42, "c", None)
    too_new = b"\x00\x12\x00\x63\x00\x00\x00\x05\xff\xff"
    assert proto.parse_request_header(too_new) == (18, 99, 5, None, None)
    truncated_client_id = b"\x00\x12\x00\x63\x00\x00\x00\x05\x00\x09ab"
    assert proto.parse_request_header(truncated_client_id) == (18, 99, 5, None, None)
    with pytest.raises(proto.UnsupportedVersionError):
        proto.decode_request(proto.parse_request_header(too_new), too_new)
    with pytest.raises(DecodeError):
        proto.parse_request_header(b"\x00\x12\x00")


def test_response_header_v1_iff_flexible_but_never_for_api_versions():
    # IncrementalAlterConfigs v1 is flexible: correlation id, then a tag buffer.
    flex = b"".join(proto.encode_response(44, 1, 5, {}))
    # correlation id, header tags, throttle_time_ms, compact empty array, body tags
    assert flex == b"\x00\x00\x00\x05" + b"\x00" + b"\x00" * 4 + b"\x01" + b"\x00"
    non_flex = b"".join(proto.encode_response(44, 0, 5, {}))
    assert non_flex == b"\x00\x00\x00\x05" + b"\x00" * 4 + b"\x00\x00\x00\x00"
    api_versions = b"".join(proto.encode_response(18, 3, 5, {}))
    # header v0, then error_code 0 -- no header tag byte in between.
    assert api_versions[:6] == b"\x00\x00\x00\x05\x00\x00"


def test_unknown_body_tags_are_skipped_in_structs_and_elements():
    body = {"api_keys": [{"api_key": 0, "min_version": 0, "max_version": 8}]}
    payload = b"".join(proto.encode_response(18, 3, 1, body))
    # header v0, error_code, compact array of one element (3 int16s + its tags),
    # throttle_time_ms, body tags
    element = b"\x00\x00" + b"\x00\x00" + b"\x00\x08" + b"\x00"
    assert payload == b"\x00\x00\x00\x01" + b"\x00\x00" + b"\x02" + element + b"\x00" * 4 + b"\x00"
    # Give the element an unknown tag 99, and the body known tag 1 plus unknown tag 48.
    element_tagged = payload[:13] + b"\x01\x63\x01z" + payload[14:]
    epoch = b"\x01\x08" + (7).to_bytes(8, "big")
    body_tagged = element_tagged[:-1] + b"\x02" + epoch + b"\x30\x02ab"
    _, decoded = proto.decode_response(18, 3, body_tagged)
    assert decoded["api_keys"] == body["api_keys"]
    assert decoded["finalized_features_epoch"] == 7
    # A known tag whose size disagrees with its type is malformed.
    bad = element_tagged[:-1] + b"\x01\x01\x02\x00\x07"
    with pytest.raises(DecodeError):
        proto.decode_response(18, 3, bad)


def test_fallback_response_is_v0_format():
    payload = b"".join(proto.api_versions_fallback_response(8))
    assert (
        payload == b"\x00\x00\x00\x08" + b"\x00\x23" + b"\x00\x00\x00\x01\x00\x12\x00\x00\x00\x04"
    )
    decoded = ApiVersionResponse_v0.decode(payload[4:])
    assert decoded.error_code == 35
    assert list(decoded.api_versions) == [(18, 0, 4)]


def test_is_flexible_and_supported():
    assert proto.is_flexible(18, 3) and not proto.is_flexible(18, 2)
    assert proto.is_flexible(60, 0) and not proto.is_flexible(0, 8)
    assert proto.is_supported(1, 4) and not proto.is_supported(1, 3)
    assert proto.is_supported(17, 1) and proto.is_defined(17, 1)  # SASL is served (#16)
    assert proto.API_NAMES[0] == "Produce" and proto.API_NAMES[60] == "DescribeCluster"
    with pytest.raises(proto.UnsupportedVersionError):
        proto.is_flexible(1, 18)


def test_produce_records_are_zero_copy():
    records = bytes(range(256)) * 4096  # 1 MiB
    body = {
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
    }
    frame = bytearray(proto.encode_request(0, 8, 1, "c", body))
    payload = memoryview(frame)[4:]
    decoded = proto.decode_request(proto.parse_request_header(payload), payload)
    view = decoded["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(view, memoryview) and view.nbytes == len(records)
    assert view.obj is frame  # a slice of the input buffer, not a copy
    frame[-1] ^= 0xFF
    assert view[-1] == records[-1] ^ 0xFF


class FileRange:
    """Stands in for the server's sendfile range: must not be read by the encoder."""

    def __init__(self, size):
        self.size = size

    def read(self):
        raise AssertionError("the encoder must not read file ranges")


def test_fetch_response_keeps_file_ranges_as_parts():
    rng = FileRange(5000)
    partition = {"partition_index": 0, "high_watermark": 10, "records": rng}
    body = {
        "responses": [{"topic": "t", "partitions": [partition, dict(partition, records=b"ab")]}]
    }
    parts = proto.encode_response(1, 11, 3, body)
    assert [type(part) for part in parts] == [bytes, FileRange, bytes]
    assert parts[1] is rng
    assert parts[0][-4:] == (5000).to_bytes(4, "big")  # the length prefix precedes it
    assert proto.frame_size(parts) == len(parts[0]) + 5000 + len(parts[2])
    # Substituting real bytes for the range gives a well-formed response.
    payload = parts[0] + b"r" * 5000 + parts[2]
    _, decoded = proto.decode_response(1, 11, payload)
    got = decoded["responses"][0]["partitions"]
    assert bytes(got[0]["records"]) == b"r" * 5000 and bytes(got[1]["records"]) == b"ab"
    assert got[0]["last_stable_offset"] == -1 and got[0]["aborted_transactions"] is None


def test_encode_request_rejects_file_ranges():
    body = {"topic_data": [{"name": "t", "partition_data": [{"records": FileRange(3)}]}]}
    with pytest.raises(proto.EncodeError):
        proto.encode_request(0, 3, 1, "c", body)


# -- primitives ---------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, -1, 63, -64, 64, 2**31 - 1, -(2**31), 300, -300])
def test_varint_round_trip(n):
    out = []
    p.write_varint(out, n)
    assert p.read_varint(b"".join(out), 0) == (n, len(b"".join(out)))


@pytest.mark.parametrize("n", [0, -1, 2**63 - 1, -(2**63), 2**40])
def test_varlong_round_trip(n):
    out = []
    p.write_varlong(out, n)
    raw = b"".join(out)
    assert p.read_varlong(raw, 0) == (n, len(raw))


def test_known_varint_encodings():
    # Values from Kafka's ByteUtils tests / protobuf docs.
    assert p.encode_uvarint(300) == b"\xac\x02"
    out = []
    p.write_varint(out, -1)
    assert out == [b"\x01"]


def test_tagged_fields_read_and_skip():
    out = []
    p.write_tagged_fields(out, {5: b"xyz", 1: b""})
    raw = b"".join(out) + b"rest"
    tags, pos = p.read_tagged_fields(raw, 0)
    assert {k: bytes(v) for k, v in tags.items()} == {1: b"", 5: b"xyz"}
    assert raw[pos:] == b"rest" and p.skip_tagged_fields(raw, 0) == pos
    assert raw.startswith(b"\x02\x01\x00\x05\x03xyz")  # ascending tag order


@pytest.mark.parametrize(
    "reader,raw",
    [
        (p.read_int32, b"\x00\x00\x01"),
        (p.read_string, b"\x00\x05abc"),
        (p.read_string, b"\xff\xff"),
        (p.read_nullable_string, b"\xff\xfe"),
        (p.read_compact_string, b"\x00"),
        (p.read_bytes, b"\xff\xff\xff\xff"),
        (p.read_compact_nullable_bytes, b"\x05ab"),
        (p.read_records, b"\x00\x00\x00\x09abc"),
        (p.read_uuid, b"\x00" * 15),
        (p.read_uvarint, b"\x80\x80"),
    ],
)
def test_primitive_readers_raise_decode_error(reader, raw):
    with pytest.raises(DecodeError):
        reader(memoryview(raw), 0)


def test_compact_and_nullable_round_trips():
    cases = [
        (p.write_compact_string, p.read_compact_string, "héllo"),
        (p.write_compact_nullable_string, p.read_compact_nullable_string, None),
        (p.write_nullable_string, p.read_nullable_string, None),
        (p.write_compact_bytes, p.read_compact_bytes, b"\x00\x01"),
        (p.write_nullable_bytes, p.read_nullable_bytes, None),
        (p.write_uint32, p.read_uint32, 2**32 - 1),
        (p.write_float64, p.read_float64, -2.5),
    ]
    for write, read, value in cases:
        out = []
        write(out, value)
        raw = b"".join(out)
        assert read(memoryview(raw), 0) == (value, len(raw))


# -- aiokafka's hand-written structs, a second independent implementation -------------


def test_aiokafka_metadata_v5_request_decodes_with_ours():
    body = MetadataRequest_v5(topics=["a", "b"], allow_auto_topic_creation=False).encode()
    frame = b"\x00\x03\x00\x05\x00\x00\x00\x01\x00\x01c" + body
    decoded = proto.decode_request(proto.parse_request_header(frame), frame)
    assert [t["name"] for t in decoded["topics"]] == ["a", "b"]
    assert decoded["allow_auto_topic_creation"] is False


def test_aiokafka_produce_v7_and_join_group_v5_requests_decode_with_ours():
    body = ProduceRequest_v7(None, -1, 1500, [("t", [(2, b"batch-bytes")])]).encode()
    frame = b"\x00\x00\x00\x07\x00\x00\x00\x01\xff\xff" + body
    decoded = proto.decode_request(proto.parse_request_header(frame), frame)
    part = decoded["topic_data"][0]["partition_data"][0]
    assert (decoded["acks"], part["index"], bytes(part["records"])) == (-1, 2, b"batch-bytes")
    body = JoinGroupRequest_v5("g", 10000, 300000, "", "inst", "consumer", [("rr", b"m")]).encode()
    frame = b"\x00\x0b\x00\x05\x00\x00\x00\x01\xff\xff" + body
    decoded = proto.decode_request(proto.parse_request_header(frame), frame)
    assert decoded["group_instance_id"] == "inst"
    assert decoded["protocols"] == [{"name": "rr", "metadata": b"m"}]


def test_our_responses_decode_with_aiokafka():
    brokers = [{"node_id": 1, "host": "h", "port": 9092, "rack": None}]
    partition = {"partition_index": 0, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]}
    body = {
        "brokers": brokers,
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [{"name": "t", "partitions": [partition]}],
    }
    payload = b"".join(proto.encode_response(3, 5, 1, body))
    decoded = MetadataResponse_v5.decode(payload[4:])
    assert decoded.cluster_id == "c" and decoded.controller_id == 1
    assert decoded.topics[0][1] == "t" and decoded.topics[0][3][0][4] == [1]

    fetched = {
        "partition_index": 3,
        "high_watermark": 5,
        "last_stable_offset": 5,
        "log_start_offset": 0,
        "aborted_transactions": [],
        "records": b"xyz",
    }
    body = {"responses": [{"topic": "t", "partitions": [fetched]}]}
    payload = b"".join(proto.encode_response(1, 11, 1, body))
    decoded = FetchResponse_v11.decode(payload[4:])
    (topic, partitions) = decoded.topics[0]
    assert topic == "t" and partitions[0][0] == 3 and partitions[0][-1] == b"xyz"

    offsets = {
        "name": "t",
        "partitions": [
            {"partition_index": 0, "committed_offset": 42, "metadata": "", "error_code": 0}
        ],
    }
    payload = b"".join(proto.encode_response(9, 3, 1, {"topics": [offsets]}))
    decoded = OffsetFetchResponse_v3.decode(payload[4:])
    assert decoded.topics[0][1][0][1] == 42
