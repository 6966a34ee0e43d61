"""The straight-line Fetch response encoder is a drop-in for the generic one:
the same parts (bytes runs and file ranges) for every body, or the generic
encoder's own answer (its bytes, or its EncodeError) where it steps aside."""

import random
import uuid
from types import SimpleNamespace

import pytest
from twisted.internet.task import Clock

from pluglog import protocol as codec
from pluglog.errors import NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION
from pluglog.protocol.apis import request_codec, response_codec
from pluglog.protocol.fetchpath import (
    FETCH_VERSIONS,
    decode_fetch_request,
    encode_fetch_response,
)
from pluglog.protocol.headers import write_response_header
from pluglog.protocol.records import Record, build_batch
from pluglog.server.handlers.common import RequestContext
from pluglog.server.handlers.fetch import handle_fetch
from pluglog.storage.results import FileRange
from tests.unit.test_group_coordinator import make_broker

pytestmark = pytest.mark.unit

VERSIONS = list(FETCH_VERSIONS)


def _generic(version, body):
    _, encode = response_codec(1, version)
    out = []
    write_response_header(out, 1, 7, version >= 12)
    encode(body, out)
    return codec._coalesce(out)


def _outcome(encode):
    try:
        parts = encode()
    except codec.EncodeError as exc:
        return ("EncodeError", str(exc))
    # File ranges are kept unread, in place: the same object in both.
    return [bytes(p) if isinstance(p, bytes | bytearray) else ("range", id(p)) for p in parts]


def _assert_same(version, body):
    fast = _outcome(lambda: codec.encode_response(1, version, 7, body))
    assert fast == _outcome(lambda: _generic(version, body))


def _random_records(rng):
    kind = rng.random()
    if kind < 0.2:
        return None
    if kind < 0.4:
        return b""
    if kind < 0.6:
        return FileRange(lambda: 0, rng.randint(0, 1000), rng.randint(1, 300))
    data = rng.randbytes(rng.randint(1, 200))
    return memoryview(data) if kind < 0.8 else data


def _random_partition(rng):
    part = {
        "partition_index": rng.randint(-1, 2**31 - 1),
        "error_code": rng.choice([0, 0, 0, 1, 3, 6, 74]),
        "high_watermark": rng.randint(-1, 2**40),
        "last_stable_offset": rng.randint(-1, 2**40),
        "log_start_offset": rng.randint(-1, 2**40),
        "aborted_transactions": rng.choice(
            [(), [], None, [{"producer_id": rng.randint(0, 2**40), "first_offset": 5}] * 3]
        ),
        "preferred_read_replica": rng.choice([-1, -1, 2]),
        "records": _random_records(rng),
    }
    odd = rng.random()
    if odd < 0.05:
        part["diverging_epoch"] = {"epoch": 3, "end_offset": 10}
    elif odd < 0.1:
        part["current_leader"] = {"leader_id": 2, "leader_epoch": 4}
    elif odd < 0.13:
        del part[rng.choice(sorted(part))]  # the generic encoder's default
    elif odd < 0.15:
        part["high_watermark"] = 2**70  # out of range: EncodeError
    elif odd < 0.17:
        part["records"] = "not bytes"
    return part


def _random_body(rng):
    topics = []
    for _ in range(rng.randint(0, 3)):
        topics.append(
            {
                "topic": rng.choice(["t", "tópico-ü", "x" * rng.randint(1, 300)]),
                "topic_id": rng.choice([uuid.UUID(int=rng.getrandbits(128)), uuid.UUID(int=0)]),
                "partitions": [_random_partition(rng) for _ in range(rng.randint(0, 4))],
            }
        )
    body = {
        "throttle_time_ms": rng.choice([0, 100]),
        "error_code": rng.choice([0, 0, 70]),
        "session_id": rng.choice([0, 12345]),
        "responses": topics,
    }
    if rng.random() < 0.3:
        body["node_endpoints"] = rng.choice(
            [[], [{"node_id": 1, "host": "h", "port": 9092, "rack": None}]]
        )
    return body


@pytest.mark.parametrize("version", VERSIONS)
def test_random_bodies_encode_as_the_generic_encoder_does(version):
    rng = random.Random(version)
    for _ in range(300):
        _assert_same(version, _random_body(rng))


@pytest.mark.parametrize("version", VERSIONS)
def test_bodies_that_are_not_dicts_or_lack_fields_get_the_generic_answer(version):
    for body in (
        {"responses": []},
        {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": None},
        {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [7]},
        {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": 5}]},
    ):
        _assert_same(version, body)


def _fetch(broker, version, committed, offsets, topic_id):
    wants = [
        {
            "partition": p,
            "current_leader_epoch": -1,
            "fetch_offset": offset,
            "last_fetched_epoch": -1,
            "log_start_offset": -1,
            "partition_max_bytes": 1 << 20,
        }
        for p, offset in offsets
    ]
    request = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 1 if committed else 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": "t", "topic_id": topic_id, "partitions": wants}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    frame = memoryview(codec.encode_request(1, version, 7, "c", request))[4:]
    header = codec.parse_request_header(frame)
    ctx = RequestContext(broker, header, "test", SimpleNamespace(listener="PLAINTEXT"))
    return handle_fetch(ctx, codec.decode_request(header, frame))


@pytest.mark.parametrize("storage", ["memory", "segments"])
def test_the_handlers_answers_encode_as_the_generic_encoder_does(tmp_path, storage):
    """What librdkafka, kafka-python and aiokafka meet (v4-v17, both
    isolation levels): records, empty partitions, an offset out of range,
    an unknown partition, a partition led elsewhere."""
    clock = Clock()
    broker = make_broker(tmp_path, clock, storage=storage)
    broker.create_topic("t", 4)
    clock.advance(0)
    now = broker.now_ms()
    for p in (0, 1):
        for i in range(3):
            broker.partition("t", p).append(build_batch([Record(value=b"v%d" % i)]), now)
    broker.partition("t", 3).become_follower(9, 1, (0, 9), (0, 9))
    topic_id = uuid.UUID(broker.topic_ids.id_of("t"))
    offsets = [(0, 0), (1, 2), (2, 0), (0, 99), (3, 0), (7, 0)]
    seen = set()
    for version in VERSIONS:
        for committed in (False, True):
            body = _fetch(broker, version, committed, offsets, topic_id)
            codes = {p["error_code"] for t in body["responses"] for p in t["partitions"]}
            seen |= codes
            _assert_same(version, body)
            # Without the partition led elsewhere (whose v12+ answer carries
            # the tagged current leader) the fast encoder writes it all.
            plain = _fetch(broker, version, committed, offsets[:4], topic_id)
            encode_fetch_response(version, plain, [])
            _assert_same(version, plain)
    assert {0, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER} <= seen


def _random_request(rng, version):
    topics = []
    for _ in range(rng.randint(0, 3)):
        partitions = [
            {
                "partition": rng.randint(-1, 2**31 - 1),
                "current_leader_epoch": rng.randint(-1, 9),
                "fetch_offset": rng.randint(-1, 2**62),
                "last_fetched_epoch": rng.randint(-1, 9),
                "log_start_offset": rng.randint(-1, 2**40),
                "partition_max_bytes": rng.randint(0, 2**31 - 1),
            }
            for _ in range(rng.choice([0, 1, 3, 200]))
        ]
        topics.append(
            {
                "topic": rng.choice(["t", "tópico-ü", "x" * rng.randint(1, 300)]),
                "topic_id": uuid.UUID(int=rng.getrandbits(128)),
                "partitions": partitions,
            }
        )
    body = {
        "replica_id": rng.choice([-1, 1]),
        "max_wait_ms": rng.randint(0, 1000),
        "min_bytes": rng.randint(0, 10),
        "max_bytes": rng.randint(0, 2**31 - 1),
        "isolation_level": rng.choice([0, 1]),
        "session_id": rng.choice([0, 77]),
        "session_epoch": rng.choice([-1, 0, 5]),
        "topics": topics,
        "rack_id": rng.choice(["", "rack-ü"]),
    }
    odd = rng.random()
    if odd < 0.15:  # a session's forgotten topics
        body["forgotten_topics_data"] = [
            {"topic": "f", "topic_id": uuid.UUID(int=9), "partitions": [1, 2]}
        ]
    elif odd < 0.25 and version >= 12:
        body["cluster_id"] = "cluster"  # a tagged field
    elif odd < 0.35 and version >= 15:
        body["replica_state"] = {"replica_id": 2, "replica_epoch": 5}
    elif odd < 0.45 and version >= 17 and topics and topics[0]["partitions"]:
        topics[0]["partitions"][0]["replica_directory_id"] = uuid.UUID(int=3)
    return body


def _request_outcome(header, view):
    try:
        return codec.decode_request(header, view)
    except codec.DecodeError as exc:
        return ("DecodeError", str(exc))


@pytest.mark.parametrize("version", VERSIONS)
def test_requests_decode_as_the_generic_decoder_does(version):
    rng = random.Random(1000 + version)
    decode, _ = request_codec(1, version)
    fast_used = 0
    for _ in range(150):
        payload = codec.encode_request(1, version, 7, "c", _random_request(rng, version))[4:]
        header = codec.parse_request_header(payload)
        view = memoryview(payload)
        expected = codec._decode_body(decode, view, header.body_offset, "Fetch req")
        assert codec.decode_request(header, view) == expected
        fast_used += decode_fetch_request(view, header.body_offset, version) is not None
        # Truncated, garbled and padded: the generic answer, error or body.
        variants = [payload[: rng.randint(header.body_offset, len(payload))], payload + b"\0"]
        for _ in range(3):
            garbled = bytearray(payload)
            at = rng.randint(header.body_offset, len(garbled) - 1)
            garbled[at] = rng.choice([0xFF, 0x80, 0x7F, 0x00, 0x01])
            variants.append(bytes(garbled))
        for variant in variants:
            view = memoryview(variant)
            try:
                expected = codec._decode_body(decode, view, header.body_offset, "Fetch req")
            except codec.DecodeError as exc:
                expected = ("DecodeError", str(exc))
            assert _request_outcome(header, view) == expected
    assert fast_used > 50  # the fast decoder took the plain requests
