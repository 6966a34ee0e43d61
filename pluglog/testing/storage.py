"""The storage conformance kit: :class:`StorageContract`.

Subclass it and define the fixture ``storage_factory``: a callable with no
arguments returning an :class:`~pluglog.interfaces.ILogStorage`, which
returns a storage over the same data when called again (set ``durable =
False`` for a storage that keeps nothing, like ``memory``). The tests open
logs with ``open_log("t", 0, topic_config)`` and use only the interfaces:
append (several batches back to back, CRC and structure checks, offsets,
leader epoch, ``answer``), read (bounds, empty reads, ``max_offset``,
``min_one_batch``), batch headers, timestamps, rolling and segment infos,
DeleteRecords, retention's segment deletion, truncation, recovery after a
close and after an abandoned (killed) storage, and, when declared,
compaction (``ICompactableLog``), follower appends (``IReplicatedLog``),
interval flushes (``IFlushableLog``) and the checkpoint's flush with its
sync in a thread (``IBackgroundFlushStorage``).
"""

import pytest
from zope.interface.verify import verifyObject

from pluglog.config import TopicConfig
from pluglog.errors import CorruptRecordError, InvalidRecordError, OffsetOutOfRangeError
from pluglog.interfaces import (
    IBackgroundFlushStorage,
    ICompactableLog,
    ICompactingStorage,
    IFileRange,
    IFlushableLog,
    ILogStorage,
    IPartitionLog,
    IReplicatedLog,
    IReplicatingStorage,
)
from pluglog.protocol.records import Record, build_batch, iter_batches
from pluglog.retention import DeleteRetentionPolicy
from pluglog.storage.api import AppendInfo, BatchHeader, ReadResult, SegmentInfo

#: small segments, so that a few appends make several of them
SMALL = TopicConfig(segment_bytes=400, file_delete_delay_ms=0, retention_ms=-1)
NOW = 1_700_000_000_000


def batch(count=1, ts=1000, key=b"k", value=b"v" * 20):
    """A client batch of ``count`` records (baseOffset 0)."""
    return build_batch([Record(key, value, [], ts + i) for i in range(count)])


def data_of(result):
    records = result.records
    return records.read() if IFileRange.providedBy(records) else bytes(records)


def read_all(log, start=None):
    """``[(offset, key, value)]`` of every record from ``start`` to the end."""
    offset = log.log_start_offset if start is None else start
    out = []
    while offset < log.log_end_offset:
        batches = list(iter_batches(data_of(log.read(offset, 1 << 20))))
        assert batches, f"empty read at {offset} below the log end {log.log_end_offset}"
        out += [
            (r.offset, r.key, r.value) for b in batches for r in b.records if r.offset >= offset
        ]
        offset = batches[-1].last_offset + 1
    return out


class StorageContract:
    """See the module docstring."""

    #: False for a storage that keeps nothing across instances
    durable = True

    @pytest.fixture
    def storage_factory(self):
        raise NotImplementedError("define the storage_factory fixture")

    @pytest.fixture
    def storage(self, storage_factory):
        storage = storage_factory()
        yield storage
        storage.close()

    @pytest.fixture
    def log(self, storage):
        return storage.open_log("t", 0, SMALL)

    def fill(self, log, batches=6, count=3):
        for i in range(batches):
            log.append(batch(count, ts=1000 * (i + 1)), NOW, 0, None)

    # -- the interfaces --------------------------------------------------------

    def test_provides_the_interfaces(self, storage, log):
        assert verifyObject(ILogStorage, storage)
        assert verifyObject(IPartitionLog, log)
        if ICompactingStorage.providedBy(storage):
            assert verifyObject(ICompactableLog, log)
        if IReplicatingStorage.providedBy(storage):
            assert verifyObject(IReplicatedLog, log)
        if IFlushableLog.providedBy(log):
            assert verifyObject(IFlushableLog, log)
        assert storage.get_log("t", 0) is log and log in storage.logs()
        assert storage.get_log("t", 1) is None
        assert (log.topic, log.partition, log.closed) == ("t", 0, False)
        assert log.config == SMALL
        # The class the broker verifies at start is the class it gets.
        assert isinstance(log, storage.log_class)
        assert IPartitionLog.implementedBy(storage.log_class)

    # -- append ------------------------------------------------------------------

    def test_append_assigns_offsets_and_stamps_the_epoch(self, log):
        first = log.append(batch(3), NOW, 7, None)
        assert isinstance(first, AppendInfo)
        assert (first.first_offset, first.last_offset, first.num_records) == (0, 2, 3)
        assert first.log_append_time == -1 and first.num_batches == 1
        two = batch(2, ts=5000) + batch(1, ts=6000)  # two batches back to back
        info = log.append(two, NOW, 8, None)
        assert (info.first_offset, info.last_offset, info.num_batches) == (3, 5, 2)
        assert info.max_timestamp == 6000 and info.offset_of_max_timestamp == 5
        assert log.log_end_offset == 6
        batches = list(iter_batches(data_of(log.read(0, 1 << 20))))
        assert [(b.base_offset, b.partition_leader_epoch) for b in batches][:1] == [(0, 7)]
        assert [o for o, _k, _v in read_all(log)] == list(range(6))

    def test_log_append_time_is_stamped(self, storage):
        config = TopicConfig(message_timestamp_type="LogAppendTime")
        log = storage.open_log("lat", 0, config)
        info = log.append(batch(2, ts=5), NOW, 0, None)
        assert info.log_append_time == NOW and info.max_timestamp == NOW
        (stored,) = iter_batches(data_of(log.read(0, 1 << 20)))  # CRC checked on parse
        assert stored.max_timestamp == NOW

    def test_answer_is_called_at_most_once_with_the_offsets(self, log):
        log.append(batch(), NOW, 0, None)
        calls = []
        info = log.append(batch(2), NOW, 0, lambda *args: calls.append(args))
        assert len(calls) <= 1
        if calls:
            assert calls[0] == (info.first_offset, info.log_append_time, info.log_start_offset)

    def test_bad_batches_write_nothing(self, log):
        log.append(batch(), NOW, 0, None)
        corrupt = bytearray(batch())
        corrupt[-1] ^= 0xFF
        with pytest.raises(CorruptRecordError):
            log.append(bytes(corrupt), NOW, 0, None)
        with pytest.raises(InvalidRecordError):
            log.append(batch()[:30], NOW, 0, None)
        wrong_magic = bytearray(batch())
        wrong_magic[16] = 1
        with pytest.raises((InvalidRecordError, CorruptRecordError)):
            log.append(batch() + bytes(wrong_magic), NOW, 0, None)  # all or nothing
        assert log.log_end_offset == 1 and [o for o, _k, _v in read_all(log)] == [0]

    # -- read --------------------------------------------------------------------

    def test_read_bounds_and_the_empty_result(self, log):
        self.fill(log, batches=3)
        end = log.log_end_offset
        result = log.read(end, 1 << 20)
        assert isinstance(result, ReadResult)
        assert (data_of(result), result.size, result.first_offset) == (b"", 0, -1)
        assert (result.log_start_offset, result.log_end_offset) == (0, end)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(end + 1, 1 << 20)
        # A read starts with the batch holding the offset.
        middle = log.read(4, 1 << 20)
        assert middle.first_offset == 3
        assert next(iter_batches(data_of(middle))).base_offset == 3
        # max_offset leaves out batches starting at or after it.
        capped = log.read(0, 1 << 20, max_offset=3)
        assert [b.base_offset for b in iter_batches(data_of(capped))] == [0]
        assert log.read(3, 1 << 20, max_offset=3).first_offset == -1

    def test_min_one_batch(self, log):
        self.fill(log, batches=2)
        assert data_of(log.read(0, 1, min_one_batch=False)) == b""
        one = list(iter_batches(data_of(log.read(0, 1))))
        assert len(one) == 1 and one[0].base_offset == 0

    def test_batch_headers_include_the_batch_holding_start(self, log):
        self.fill(log, batches=3)
        headers = list(log.batch_headers(4))
        assert all(isinstance(h, BatchHeader) for h in headers)
        assert [h.base_offset for h in headers] == [3, 6]
        assert [h.base_offset for h in log.batch_headers()] == [0, 3, 6]
        assert headers[-1].last_offset == 8 and headers[-1].records_count == 3

    def test_offset_for_timestamp(self, log):
        self.fill(log, batches=3)  # max timestamps 1002, 2002, 3002
        assert log.offset_for_timestamp(1500) == (3, 2002)
        assert log.offset_for_timestamp(0) == (0, 1002)
        assert log.offset_for_timestamp(99_999) is None

    # -- segments, retention, DeleteRecords, truncation -------------------------

    def test_roll_and_segment_infos(self, log):
        self.fill(log)
        infos = log.segment_infos()
        assert len(infos) >= 2 and infos[-1].active and not any(i.active for i in infos[:-1])
        assert all(isinstance(i, SegmentInfo) for i in infos)
        assert infos[0].base_offset == 0 and infos[-1].next_offset == log.log_end_offset
        for older, newer in zip(infos, infos[1:], strict=False):
            assert older.next_offset <= newer.base_offset
        log.roll(NOW)
        assert log.segment_infos()[-1].size_bytes == 0
        log.roll(NOW)  # an empty active segment does not roll
        assert len(log.segment_infos()) == len(infos) + 1

    def test_retention_deletes_oldest_segments(self, log):
        self.fill(log)
        log.roll(NOW)
        infos = log.segment_infos()
        config = TopicConfig(retention_ms=0)
        count = DeleteRetentionPolicy().segments_to_delete(log, config, NOW)
        assert count == len(infos) - 1
        assert log.delete_oldest_segments(count) == count
        assert log.log_start_offset == log.log_end_offset == infos[-1].base_offset
        assert len(log.segment_infos()) == 1
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0, 1 << 20)

    def test_delete_records_before(self, log):
        self.fill(log)
        log.delete_records_before(4)
        assert log.log_start_offset == 4
        assert [o for o, _k, _v in read_all(log)][0] == 4
        with pytest.raises(OffsetOutOfRangeError):
            log.delete_records_before(log.log_end_offset + 1)

    def test_truncate_to_drops_whole_batches(self, log):
        self.fill(log)
        log.truncate_to(7)  # inside the batch 6-8
        assert log.log_end_offset == 6
        assert [o for o, _k, _v in read_all(log)] == list(range(6))
        assert log.append(batch(), NOW, 0, None).first_offset == 6
        log.truncate_to(100)  # beyond the end: nothing
        assert log.log_end_offset == 7

    # -- recovery ----------------------------------------------------------------

    def test_reopen_after_close(self, storage_factory):
        if not self.durable:
            pytest.skip("the storage keeps nothing")
        storage = storage_factory()
        log = storage.open_log("t", 0, SMALL)
        self.fill(log)
        log.delete_records_before(2)
        before = read_all(log)
        storage.close()
        assert log.closed
        storage = storage_factory()
        try:
            log = storage.open_log("t", 0, SMALL)
            assert read_all(log) == before and log.log_start_offset == 2
            assert log.append(batch(), NOW, 0, None).first_offset == before[-1][0] + 1
        finally:
            storage.close()

    def test_reopen_after_a_kill_keeps_flushed_data(self, storage_factory):
        if not self.durable:
            pytest.skip("the storage keeps nothing")
        storage = storage_factory()
        log = storage.open_log("t", 0, SMALL)
        self.fill(log)
        log.flush()
        assert log.recovery_point == log.log_end_offset
        before = read_all(log)
        del storage, log  # abandoned, never closed: what a SIGKILL leaves
        storage = storage_factory()
        try:
            log = storage.open_log("t", 0, SMALL)
            assert read_all(log) == before
        finally:
            storage.close()

    def test_delete_log(self, storage, log):
        self.fill(log, batches=2)
        storage.delete_log("t", 0)
        assert storage.get_log("t", 0) is None
        fresh = storage.open_log("t", 0, SMALL)
        assert fresh.log_end_offset == 0

    # -- optional capabilities ---------------------------------------------------

    def test_compaction_keeps_the_latest_record_per_key(self, storage):
        if not ICompactingStorage.providedBy(storage):
            pytest.skip("the storage does not declare ICompactingStorage")
        config = TopicConfig(
            segment_bytes=400, cleanup_policy="compact", file_delete_delay_ms=0, retention_ms=-1
        )
        log = storage.open_log("c", 0, config)
        assert ICompactableLog.providedBy(log)
        for i in range(30):
            log.append(batch(key=b"k%d" % (i % 3), value=b"v%d" % i), NOW, 0, None)
        log.roll(NOW)
        end = log.log_end_offset
        removed = log.compact(NOW)
        assert removed == 27
        records = read_all(log)
        assert [(o, k, v) for o, k, v in records] == [
            (27, b"k0", b"v27"),
            (28, b"k1", b"v28"),
            (29, b"k2", b"v29"),
        ]
        assert log.log_end_offset == end  # offsets never change
        assert log.append(batch(key=b"k0"), NOW, 0, None).first_offset == end

    def test_compaction_removes_tombstones_after_delete_retention(self, storage):
        if not ICompactingStorage.providedBy(storage):
            pytest.skip("the storage does not declare ICompactingStorage")
        config = TopicConfig(
            segment_bytes=400, cleanup_policy="compact", delete_retention_ms=1000, retention_ms=-1
        )
        log = storage.open_log("d", 0, config)
        log.append(batch(key=b"a", value=b"1"), NOW, 0, None)
        log.append(build_batch([Record(b"a", None, [], 2000)]), NOW, 0, None)
        log.append(batch(key=b"b", value=b"2"), NOW, 0, None)
        log.roll(NOW)
        log.compact(NOW)
        assert [(k, v) for _o, k, v in read_all(log)] == [(b"a", None), (b"b", b"2")]
        log.compact(NOW + 1001)
        assert [(k, v) for _o, k, v in read_all(log)] == [(b"b", b"2")]

    def test_follower_append_and_restart(self, storage):
        if not IReplicatingStorage.providedBy(storage):
            pytest.skip("the storage does not declare IReplicatingStorage")
        leader = storage.open_log("r", 0, SMALL)
        follower = storage.open_log("r", 1, SMALL)
        self.fill(leader, batches=3)
        fetched = data_of(leader.read(0, 1 << 20))
        info, headers = follower.append_replicated(fetched + fetched[:20], NOW)
        assert info.first_offset == 0 and [h.base_offset for h in headers][:1] == [0]
        assert follower.log_end_offset == headers[-1].next_offset
        assert data_of(follower.read(0, 1 << 20))[: len(fetched)] == fetched
        with pytest.raises(CorruptRecordError):
            bad = bytearray(fetched)
            bad[-1] ^= 0xFF
            follower.append_replicated(bytes(bad), NOW)
        follower.truncate_fully_and_start_at(100)
        assert follower.log_start_offset == follower.log_end_offset == 100
        assert follower.append(batch(), NOW, 0, None).first_offset == 100

    def test_interval_flush(self, log):
        if not IFlushableLog.providedBy(log):
            pytest.skip("the log does not declare IFlushableLog")
        self.fill(log, batches=1)
        assert log.maybe_flush(NOW + 1) in (True, False)
        log.flush()
        assert log.recovery_point == log.log_end_offset

    def test_background_flush_covers_what_was_written_before_it(self, storage_factory):
        storage = storage_factory()
        if not IBackgroundFlushStorage.providedBy(storage):
            storage.close()
            pytest.skip("the storage does not declare IBackgroundFlushStorage")
        try:
            log = storage.open_log("t", 0, SMALL)
            self.fill(log, batches=2)
            flush = storage.begin_background_flush()
            assert verifyObject(IBackgroundFlushStorage, storage)
            if flush is None:  # this machine cannot: the broker calls flush_all
                storage.flush_all()
                assert log.recovery_point == log.log_end_offset
                return
            for _ in flush.capture():
                pass
            end = log.log_end_offset
            self.fill(log, batches=1)  # after the hand-over: not covered
            for _ in flush.finish(flush.sync()):
                pass
            if flush.complete:
                assert log.recovery_point == end
                storage.write_checkpoints()
            else:
                storage.flush_all()
            assert log.recovery_point <= log.log_end_offset
            before = read_all(log)
            abandoned = storage.begin_background_flush()
            if abandoned is not None:
                for _ in abandoned.capture():
                    pass
                abandoned.abandon()  # a stop while it syncs: the close flushes
        finally:
            storage.close()
        storage = storage_factory()
        try:
            log = storage.open_log("t", 0, SMALL)
            if self.durable:
                assert read_all(log) == before
                assert log.recovery_point == log.log_end_offset
        finally:
            storage.close()
