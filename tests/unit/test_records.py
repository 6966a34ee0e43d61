"""The record batch codec, checked against itself and against kafka-python."""

import struct

import pytest
import snappy
from kafka.record import util as kp_util
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from pluglog.errors import CorruptRecordError, InvalidRecordError
from pluglog.protocol import codecs
from pluglog.protocol import records as rec
from pluglog.protocol.records import Record, build_batch, iter_batches, parse_batch
from pluglog.storage import compaction
from pluglog.storage import records as hdr

CODECS = [0, 1, 2, 3, 4]

VARINT_CASES = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (-64, b"\x7f"),
    (64, b"\x80\x01"),
    (300, b"\xd8\x04"),
    (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
    (-(2**31), b"\xff\xff\xff\xff\x0f"),
]


@pytest.mark.parametrize(("value", "encoded"), VARINT_CASES)
def test_varint_known_encodings(value, encoded):
    assert rec.encode_varint(value) == encoded
    assert rec.decode_varint(b"\xaa" + encoded + b"\xbb", 1) == (value, 1 + len(encoded))


@pytest.mark.parametrize(
    "value", [0, 1, -1, 127, -128, 2**31, -(2**31) - 1, 2**62, 2**63 - 1, -(2**63)]
)
def test_varlong_round_trip_matches_kafka_python(value):
    encoded = rec.encode_varlong(value)
    assert rec.decode_varlong(encoded) == (value, len(encoded))
    # kafka-python's varint helper is the 64-bit zig-zag (Kafka's varlong).
    out = bytearray()
    kp_util.encode_varint(value, out.append)
    assert bytes(out) == encoded
    assert kp_util.decode_varint(encoded, 0) == (value, len(encoded))


def test_varint_limits():
    with pytest.raises(ValueError):
        rec.encode_varint(2**31)
    with pytest.raises(ValueError):
        rec.encode_varlong(2**63)
    assert len(rec.encode_varlong(-(2**63))) == 10
    with pytest.raises(InvalidRecordError):
        rec.decode_varint(b"\xff\xff\xff\xff\xff\x01")  # six bytes
    with pytest.raises(InvalidRecordError):
        rec.decode_varint(b"\xff\xff\xff\xff\x7f")  # 35 bits: overflows int32
    with pytest.raises(InvalidRecordError):
        rec.decode_varint(b"\x80\x80")  # truncated
    with pytest.raises(InvalidRecordError):
        rec.decode_varlong(b"\xff" * 10 + b"\x01")


def sample_records():
    return [
        Record(b"key-0", b"value-0", [("h1", b"x"), ("h2", None)], 1_700_000_000_000),
        Record(None, b"no key", [], 1_700_000_000_005),
        Record(b"tombstone", None, [], 1_699_999_999_990),
        Record(None, None, [("only-header", b"")], 1_700_000_000_001),
        Record(b"big", bytes(range(256)) * 40, [], 1_700_000_000_002),
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_build_parse_round_trip(codec):
    records = sample_records()
    data = build_batch(
        records,
        base_offset=100,
        compression=codec,
        producer_id=7,
        producer_epoch=3,
        base_sequence=42,
        partition_leader_epoch=5,
    )
    batch = parse_batch(data)
    assert batch.magic == 2
    assert batch.compression == codec
    assert (batch.base_offset, batch.last_offset) == (100, 104)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 3, 42)
    assert batch.partition_leader_epoch == 5
    assert batch.base_timestamp == 1_700_000_000_000
    assert batch.max_timestamp == 1_700_000_000_005
    assert batch.size == len(data)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch.records]
    want = [(100 + i, r.timestamp, r.key, r.value, list(r.headers)) for i, r in enumerate(records)]
    assert got == want
    # The storage header parser agrees with the codec on every field.
    header = hdr.parse_header(data)
    assert tuple(header) == tuple(batch[:13])
    assert hdr.validate_batches(data, 10**7) == [header]


def test_flags_and_explicit_deltas():
    data = build_batch(
        [Record(b"k", b"v", timestamp=10, offset_delta=0), Record(b"k", b"w", offset_delta=3)],
        is_transactional=True,
        producer_id=1,
        producer_epoch=0,
        base_sequence=0,
        timestamp_type=1,
    )
    batch = parse_batch(data)
    assert batch.is_transactional and not batch.is_control
    assert batch.timestamp_type == 1
    assert batch.last_offset_delta == 3
    assert [r.offset for r in batch.records] == [0, 3]
    assert [r.timestamp for r in batch.records] == [10, 10]  # default: base timestamp


def test_empty_batch_rejected():
    with pytest.raises(ValueError):
        build_batch([])


def test_crc_mismatch_detected():
    data = bytearray(build_batch([Record(b"k", b"value", timestamp=1)]))
    data[data.index(b"value") + 4] ^= 0x03  # e -> f
    with pytest.raises(CorruptRecordError):
        parse_batch(data)
    assert parse_batch(data, verify_crc=False).records[0].value == b"valuf"


def test_base_offset_and_epoch_outside_crc():
    data = bytearray(build_batch([Record(b"k", b"v", timestamp=1)]))
    struct.pack_into(">qii", data, 0, 999, struct.unpack_from(">i", data, 8)[0], 77)
    batch = parse_batch(data)
    assert (batch.base_offset, batch.partition_leader_epoch) == (999, 77)


def test_iter_batches_ignores_truncated_tail():
    first = build_batch([Record(b"a", b"1", timestamp=1)], base_offset=0)
    second = build_batch([Record(b"b", b"2", timestamp=2)], base_offset=1)
    batches = list(iter_batches(first + second + second[:30]))
    assert [b.base_offset for b in batches] == [0, 1]
    assert [r.value for r in rec.iter_records(first + second)] == [b"1", b"2"]


def test_snappy_raw_and_xerial_both_decode():
    payload = b"hello snappy " * 1000
    assert codecs.decompress(2, snappy.compress(payload)) == payload
    framed = codecs.compress(2, payload * 10)  # > one 32 KiB xerial block
    assert framed.startswith(b"\x82SNAPPY\x00")
    assert codecs.decompress(2, framed) == payload * 10


def test_unknown_codec_is_a_clear_error():
    with pytest.raises(codecs.UnsupportedCodecError):
        codecs.decompress(6, b"data")
    with pytest.raises(CorruptRecordError):
        codecs.decompress(1, b"not gzip")


def _lz4_blocks(frame):
    """The blocks of one LZ4 frame: ``(compressed, data)`` pairs."""
    flg = frame[4]
    position = 7 + (8 if flg & 0x08 else 0)  # magic, FLG, BD, [content size], HC
    while True:
        (size,) = struct.unpack_from("<I", frame, position)
        position += 4
        if size == 0:
            return
        stored = size & 0x7FFFFFFF
        yield not size & 0x80000000, frame[position : position + stored]
        position += stored + (4 if flg & 0x10 else 0)  # [block checksum]


def test_lz4_frames_have_independent_blocks_as_the_java_client_reads_them():
    """Kafka's Lz4BlockInputStream decompresses every block of a frame on its
    own (KIP-57); a frame whose blocks are linked does not read there once it
    spans more than one 64 KiB block."""
    payload = b"".join(b"record %d with some text; " % (i % 700) for i in range(20000))
    check_independent_lz4_blocks(codecs.compress(3, payload), payload)
    # the log cleaner's recompression writes the same frames
    check_independent_lz4_blocks(compaction.compress(3, payload), payload)


def check_independent_lz4_blocks(frame, payload):
    import lz4.block

    flg = frame[4]
    assert flg >> 6 == 1 and flg & 0x20  # version 01, blocks independent
    assert not flg & 0x04  # no content checksum, as the Java client writes
    blocks = list(_lz4_blocks(frame))
    assert len(blocks) > 1
    alone = [
        lz4.block.decompress(data, uncompressed_size=64 << 10) if compressed else data
        for compressed, data in blocks
    ]
    assert b"".join(alone) == payload
    assert codecs.decompress(3, frame) == payload


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_built_batch_parses_with_ours(codec):
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    # Values compress well: kafka-python keeps a batch uncompressed if that is smaller.
    builder.append(0, 1_700_000_000_000, b"k0", b"v0" * 500, [("h", b"hv")])
    builder.append(1, 1_700_000_000_003, None, b"v1" * 500, [])
    builder.append(2, 1_700_000_000_001, b"k2", None, [("n", None)])
    data = bytes(builder.build())
    batch = parse_batch(data)
    assert batch.compression == codec
    assert batch.max_timestamp == 1_700_000_000_003
    assert [(r.offset, r.key, r.value, r.headers) for r in batch.records] == [
        (0, b"k0", b"v0" * 500, [("h", b"hv")]),
        (1, None, b"v1" * 500, []),
        (2, b"k2", None, [("n", None)]),
    ]
    assert hdr.validate_batches(data, 10**7)[0].records_count == 3


@pytest.mark.parametrize("codec", CODECS)
def test_our_batch_parses_with_kafka_python(codec):
    records = sample_records()
    data = build_batch(records, base_offset=50, compression=codec, partition_leader_epoch=2)
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.validate_crc()
    assert batch.compression_type == codec
    assert (batch.base_offset, batch.last_offset_delta) == (50, 4)
    assert batch.max_timestamp == 1_700_000_000_005
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    want = [(50 + i, r.timestamp, r.key, r.value, list(r.headers)) for i, r in enumerate(records)]
    assert got == want
