"""Array counts are checked against the bytes a frame actually holds."""

import struct

import pytest

from pluglog import protocol as codec
from pluglog.protocol.errors import DecodeError


def _frame(api_key, version, body):
    header = struct.pack(">hhih", api_key, version, 7, 1) + b"c"
    return memoryview(header + body)


def _decode(frame):
    return codec.decode_request(codec.parse_request_header(frame), frame)


def test_topic_count_needs_two_bytes_per_name():
    # Metadata v1: 1,000 topics announced, 1,500 bytes follow. One byte per
    # element used to pass the count check; a name takes at least 2 bytes.
    frame = _frame(codec.METADATA, 1, struct.pack(">i", 1000) + b"\0" * 1500)
    with pytest.raises(DecodeError, match=r"array length 1000 \(elements of >= 2 bytes\)"):
        _decode(frame)


def test_struct_elements_count_all_their_fields():
    # ListOffsets v1: replica_id, topics[name, partitions[index int32, timestamp int64]].
    # Each partition entry is 12 bytes: 100 of them cannot fit in 600 bytes.
    body = struct.pack(">ii", -1, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 100)
    frame = _frame(codec.LIST_OFFSETS, 1, body + b"\0" * 600)
    with pytest.raises(DecodeError, match=r"elements of >= 12 bytes"):
        _decode(frame)


def test_flexible_arrays_use_compact_sizes():
    # IncrementalAlterConfigs v1 (flexible): a resource is at least type(1) +
    # name(1) + configs(1) + tags(1) = 4 bytes; 100 of them cannot fit in 300.
    header = struct.pack(">hhih", codec.INCREMENTAL_ALTER_CONFIGS, 1, 7, 1) + b"c" + b"\0"
    frame = memoryview(header + bytes([101]) + b"\0" * 300)
    with pytest.raises(DecodeError, match=r"array length 100 \(elements of >= 4 bytes\)"):
        _decode(frame)


def test_exact_fit_still_decodes():
    names = [b"a", b"b", b"c"]
    body = struct.pack(">i", 3) + b"".join(struct.pack(">h", 1) + n for n in names)
    request = _decode(_frame(codec.METADATA, 1, body))
    assert [t["name"] for t in request["topics"]] == ["a", "b", "c"]
