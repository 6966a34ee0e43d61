"""Round trips of every API/version, truncation at every cut point, garbage input.

``sample_body`` builds a body with a non-default value in every field present in a
version (it is also used by the third-party cross-check tests).
"""

import random
import uuid

import pytest

import pluglog.protocol as proto
from pluglog.protocol.apis import APIS
from pluglog.protocol.errors import DecodeError

_INTS = {
    "int8": 3,
    "int16": 300,
    "int32": 70000,
    "int64": 2**40,
    "uint16": 40000,
    "uint32": 3_000_000_000,
}


def _sample_value(field, version, seed):
    t = field.type
    if field.is_struct_array:
        return [sample_struct(t, version, seed * 7 + 1), sample_struct(t, version, seed * 7 + 2)]
    if field.is_struct:
        return sample_struct(t.fields, version, seed * 7 + 3)
    if field.is_primitive_array:
        inner = t[2:]
        if inner == "string":
            return [f"a{seed}", f"b{seed}-é"]
        # Seeds grow with nesting depth (ConsumerGroupDescribe nests four
        # levels); keep the values inside their type.
        return [_INTS[inner] + seed % 1000, _INTS[inner] + seed % 1000 + 1]
    if t in _INTS:
        return _INTS[t] + seed % 100
    if t == "float64":
        return 1.5 + seed
    if t == "bool":
        return not field.default(version)
    if t == "string":
        return f"{field.name}-{seed}-é"
    if t == "bytes":
        return field.name.encode() + bytes([seed % 256, 0, 255])
    if t == "records":
        return b"\x00\x01records" + bytes([seed % 256]) * 40
    if t == "uuid":
        return uuid.UUID(int=seed + 12345)
    raise AssertionError(t)


def sample_struct(fields, version, seed=1):
    """A dict with a non-default value for every field present in ``version``."""
    return {
        f.name: _sample_value(f, version, seed * 31 + i)
        for i, f in enumerate(fields)
        if f.present(version)
    }


def expected_struct(fields, version, sample):
    """What decoding ``sample`` must give: absent fields carry their defaults."""
    out = {}
    for f in fields:
        if not f.present(version):
            out[f.name] = f.default(version)
            continue
        value = sample[f.name]
        if f.is_struct_array and value is not None:
            value = [expected_struct(f.type, version, item) for item in value]
        elif f.is_struct:
            value = expected_struct(f.type.fields, version, value)
        out[f.name] = value
    return out


def normalize(value):
    """memoryview -> bytes, recursively, so decoded dicts compare with samples."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


def all_versions():
    for key, api in sorted(APIS.items()):
        lo, hi = api.versions
        for version in range(lo, hi + 1):
            yield pytest.param(key, version, id=f"{api.name}-v{version}")


def request_frame(key, version, body, correlation_id=42, client_id="client-é"):
    return proto.encode_request(key, version, correlation_id, client_id, body)


@pytest.mark.parametrize("key,version", list(all_versions()))
def test_request_round_trip(key, version):
    api = APIS[key]
    body = sample_struct(api.request, version)
    frame = request_frame(key, version, body)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    payload = memoryview(frame)[4:]
    header = proto.parse_request_header(payload)
    assert header[:4] == (key, version, 42, "client-é")
    decoded = proto.decode_request(header, payload)
    assert normalize(decoded) == expected_struct(api.request, version, body)


@pytest.mark.parametrize("key,version", list(all_versions()))
def test_response_round_trip(key, version):
    api = APIS[key]
    body = sample_struct(api.response, version)
    if key == 18:
        body["error_code"] = 0  # a non-zero code means "decode as v0" for ApiVersions
    parts = proto.encode_response(key, version, 77, body)
    payload = b"".join(parts)
    assert proto.frame_size(parts) == len(payload)
    correlation_id, decoded = proto.decode_response(key, version, payload)
    assert correlation_id == 77
    assert normalize(decoded) == expected_struct(api.response, version, body)


@pytest.mark.parametrize("key,version", list(all_versions()))
def test_empty_bodies_decode_to_defaults(key, version):
    api = APIS[key]
    payload = b"".join(proto.encode_response(key, version, 1, {}))
    _, decoded = proto.decode_response(key, version, payload)
    assert decoded == {f.name: f.default(version) for f in api.response}


def test_sample_values_differ_from_defaults():
    # Guards the round-trip tests: a sample equal to the default proves nothing.
    for api in APIS.values():
        lo, hi = api.versions
        for version in range(lo, hi + 1):
            for fields in (api.request, api.response):
                sample = sample_struct(fields, version)
                for f in fields:
                    if f.present(version):
                        assert sample[f.name] != f.default(version), (api.name, f.name)


CUT_CASES = [(0, 3), (0, 8), (1, 11), (3, 8), (18, 3), (11, 5), (8, 7), (15, 4), (60, 0)]


@pytest.mark.parametrize("key,version", CUT_CASES)
def test_every_truncated_request_prefix_raises_decode_error(key, version):
    body = sample_struct(APIS[key].request, version)
    payload = request_frame(key, version, body)[4:]
    for cut in range(len(payload)):
        prefix = memoryview(payload[:cut])
        with pytest.raises(DecodeError):
            proto.decode_request(proto.parse_request_header(prefix), prefix)


@pytest.mark.parametrize("key,version", CUT_CASES)
def test_every_truncated_response_prefix_raises_decode_error(key, version):
    body = sample_struct(APIS[key].response, version)
    if key == 18:
        body["error_code"] = 0
    payload = b"".join(proto.encode_response(key, version, 5, body))
    for cut in range(len(payload)):
        with pytest.raises(DecodeError):
            proto.decode_response(key, version, payload[:cut])


def test_trailing_bytes_are_rejected():
    payload = request_frame(12, 3, sample_struct(APIS[12].request, 3))[4:] + b"\x00"
    with pytest.raises(DecodeError, match="trailing"):
        proto.decode_request(proto.parse_request_header(payload), payload)


@pytest.mark.parametrize("key,version", [(0, 8), (1, 11), (3, 8), (18, 3), (19, 4), (44, 1)])
def test_garbage_raises_only_decode_error(key, version):
    rng = random.Random(key * 100 + version)
    good = request_frame(key, version, sample_struct(APIS[key].request, version))[4:]
    header = proto.parse_request_header(good)
    for _ in range(400):
        body = bytearray(good)
        # Corrupt a few bytes after the header, or replace the body with noise.
        if rng.random() < 0.5:
            for _ in range(rng.randint(1, 4)):
                body[rng.randrange(header.body_offset, len(body))] = rng.randrange(256)
        else:
            noise = rng.randbytes(rng.randint(0, 60))
            body = bytearray(good[: header.body_offset]) + noise
        try:
            proto.decode_request(header, memoryview(bytes(body)))
        except DecodeError:
            pass
        try:
            proto.decode_response(key, version, bytes(body))
        except DecodeError:
            pass


def test_huge_array_count_is_rejected_quickly():
    # Produce v3 body: null transactional id, acks, timeout, then a 2**31-1 topic count.
    header_bytes = b"\x00\x00\x00\x03\x00\x00\x00\x01\xff\xff"
    payload = header_bytes + b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x03\xe8" + b"\x7f\xff\xff\xff"
    header = proto.parse_request_header(payload)
    with pytest.raises(DecodeError, match="array length"):
        proto.decode_request(header, payload)


def test_overlong_varint_is_rejected():
    # Flexible ApiVersions v3 request whose first compact string length never ends.
    payload = b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff\x00" + b"\xff" * 12
    header = proto.parse_request_header(payload)
    with pytest.raises(DecodeError, match="varint"):
        proto.decode_request(header, payload)


def test_invalid_utf8_is_decode_error():
    body = {"group_id": "g", "generation_id": 1, "member_id": "m"}
    payload = bytearray(request_frame(12, 0, body)[4:])
    header = proto.parse_request_header(payload)
    payload[header.body_offset + 2] = 0xFF  # the single character of group_id
    with pytest.raises(DecodeError, match="UTF-8"):
        proto.decode_request(header, memoryview(bytes(payload)))


def test_encode_rejects_null_in_non_nullable_and_out_of_range():
    with pytest.raises(proto.EncodeError):
        proto.encode_response(12, 0, 1, {"error_code": 70000})
    with pytest.raises(proto.EncodeError):
        proto.encode_response(14, 0, 1, {"assignment": None})
    with pytest.raises(proto.EncodeError):
        proto.encode_request(13, 0, 1, None, {"group_id": None})
    with pytest.raises(proto.EncodeError):
        proto.encode_response(3, 0, 1, {"brokers": None})
    with pytest.raises(proto.EncodeError):
        proto.encode_response(3, 0, 1, {"brokers": ["not a dict"]})
