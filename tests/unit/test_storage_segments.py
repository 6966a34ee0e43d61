"""Partition log behaviour, run against both the segment and the memory storage."""

import os
import struct

import pytest
from twisted.internet.task import Clock
from zope.interface.verify import verifyObject

from pluglog.config import TopicConfig
from pluglog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)
from pluglog.interfaces import IFileRange, ILogStorage, IPartitionLog
from pluglog.protocol.records import Record, build_batch, iter_batches, parse_batch
from pluglog.storage.manager import SegmentLogStorage
from pluglog.storage.memory import MemoryLogStorage
from pluglog.storage.records import BatchHeader

KINDS = ["segments", "memory"]


def make_batch(count=1, ts=1000, value=b"v" * 20, **kwargs):
    return build_batch([Record(b"k", value, [], ts) for _ in range(count)], **kwargs)


def data_of(result):
    records = result.records
    return records if isinstance(records, bytes) else records.read()


def read_offsets(log, start=None, max_bytes=1 << 30):
    """Every offset readable from ``start``, decoded with the codec."""
    offset = log.log_start_offset if start is None else start
    seen = []
    while offset < log.log_end_offset:
        result = log.read(offset, max_bytes)
        batches = list(iter_batches(data_of(result)))
        assert batches, f"empty read at {offset}"
        seen += [r.offset for b in batches for r in b.records if r.offset >= offset]
        offset = batches[-1].last_offset + 1
    return seen


def new_storage(kind, path, reactor=None, **kwargs):
    if kind == "segments":
        return SegmentLogStorage(str(path), reactor=reactor, **kwargs)
    return MemoryLogStorage(reactor=reactor)


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def storage(kind, tmp_path, clock):
    store = new_storage(kind, tmp_path / "data", clock)
    yield store
    store.close()


def open_log(storage, **overrides):
    return storage.open_log("events", 0, TopicConfig(**overrides))


def test_providers_verify(storage):
    assert verifyObject(ILogStorage, storage)
    assert verifyObject(IPartitionLog, open_log(storage))


def test_append_assigns_offsets_and_patches_header(storage):
    log = open_log(storage)
    first = log.append(make_batch(3, ts=5), now_ms=0, leader_epoch=4)
    second = log.append(make_batch(2, ts=9) + make_batch(1, ts=7), now_ms=0, leader_epoch=4)
    third = log.append([make_batch(1, ts=1), make_batch(1, ts=2)], now_ms=0)
    assert (first.first_offset, first.last_offset, first.num_batches) == (0, 2, 1)
    assert (second.first_offset, second.last_offset, second.num_batches) == (3, 5, 2)
    assert (second.max_timestamp, second.offset_of_max_timestamp) == (9, 4)
    assert second.log_append_time == -1
    assert (third.first_offset, third.last_offset) == (6, 7)
    assert second.size_bytes == len(make_batch(2, ts=9)) + len(make_batch(1, ts=7))
    assert log.log_end_offset == 8
    batches = list(iter_batches(data_of(log.read(0, 1 << 20))))  # CRCs verified
    assert [(b.base_offset, b.partition_leader_epoch) for b in batches] == [
        (0, 4),
        (3, 4),
        (5, 4),
        (6, 0),
        (7, 0),
    ]
    assert read_offsets(log) == list(range(8))
    assert log.size_bytes == sum(b.size for b in batches)


def test_log_append_time_restamps_with_valid_crc(storage):
    log = open_log(storage, message_timestamp_type="LogAppendTime")
    info = log.append(make_batch(2, ts=5), now_ms=123456)
    assert (info.log_append_time, info.max_timestamp) == (123456, 123456)
    batch = parse_batch(data_of(log.read(0, 1 << 20)))
    assert batch.timestamp_type == 1
    assert batch.max_timestamp == 123456


def corrupt_fields(data, **fields):
    """Rewrite header fields of a batch and fix its CRC (structural errors)."""
    from pluglog.storage.crc import crc32c

    header = BatchHeader._make(struct.unpack_from(">qiibIhiqqqhii", data))._replace(**fields)
    out = bytearray(data)
    struct.pack_into(">qiibIhiqqqhii", out, 0, *header)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]), CorruptRecordError),
        (lambda b: corrupt_fields(b, magic=1), InvalidRecordError),
        (lambda b: b[:40], InvalidRecordError),
        (lambda b: b[:-3], InvalidRecordError),
        (lambda b: corrupt_fields(b, last_offset_delta=5), InvalidRecordError),
        (lambda b: corrupt_fields(b, records_count=0), InvalidRecordError),
        (lambda b: corrupt_fields(b, batch_length=10), InvalidRecordError),
    ],
)
def test_bad_batches_rejected_and_nothing_written(storage, mutate, error):
    log = open_log(storage)
    log.append(make_batch(2), now_ms=0)
    size = log.size_bytes
    bad = mutate(make_batch(2))
    with pytest.raises(error):
        log.append(make_batch(1) + bad, now_ms=0)  # the good batch before it is not kept
    assert (log.log_end_offset, log.size_bytes) == (2, size)
    assert log.append(make_batch(1), now_ms=0).first_offset == 2


def test_empty_append_rejected(storage):
    log = open_log(storage)
    for empty in (b"", []):
        with pytest.raises(InvalidRecordError):
            log.append(empty, now_ms=0)
    assert log.log_end_offset == 0


def test_batch_over_max_message_bytes(storage):
    log = open_log(storage, max_message_bytes=200)
    with pytest.raises(MessageTooLargeError):
        log.append(make_batch(1, value=b"x" * 300), now_ms=0)
    assert log.append(make_batch(1, value=b"x" * 10), now_ms=0).first_offset == 0


def test_roll_on_segment_bytes(storage):
    batch = make_batch(5)
    log = open_log(storage, segment_bytes=len(batch) * 3)
    for _ in range(10):
        log.append(batch, now_ms=0)
    infos = log.segment_infos()
    assert [i.base_offset for i in infos] == [0, 15, 30, 45]
    assert [i.next_offset for i in infos] == [15, 30, 45, 50]
    assert [i.size_bytes for i in infos] == [len(batch) * 3] * 3 + [len(batch)]
    assert [i.active for i in infos] == [False, False, False, True]
    assert read_offsets(log) == list(range(50))


def test_roll_on_segment_ms(storage, clock):
    log = open_log(storage, segment_ms=1000)
    log.append(make_batch(1, ts=0), now_ms=0)
    log.append(make_batch(1, ts=1000), now_ms=1000)  # waited 1000: not more than segment.ms
    assert len(log.segment_infos()) == 1
    log.append(make_batch(1, ts=1001), now_ms=1001)
    infos = log.segment_infos()
    assert [(i.base_offset, i.created_ms) for i in infos] == [(0, 0), (2, 1001)]
    log.append(make_batch(1, ts=1500), now_ms=1500)
    assert len(log.segment_infos()) == 2


def test_explicit_roll_and_empty_active_is_not_rolled(storage):
    log = open_log(storage)
    log.roll(now_ms=0)
    assert len(log.segment_infos()) == 1
    log.append(make_batch(2), now_ms=0)
    log.roll(now_ms=5)
    log.roll(now_ms=6)
    assert [i.base_offset for i in log.segment_infos()] == [0, 2]
    assert log.append(make_batch(1), now_ms=7).first_offset == 2


@pytest.mark.parametrize("interval", [0, 100, 4096])
def test_read_from_every_offset_returns_containing_batch(storage, interval):
    log = open_log(storage, index_interval_bytes=interval, segment_bytes=5000)
    bounds = []
    for i in range(60):
        info = log.append(make_batch(1 + i % 4, ts=i), now_ms=0)
        bounds.append((info.first_offset, info.last_offset))
    for first, last in bounds:
        for offset in range(first, last + 1):
            result = log.read(offset, 1)  # min_one_batch: exactly the containing batch
            batch = parse_batch(data_of(result))
            assert (batch.base_offset, batch.last_offset) == (first, last)
            assert result.first_offset == first
            assert result.size == batch.size


def test_max_bytes_and_min_one_batch(storage):
    log = open_log(storage)
    size = len(make_batch(2))
    for _ in range(5):
        log.append(make_batch(2), now_ms=0)
    result = log.read(0, int(size * 2.5))
    assert result.size == 2 * size
    assert [b.base_offset for b in iter_batches(data_of(result))] == [0, 2]
    assert log.read(3, size * 10).size == 4 * size
    small = log.read(2, size - 1)
    assert (small.size, small.first_offset) == (size, 2)
    empty = log.read(2, size - 1, min_one_batch=False)
    assert (empty.size, empty.first_offset, len(data_of(empty))) == (0, -1, 0)


def test_max_offset_excludes_batches_from_it(storage):
    log = open_log(storage)
    for _ in range(5):
        log.append(make_batch(2), now_ms=0)
    result = log.read(0, 1 << 20, max_offset=6)
    assert [b.base_offset for b in iter_batches(data_of(result))] == [0, 2, 4]
    assert log.read(6, 1 << 20, max_offset=6).size == 0
    # The batch containing 5 starts below max_offset, so it is returned whole.
    assert log.read(5, 1 << 20, max_offset=5).first_offset == 4
    assert log.read(4, 1 << 20, max_offset=5).first_offset == 4


def test_read_stays_in_one_segment(storage):
    batch = make_batch(2)
    log = open_log(storage, segment_bytes=len(batch) * 2)
    for _ in range(6):
        log.append(batch, now_ms=0)
    result = log.read(0, 1 << 20)
    assert [b.base_offset for b in iter_batches(data_of(result))] == [0, 2]
    assert log.read(4, 1 << 20).first_offset == 4


def test_offsets_out_of_range(storage):
    log = open_log(storage)
    log.append(make_batch(3), now_ms=0)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    at_end = log.read(3, 100)
    assert (at_end.size, at_end.first_offset, at_end.log_end_offset) == (0, -1, 3)
    log.delete_records_before(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    assert log.read(2, 100).first_offset == 0  # the batch containing offset 2


def test_offset_for_timestamp(storage):
    log = open_log(storage, index_interval_bytes=50, segment_bytes=600)
    for i, ts in enumerate([100, 200, 150, 300, 300, 400, 250, 500] * 3):
        log.append(make_batch(2, ts=ts + 1000 * (i // 8)), now_ms=0)
    assert len(log.segment_infos()) > 2
    assert log.offset_for_timestamp(0) == (0, 100)
    assert log.offset_for_timestamp(100) == (0, 100)
    assert log.offset_for_timestamp(101) == (2, 200)
    assert log.offset_for_timestamp(260) == (6, 300)
    assert log.offset_for_timestamp(450) == (14, 500)
    assert log.offset_for_timestamp(1150) == (18, 1200)
    assert log.offset_for_timestamp(2500) == (46, 2500)
    assert log.offset_for_timestamp(2501) is None
    log.delete_records_before(5)
    assert log.offset_for_timestamp(0) == (5, 150)  # batch [4, 6) holds 5


def test_batch_headers(storage):
    log = open_log(storage, segment_bytes=300)
    for i in range(6):
        log.append(make_batch(2, ts=i), now_ms=0)
    headers = list(log.batch_headers())
    assert [h.base_offset for h in headers] == [0, 2, 4, 6, 8, 10]
    assert all(isinstance(h, BatchHeader) and h.records_count == 2 for h in headers)
    assert [h.base_offset for h in log.batch_headers(5)] == [4, 6, 8, 10]


def test_delete_records_before(storage):
    batch = make_batch(2)
    log = open_log(storage, segment_bytes=len(batch) * 2, file_delete_delay_ms=0)
    for _ in range(6):
        log.append(batch, now_ms=0)
    assert log.delete_records_before(5) == 1  # segment [0, 4) goes, [4, 8) stays
    assert log.log_start_offset == 5
    assert [i.base_offset for i in log.segment_infos()] == [4, 8]
    assert log.delete_records_before(3) == 0 and log.log_start_offset == 5
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(13)
    assert log.delete_records_before(12) == 1  # the active segment stays
    assert log.log_start_offset == 12 == log.log_end_offset
    assert [i.base_offset for i in log.segment_infos()] == [8]
    assert log.append(batch, now_ms=0).first_offset == 12


def test_truncate_to(storage):
    batch = make_batch(3)
    log = open_log(storage, segment_bytes=len(batch) * 2, file_delete_delay_ms=0)
    for _ in range(6):
        log.append(batch, now_ms=0)
    log.truncate_to(20)  # beyond the end: nothing happens
    assert log.log_end_offset == 18
    log.truncate_to(10)  # mid-batch [9, 12): the whole batch goes
    assert log.log_end_offset == 9
    assert [i.base_offset for i in log.segment_infos()] == [0, 6]
    assert read_offsets(log) == list(range(9))
    assert log.append(make_batch(1), now_ms=0).first_offset == 9
    log.truncate_to(6)
    assert log.log_end_offset == 6 and log.segment_infos()[-1].size_bytes == 0
    assert log.append(batch, now_ms=0).first_offset == 6
    assert read_offsets(log) == list(range(9))
    assert log.recovery_point <= log.log_end_offset


def test_truncate_below_log_start_starts_afresh(storage):
    log = open_log(storage, file_delete_delay_ms=0)
    for _ in range(4):
        log.append(make_batch(2), now_ms=0)
    log.delete_records_before(6)
    log.truncate_to(3)
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    assert log.append(make_batch(1), now_ms=0).first_offset == 3
    assert read_offsets(log) == [3]


def test_delete_oldest_segments_never_the_active(storage):
    batch = make_batch(2)
    log = open_log(storage, segment_bytes=len(batch), file_delete_delay_ms=0)
    for _ in range(4):
        log.append(batch, now_ms=0)
    assert log.delete_oldest_segments(2) == 2
    assert log.log_start_offset == 4
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    assert log.delete_oldest_segments(10) == 1
    assert [i.base_offset for i in log.segment_infos()] == [6]
    assert read_offsets(log) == [6, 7]


def test_fsync_always_advances_recovery_point(storage, monkeypatch, kind):
    syncs = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real(fd)))
    log = storage.open_log("events", 0, TopicConfig())
    log.fsync = "always"
    log.append(make_batch(2), now_ms=0)
    assert log.recovery_point == 2
    log.append(make_batch(2), now_ms=0)
    assert log.recovery_point == 4
    assert len(syncs) == (2 if kind == "segments" else 0)


def test_fsync_interval_by_messages_and_ms(storage):
    log = open_log(storage, flush_messages=5, flush_ms=1000)
    log.fsync = "interval"
    log.append(make_batch(2), now_ms=0)
    log.append(make_batch(2), now_ms=10)
    assert log.recovery_point == 0
    log.append(make_batch(2), now_ms=20)  # 6 unflushed >= flush.messages
    assert log.recovery_point == 6
    log.append(make_batch(1), now_ms=500)
    assert not log.maybe_flush(now_ms=900)
    assert log.recovery_point == 6
    assert log.maybe_flush(now_ms=1020)
    assert log.recovery_point == 7
    log.append(make_batch(1), now_ms=2100)  # flush.ms passed since the last flush
    assert log.recovery_point == 8


def test_fsync_never_waits_for_flush(storage):
    log = open_log(storage, flush_messages=1, flush_ms=0)
    log.fsync = "never"
    log.append(make_batch(2), now_ms=0)
    assert not log.maybe_flush(now_ms=10**9)
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 2


def test_segment_reads_are_file_ranges(tmp_path):
    store = SegmentLogStorage(str(tmp_path))
    log = store.open_log("t", 0, TopicConfig())
    log.append(make_batch(2), now_ms=0)
    result = log.read(0, 1000)
    assert verifyObject(IFileRange, result.records)
    assert result.records.position == 0 and result.records.size == result.size
    assert os.pread(result.records.fileno(), result.size, 0) == result.records.read()
    store.close()


@pytest.mark.parametrize("with_reactor", [True, False])
def test_deleted_segments_renamed_then_unlinked(tmp_path, with_reactor):
    clock = Clock() if with_reactor else None
    store = SegmentLogStorage(str(tmp_path), reactor=clock)
    batch = make_batch(2)
    log = store.open_log("t", 0, TopicConfig(segment_bytes=len(batch), file_delete_delay_ms=500))
    for _ in range(3):
        log.append(batch, now_ms=0)
    held = log.read(0, 1000).records  # a fetch in flight on the oldest segment
    log.delete_oldest_segments(1)
    names = sorted(os.listdir(tmp_path / "t-0"))
    old = [n for n in names if n.startswith("00000000000000000000")]
    if with_reactor:
        assert old == [
            "00000000000000000000.index.deleted",
            "00000000000000000000.log.deleted",
            "00000000000000000000.timeindex.deleted",
        ]
        assert parse_batch(held.read()).base_offset == 0  # still readable
        clock.advance(0.499)
        assert len([n for n in os.listdir(tmp_path / "t-0") if n.endswith(".deleted")]) == 3
        clock.advance(0.001)
    else:
        assert old == []
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".deleted")]
    assert log.log_start_offset == 2
    store.close()


def test_read_to_the_segment_end_skips_the_walk_and_matches_it(tmp_path, clock):
    """A read whose byte limit and max offset reach past the segment's end
    returns the rest of the segment without walking headers: the same file
    range the walk finds, for every start, limit and max offset."""
    storage = new_storage("segments", tmp_path / "data", clock)
    log = open_log(storage, index_interval_bytes=200)
    for count in (1, 3, 2, 5, 1, 1, 4):
        log.append(make_batch(count), 1000)
    segment = log.segments[-1]
    end = log.log_end_offset
    to_end = 0
    for offset in range(end):
        for max_bytes in (1, 60, 300, segment.size, 1 << 20):
            for max_offset in (None, offset + 1, end - 1, end, end + 5):
                got = segment.read(offset, max_bytes, max_offset)
                known, segment._next_offset = segment._next_offset, None
                try:
                    want = segment.read(offset, max_bytes, max_offset)  # the walk
                finally:
                    segment._next_offset = known
                shape = [(r.position, r.size) if r else r for r, _ in (got, want)]
                assert shape[0] == shape[1] and got[1] == want[1], (offset, max_bytes, max_offset)
                records = got[0]
                to_end += bool(records) and records.position + records.size == segment.size
    assert to_end > 100  # the shortcut's case came up
    storage.close()
