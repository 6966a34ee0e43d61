"""The Produce hot-path codec is a drop-in for the generic one: same dicts, same bytes,
same errors (malformed bodies fall through to the generic decoder)."""

import random

import pytest

from pluglog import protocol as codec
from pluglog.protocol.apis import request_codec, response_codec
from pluglog.protocol.hotpath import (
    PRODUCE_VERSIONS,
    decode_produce_request,
    encode_produce_response,
)
from pluglog.protocol.records import Record, build_batch

VERSIONS = list(PRODUCE_VERSIONS)


def _random_request(rng):
    topics = []
    for t in range(rng.randint(0, 3)):
        parts = []
        for _ in range(rng.randint(0, 3)):
            if rng.random() < 0.2:
                records = None
            else:
                values = [rng.randbytes(rng.randint(0, 50)) for _ in range(rng.randint(1, 4))]
                records = build_batch([Record(value=v) for v in values], base_timestamp=t)
            parts.append({"index": rng.randint(-5, 2**31 - 1), "records": records})
        name = rng.choice(["t", "tópico-ü", "x" * rng.randint(1, 300), "a.b_c"])
        topics.append({"name": name, "partition_data": parts})
    return {
        "transactional_id": rng.choice([None, "", "txn-1", "ß" * 10]),
        "acks": rng.choice([-1, 0, 1, 7]),
        "timeout_ms": rng.randint(-(2**31), 2**31 - 1),
        "topic_data": topics,
    }


def _generic_decode(version, payload, pos):
    decode, _ = request_codec(0, version)
    return decode(memoryview(payload), pos)


def _normalise(body):
    # memoryview slices compare by content only after conversion
    for topic in body["topic_data"]:
        for part in topic["partition_data"]:
            if part["records"] is not None:
                part["records"] = bytes(part["records"])
    return body


@pytest.mark.parametrize("version", VERSIONS)
def test_decode_matches_generic_on_random_requests(version):
    rng = random.Random(version)
    for _ in range(200):
        body = _random_request(rng)
        frame = codec.encode_request(0, version, 7, "client", body)
        payload = frame[4:]
        header = codec.parse_request_header(payload)
        fast = decode_produce_request(memoryview(payload), header.body_offset)
        assert fast is not None
        generic = _generic_decode(version, payload, header.body_offset)
        assert fast[1] == generic[1] == len(payload)
        assert _normalise(fast[0]) == _normalise(generic[0])
        # and through the public entry point
        assert _normalise(codec.decode_request(header, memoryview(payload))) == generic[0]


def test_records_are_zero_copy_slices_of_the_frame():
    batch = build_batch([Record(value=b"v" * 100)], base_timestamp=1)
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}],
    }
    payload = memoryview(codec.encode_request(0, 8, 1, "c", body)[4:])
    header = codec.parse_request_header(payload)
    decoded = codec.decode_request(header, payload)
    records = decoded["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(records, memoryview)
    assert records.obj is payload.obj
    assert bytes(records) == batch


@pytest.mark.parametrize("version", VERSIONS)
def test_truncated_and_garbled_bodies_raise_the_generic_error(version):
    rng = random.Random(100 + version)
    decode, _ = request_codec(0, version)
    for _ in range(60):
        payload = bytearray(codec.encode_request(0, version, 7, "c", _random_request(rng))[4:])
        header = codec.parse_request_header(bytes(payload))
        cuts = [rng.randint(header.body_offset, len(payload)) for _ in range(3)]
        variants = [bytes(payload[:cut]) for cut in cuts] + [bytes(payload) + b"\x00"]
        for _ in range(3):
            garbled = bytearray(payload)
            at = rng.randint(header.body_offset, len(garbled) - 1)
            garbled[at] = rng.choice([0xFF, 0x80, 0x7F, 0x00])
            variants.append(bytes(garbled))
        for variant in variants:
            view = memoryview(variant)
            try:
                expected = codec._decode_body(decode, view, header.body_offset, "Produce req")
            except codec.DecodeError as exc:
                with pytest.raises(codec.DecodeError) as info:
                    codec.decode_request(header, view)
                assert str(info.value) == str(exc)
                continue
            assert _normalise(codec.decode_request(header, view)) == _normalise(expected)


def _random_response(rng, version):
    responses = []
    for _ in range(rng.randint(0, 3)):
        parts = []
        for _ in range(rng.randint(0, 3)):
            errors = []
            if version >= 8:
                errors = [
                    {"batch_index": rng.randint(0, 9), "batch_index_error_message": msg}
                    for msg in rng.sample([None, "bad", "ünicode"], rng.randint(0, 2))
                ]
            parts.append(
                {
                    "index": rng.randint(0, 100),
                    "error_code": rng.choice([0, 2, 35, -1]),
                    "base_offset": rng.randint(-1, 2**62),
                    "log_append_time_ms": rng.randint(-1, 2**41),
                    "log_start_offset": rng.randint(-1, 2**40),
                    "record_errors": errors,
                    "error_message": rng.choice([None, "", "nope"]),
                }
            )
        responses.append({"name": rng.choice(["t", "tópico"]), "partition_responses": parts})
    return {"responses": responses, "throttle_time_ms": rng.randint(0, 1000)}


@pytest.mark.parametrize("version", VERSIONS)
def test_encode_matches_generic(version):
    rng = random.Random(200 + version)
    _, generic = response_codec(0, version)
    for _ in range(200):
        body = _random_response(rng, version)
        fast_out, generic_out = [], []
        encode_produce_response(version, body, fast_out)
        generic(body, generic_out)
        assert b"".join(fast_out) == b"".join(generic_out)
        parts = codec.encode_response(0, version, 99, body)
        assert parts == [b"".join([b"\x00\x00\x00\x63", *generic_out])]
        _, decoded = codec.decode_response(0, version, parts[0])
        assert decoded["throttle_time_ms"] == body["throttle_time_ms"]


def test_encode_bad_body_gets_the_generic_encode_error():
    body = {
        "responses": [{"name": 5, "partition_responses": []}],
        "throttle_time_ms": 0,
    }
    with pytest.raises(codec.EncodeError, match="expected str"):
        codec.encode_response(0, 8, 1, body)
