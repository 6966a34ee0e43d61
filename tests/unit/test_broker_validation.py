"""pluglog.broker.validation: the record walk, bounded decompression, Partition wiring."""

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pluglog.broker import validation
from pluglog.broker.validation import (
    decompress_bounded,
    validate_records,
    walk_records,
)
from pluglog.errors import InvalidRecordError
from pluglog.protocol.codecs import CODEC_NAMES, compress
from pluglog.protocol.records import Record, build_batch, encode_varint
from pluglog.storage.crc import crc32c

_HEADER = struct.Struct(">qiibIhiqqqhii")
MAX = 1 << 20


def with_crc(batch):
    batch = bytearray(batch)
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
    return bytes(batch)


def records_strategy():
    field = st.one_of(st.none(), st.binary(max_size=40))
    header = st.tuples(st.text(max_size=5), field)
    return st.lists(
        st.builds(
            Record,
            key=field,
            value=field,
            headers=st.lists(header, max_size=3),
            timestamp=st.one_of(st.none(), st.integers(1_600_000_000_000, 1_800_000_000_000)),
            offset_delta=st.none(),
            offset=st.none(),
        ),
        min_size=1,
        max_size=20,
    )


@pytest.mark.parametrize("codec", sorted(CODEC_NAMES))
def test_valid_batches_pass_for_every_codec(codec):
    records = [Record(b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(30)]
    assert validate_records(build_batch(records, compression=codec), MAX) == 30


@settings(max_examples=150, deadline=None, database=None)
@given(records_strategy(), st.sampled_from(sorted(CODEC_NAMES)))
def test_any_client_built_batch_passes(records, codec):
    batch = build_batch(records, compression=codec, base_timestamp=1_700_000_000_000)
    assert validate_records(batch, MAX) == len(records)


@settings(max_examples=400, deadline=None, database=None)
@given(records_strategy(), st.data())
def test_c_walk_and_python_walk_agree_on_mutated_records(records, data):
    """Any mutation of the record bytes: the C walk refuses exactly when the
    reference Python walker does (or the offsets go wrong)."""
    batch = bytearray(build_batch(records))
    body = batch[61:]
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(body) - 1))
        body[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(body)))
        body = body[:cut] + data.draw(st.binary(max_size=8))
    struct.pack_into(">i", batch, 8, 49 + len(body))
    candidate = with_crc(bytes(batch[:61]) + bytes(body))
    try:
        offsets = walk_records(memoryview(body), len(records))
        python_ok = offsets == list(range(len(records)))
    except InvalidRecordError:
        python_ok = False
    assert _accepts(candidate) == python_ok  # pluglog._recordwalk
    saved = validation._c_walk
    validation._c_walk = None
    try:
        assert _accepts(candidate) == python_ok  # the fallback path, offsets checked
    finally:
        validation._c_walk = saved


def _accepts(batch):
    try:
        validate_records(batch, MAX)
        return True
    except InvalidRecordError:
        return False


def _kafka_python_builder():
    from kafka.record.default_records import DefaultRecordBatchBuilder

    return DefaultRecordBatchBuilder


def _aiokafka_builder():
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    return DefaultRecordBatchBuilder


@pytest.mark.parametrize("count", [3, 3000])  # 3000 records: several lz4 blocks and snappy chunks
@pytest.mark.parametrize("codec", [1, 2, 3, 4])
@pytest.mark.parametrize("client", [_kafka_python_builder, _aiokafka_builder])
def test_batches_compressed_by_client_libraries_pass(client, codec, count):
    """Batches as kafka-python and aiokafka build them, with their own codec
    code (xerial snappy; LZ4 frames; zstd frames), walk cleanly. librdkafka's
    (raw snappy) go through the broker in tests/integration/test_clients.py."""
    builder = client()(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 22,
    )
    for i in range(count):
        builder.append(
            i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v%d " % i * 8, headers=[]
        )
    batch = bytes(builder.build())
    assert struct.unpack_from(">h", batch, 21)[0] & 0x07 == codec  # kept compressed
    assert validate_records(batch, MAX) == count


def test_the_c_walk_is_built_and_used():
    # setup.py builds it (pip install -e . / build_ext --inplace); without it
    # the broker is correct but slower, which the suite should notice.
    assert validation._c_walk is not None, "run: python3 setup.py build_ext --inplace"


def test_fallback_walker(monkeypatch):
    monkeypatch.setattr(validation, "_c_walk", None)
    assert validate_records(build_batch([Record(b"k", b"v")] * 5, compression="lz4"), MAX) == 5
    bad = bytearray(build_batch([Record(b"k", b"v")] * 5))
    bad[61] = 0x7F  # first record length -64
    with pytest.raises(InvalidRecordError):
        validate_records(with_crc(bad), MAX)


def test_non_utf8_header_key_is_accepted_as_kafka_does():
    batch = build_batch([Record(b"k", b"v", [(b"\xff\xfe", b"x")])])
    assert validate_records(batch, MAX) == 1


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_is_bounded(codec):
    payload = compress(codec, b"\0" * 300_000)
    assert len(decompress_bounded(codec, payload, 300_000)) == 300_000
    with pytest.raises(InvalidRecordError, match="decompresses to more than"):
        decompress_bounded(codec, payload, 299_999)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_undecompressable_payload_is_invalid(codec):
    with pytest.raises(InvalidRecordError):
        decompress_bounded(codec, b"definitely not compressed" * 3, MAX)


def test_bomb_limit_follows_max_message_bytes():
    assert validation._limit(1 << 20) == 64 << 20
    assert validation._limit(1000) == validation.MIN_DECOMPRESSED_LIMIT


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda b: b[:21] + b"\x00\x07" + b[23:], "unknown compression codec 7"),
        (lambda b: b[:21] + b"\x00\x40" + b[23:], "bits clients may not use"),
        (lambda b: b[:57] + struct.pack(">i", -1) + b[61:], "negative record count"),
        (lambda b: b[:61] + encode_varint(-3) + b[62:], "record"),
    ],
)
def test_structural_refusals_name_the_fault(mutate, match):
    batch = build_batch([Record(b"k", b"v" * 10)] * 3)
    with pytest.raises(InvalidRecordError, match=match):
        validate_records(with_crc(mutate(batch)), MAX)


def test_random_bytes_never_escape_as_other_exceptions():
    rng = random.Random(7)
    good = build_batch([Record(b"k", b"v" * 30)] * 4, compression="gzip")
    for _ in range(2000):
        batch = bytearray(good)
        for _ in range(rng.randint(1, 6)):
            batch[rng.randrange(21, len(batch))] = rng.randrange(256)
        try:
            validate_records(bytes(batch), MAX)
        except InvalidRecordError:
            pass
