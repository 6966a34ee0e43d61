"""prepare_append: the one-buffer-one-batch fast path agrees with the general path."""

import pytest

from pluglog.errors import CorruptRecordError, InvalidRecordError, MessageTooLargeError
from pluglog.protocol.records import parse_batch
from pluglog.storage import records as storage_records
from pluglog.storage.records import prepare_append, validate_batches
from pluglog.storage.results import AppendInfo
from tests.unit.test_storage_segments import corrupt_fields, make_batch

MAX = 1 << 20


def summary(prepared):
    return (
        b"".join(prepared.pieces),
        prepared.batches,
        prepared.first_offset,
        prepared.last_offset,
        prepared.max_timestamp,
        prepared.offset_of_max_timestamp,
        prepared.size_bytes,
        prepared.records,
    )


@pytest.mark.parametrize(
    "batch",
    [
        make_batch(1, ts=5),
        make_batch(50, ts=1_700_000_000_000, value=b"x" * 200),
        corrupt_fields(make_batch(3, ts=7), max_timestamp=-1),
        corrupt_fields(make_batch(3, ts=7), max_timestamp=-5),
        corrupt_fields(make_batch(2), producer_id=9, producer_epoch=1, base_sequence=4),
    ],
)
def test_single_batch_fast_path_matches_general_path(batch):
    fast = prepare_append(batch, 100, 7, MAX)
    general = prepare_append([batch], 100, 7, MAX)  # a list always takes the loop
    assert summary(fast) == summary(general)
    assert len(fast.pieces) == 2 and len(fast.pieces[0]) == 16
    stored = b"".join(fast.pieces)
    assert stored[16:] == batch[16:]
    parsed = parse_batch(stored)  # CRC still valid: only bytes 0-15 changed
    assert (parsed.base_offset, parsed.partition_leader_epoch) == (100, 7)
    header = validate_batches(batch, MAX)[0]
    assert fast.last_offset == 100 + header.last_offset_delta
    assert fast.records == header.records_count
    if header.max_timestamp < 0:
        assert (fast.max_timestamp, fast.offset_of_max_timestamp) == (-1, -1)
    else:
        assert (fast.max_timestamp, fast.offset_of_max_timestamp) == (
            header.max_timestamp,
            fast.last_offset,
        )


def test_multi_batch_buffer_checks_each_crc_once(monkeypatch):
    calls = []
    real = storage_records.crc32c

    def counting(data, crc=0):
        calls.append(len(data))
        return real(data, crc)

    monkeypatch.setattr(storage_records, "crc32c", counting)
    buf = make_batch(2, ts=9) + make_batch(1, ts=7) + make_batch(3, ts=8)
    prepared = prepare_append(buf, 0, 0, MAX)
    assert len(calls) == 3
    assert [b[:3] for b in prepared.batches] == [
        (0, 1, len(make_batch(2, ts=9))),
        (2, 2, len(make_batch(1, ts=7))),
        (3, 5, len(make_batch(3, ts=8))),
    ]
    assert (prepared.max_timestamp, prepared.offset_of_max_timestamp) == (9, 1)
    assert prepared.size_bytes == len(buf)


def test_log_append_time_single_batch_is_restamped():
    batch = make_batch(2, ts=5)
    prepared = prepare_append(batch, 10, 0, MAX, log_append_time_ms=4242)
    parsed = parse_batch(b"".join(prepared.pieces))  # CRC recomputed
    assert (parsed.base_offset, parsed.max_timestamp, parsed.timestamp_type) == (10, 4242, 1)
    assert prepared.batches == [(10, 11, len(batch), 4242)]
    assert (prepared.max_timestamp, prepared.offset_of_max_timestamp) == (4242, 11)


@pytest.mark.parametrize(
    ("buf", "error", "message"),
    [
        (b"", InvalidRecordError, "no record batches"),
        (make_batch(1)[:40], InvalidRecordError, "40 trailing bytes"),
        (make_batch(1)[:-3], InvalidRecordError, "truncated"),
        (make_batch(1)[:-1] + b"\xff", CorruptRecordError, "CRC mismatch"),
        (corrupt_fields(make_batch(1), magic=1), InvalidRecordError, "magic 1"),
        (corrupt_fields(make_batch(1), batch_length=10), InvalidRecordError, "too small"),
        (corrupt_fields(make_batch(2), records_count=3), InvalidRecordError, "recordsCount"),
        (make_batch(1, value=b"x" * 300), MessageTooLargeError, "max.message.bytes 200"),
        (make_batch(1) + b"\x00" * 5, InvalidRecordError, "5 trailing bytes"),
    ],
)
def test_single_buffer_errors_match_the_list_path(buf, error, message):
    for form in (buf, [buf]):
        with pytest.raises(error, match=message):
            prepare_append(form, 0, 0, 200 if error is MessageTooLargeError else MAX)


def test_append_info_is_an_immutable_record():
    info = AppendInfo(1, 2, 3, 4, -1, 1, 100, 0)
    assert info.num_records == 0  # the default
    assert (info.first_offset, info.last_offset, info.max_timestamp) == (1, 2, 3)
    assert (info.offset_of_max_timestamp, info.log_append_time, info.num_batches) == (4, -1, 1)
    assert (info.size_bytes, info.log_start_offset) == (100, 0)
    assert info == AppendInfo(1, 2, 3, 4, -1, 1, 100, 0, 0)
    assert "first_offset=1" in repr(info)
    with pytest.raises(AttributeError):
        info.first_offset = 5
