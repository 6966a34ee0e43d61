"""Buffered index writes of the segment storage (real files in tmp_path).

Index entries are kept in memory and written out once a page of them is
pending, on flush, roll and close; a truncation rewrites the file with every
entry. Index files are fsynced at close only: a flush syncs the log alone,
and a file that lost its tail is completed from the log when it is loaded.
These tests check what is on disk at each of those points, and that an
unclean stop that loses the pending entries still recovers a correct log.
"""

import os
import stat
from array import array

import pytest
from twisted.internet.task import Clock

from pluglog.config import TopicConfig
from pluglog.errors import KafkaStorageError
from pluglog.storage import index as index_module
from pluglog.storage import segment as segment_module
from pluglog.storage.index import OFFSET_ENTRY, TIME_ENTRY, WRITE_BATCH_BYTES
from pluglog.storage.log import FSYNC_NEVER
from pluglog.storage.segment_log import SegmentPartitionLog
from tests.unit.test_storage_segments import make_batch, read_offsets

# Every batch (~90 bytes) after the first gets an offset index entry.
CONFIG = TopicConfig(index_interval_bytes=1)
OFFSET_BATCH = WRITE_BATCH_BYTES // OFFSET_ENTRY.size
TIME_BATCH = WRITE_BATCH_BYTES // TIME_ENTRY.size


def open_log(path, config=CONFIG, clean=True, recovery_point=0):
    return SegmentPartitionLog(
        str(path),
        "orders",
        0,
        config,
        fsync=FSYNC_NEVER,
        clean=clean,
        recovery_point=recovery_point,
    )


def fill(log, batches, first_ts=1000, step=1):
    for i in range(batches):
        log.append(make_batch(2, ts=first_ts + step * i), now_ms=0)


def on_disk(holder):
    """``(offsets, second column)`` decoded from an index file."""
    with open(holder.path, "rb") as handle:
        data = handle.read()
    entry = OFFSET_ENTRY if holder.entry is OFFSET_ENTRY else TIME_ENTRY
    rows = list(entry.iter_unpack(data))
    if entry is OFFSET_ENTRY:
        return [o for o, _ in rows], [p for _, p in rows]
    return [o for _, o in rows], [t for t, _ in rows]


def in_memory(holder):
    if holder.entry is OFFSET_ENTRY:
        return list(holder.offsets), list(holder.positions)
    return list(holder.offsets), list(holder.timestamps)


def test_appends_do_not_write_index_files(tmp_path):
    log = open_log(tmp_path)
    fill(log, 20)
    segment = log.active_segment
    assert len(segment.index) == 19  # one entry per batch but the first
    assert len(segment.time_index) == 19
    assert os.path.getsize(segment.index.path) == 0
    assert os.path.getsize(segment.time_index.path) == 0
    assert segment.index.pending == 19
    log.close()


def test_clean_close_writes_every_entry(tmp_path):
    log = open_log(tmp_path)
    fill(log, 20)
    segment = log.active_segment
    index, time_index = segment.index, segment.time_index
    want_index, want_time = in_memory(index), in_memory(time_index)
    log.close()
    assert on_disk(index) == want_index
    # close() adds the final max timestamp to the time index (as a roll does).
    offsets, timestamps = on_disk(time_index)
    assert (offsets[:-1], timestamps[:-1]) == want_time
    assert timestamps[-1] == 1019
    assert index.pending == time_index.pending == 0

    reopened = open_log(tmp_path)  # clean: indexes are loaded, not rebuilt
    assert in_memory(reopened.active_segment.index) == want_index
    assert reopened.log_end_offset == 40
    assert read_offsets(reopened) == list(range(40))
    reopened.close()


def synced_files(monkeypatch):
    """Record the inode of every file (not directory) the storage fsyncs or
    fdatasyncs."""
    synced = []

    def record(real):
        def sync(fd):
            found = os.fstat(fd)
            if stat.S_ISREG(found.st_mode):
                synced.append(found.st_ino)
            real(fd)

        return sync

    # index.py and segment.py share the one os module.
    assert index_module.os is segment_module.os
    monkeypatch.setattr(index_module.os, "fsync", record(os.fsync))
    monkeypatch.setattr(index_module.os, "fdatasync", record(os.fdatasync))
    return synced


def test_flush_writes_the_index_entries_but_syncs_only_the_log(tmp_path, monkeypatch):
    # --fsync always flushes after every append: one sync (the log), not
    # three. The index files still get every entry written.
    log = open_log(tmp_path)
    fill(log, 10)
    segment = log.active_segment
    synced = synced_files(monkeypatch)
    log.flush()
    monkeypatch.undo()
    assert synced == [os.stat(segment.log_path).st_ino]
    assert on_disk(segment.index) == in_memory(segment.index)
    assert on_disk(segment.time_index) == in_memory(segment.time_index)
    assert len(segment.index) == 9
    log.close()


def test_close_syncs_the_index_files(tmp_path, monkeypatch):
    log = open_log(tmp_path)
    fill(log, 10)
    segment = log.active_segment
    synced = synced_files(monkeypatch)
    log.close()
    monkeypatch.undo()
    for path in (segment.log_path, segment.index.path, segment.time_index.path):
        assert os.stat(path).st_ino in synced, path


def test_index_files_that_lost_their_tail_are_completed_on_load(tmp_path):
    # A machine crash can take the unsynced tail of an index file even below
    # the recovery point (the log itself was fsynced). The loaded prefix is
    # completed from the log: same entries, same answers, files rewritten.
    log = open_log(tmp_path)
    fill(log, 30)
    log.roll(now_ms=0)
    fill(log, 25, first_ts=2000)
    old = log.segments[0]
    want_index, want_time = in_memory(old.index), in_memory(old.time_index)
    log.close()
    # The offset index kept 5 entries, the time index only 2.
    with open(old.index.path, "r+b") as handle:
        handle.truncate(5 * OFFSET_ENTRY.size)
    with open(old.time_index.path, "r+b") as handle:
        handle.truncate(2 * TIME_ENTRY.size)

    # Clean, or unclean with the recovery point past the segment: either
    # way the old segment is loaded, not re-scanned.
    for clean in (True, False):
        reopened = open_log(tmp_path, clean=clean, recovery_point=60)
        segment = reopened.segments[0]
        assert read_offsets(reopened, start=41) == list(range(41, 110))
        assert in_memory(segment.index) == want_index
        assert in_memory(segment.time_index) == want_time
        assert reopened.offset_for_timestamp(1020) == (40, 1020)
        assert on_disk(segment.index) == want_index
        reopened.close()


def test_roll_writes_the_old_segments_entries(tmp_path):
    log = open_log(tmp_path)
    fill(log, 10)
    old = log.active_segment
    log.roll(now_ms=0)
    assert log.active_segment is not old
    assert old.index.pending == old.time_index.pending == 0
    assert on_disk(old.index) == in_memory(old.index)
    assert on_disk(old.time_index)[1][-1] == 1009  # the final max timestamp
    log.close()


def test_a_page_of_pending_offset_entries_is_written_without_flush(tmp_path):
    log = open_log(tmp_path)
    segment = log.active_segment
    # One timestamp: the time index gets a single entry, the offset index one
    # per batch but the first, i.e. one short of a page.
    fill(log, OFFSET_BATCH, step=0)
    assert len(segment.index) == OFFSET_BATCH - 1
    assert len(segment.time_index) == 1
    assert os.path.getsize(segment.index.path) == 0
    fill(log, 1, first_ts=1000)
    assert len(segment.index) == OFFSET_BATCH
    assert on_disk(segment.index) == in_memory(segment.index)
    assert on_disk(segment.time_index) == in_memory(segment.time_index)  # written together
    fill(log, 3, first_ts=1000, step=0)
    assert segment.index.pending == 3
    log.close()


def test_a_page_of_pending_time_entries_is_written_without_flush(tmp_path):
    log = open_log(tmp_path)
    segment = log.active_segment
    fill(log, TIME_BATCH)
    assert len(segment.time_index) == TIME_BATCH - 1
    assert os.path.getsize(segment.time_index.path) == 0
    fill(log, 1, first_ts=5000)
    assert on_disk(segment.time_index) == in_memory(segment.time_index)
    assert on_disk(segment.index) == in_memory(segment.index)
    log.close()


def test_crash_with_pending_entries_recovers(tmp_path):
    log = open_log(tmp_path)
    fill(log, 30)
    log.roll(now_ms=0)
    fill(log, 25, first_ts=2000)
    active = log.active_segment
    assert active.index.pending == 24
    want_index = in_memory(active.index)
    want_time = in_memory(active.time_index)
    # A SIGKILL: the old log object is never closed or flushed, so the index
    # files of the active segment are shorter than its in-memory index.
    assert os.path.getsize(active.index.path) == 0

    recovered = open_log(tmp_path, clean=False)
    segment = recovered.active_segment
    assert recovered.log_end_offset == 110
    assert read_offsets(recovered) == list(range(110))
    assert read_offsets(recovered, start=77) == list(range(77, 110))
    assert recovered.read(61, 1).first_offset == 60
    assert in_memory(segment.index) == want_index
    assert in_memory(segment.time_index) == want_time
    assert segment.largest_timestamp == 2024
    assert recovered.offset_for_timestamp(2010) == (80, 2010)
    # Recovery wrote the rebuilt indexes out.
    assert on_disk(segment.index) == want_index
    assert recovered.append(make_batch(1), now_ms=0).first_offset == 110
    recovered.close()


def test_clean_start_with_short_index_files_is_still_correct(tmp_path):
    # The on-disk index is only a prefix of the one in memory; a clean start
    # scans from its last on-disk entry, so a short file is merely slower.
    log = open_log(tmp_path)
    fill(log, OFFSET_BATCH + 40)
    segment = log.active_segment
    assert 0 < segment.index.written < len(segment.index)
    reopened = open_log(tmp_path, clean=True)  # as if the marker were there
    assert reopened.log_end_offset == 2 * (OFFSET_BATCH + 40)
    assert reopened.active_segment.largest_timestamp == 1000 + OFFSET_BATCH + 39
    assert read_offsets(reopened, start=2 * OFFSET_BATCH) == list(
        range(2 * OFFSET_BATCH, 2 * (OFFSET_BATCH + 40))
    )
    assert reopened.append(make_batch(1), now_ms=0).first_offset == 2 * (OFFSET_BATCH + 40)
    reopened.close()


def test_truncate_that_drops_entries_rewrites_the_file(tmp_path):
    log = open_log(tmp_path)
    fill(log, 20)  # offsets 0..39, two per batch; entries for batches 1..19
    segment = log.active_segment
    log.truncate_to(30)
    assert len(segment.index) == 14
    assert segment.index.pending == 0  # the file was rewritten from memory
    assert on_disk(segment.index) == in_memory(segment.index)
    assert on_disk(segment.time_index) == in_memory(segment.time_index)
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.log_end_offset == 30
    assert read_offsets(reopened) == list(range(30))
    reopened.close()


def test_truncate_that_keeps_entries_keeps_them_pending(tmp_path):
    # An entry every second batch: cutting the last (odd) batch drops none.
    log = open_log(tmp_path, config=TopicConfig(index_interval_bytes=len(make_batch(2))))
    fill(log, 20)
    segment = log.active_segment
    assert list(segment.index.offsets) == list(range(4, 40, 4))
    log.truncate_to(38)
    assert len(segment.index) == 9
    assert segment.index.pending == 9
    log.flush()
    assert on_disk(segment.index) == in_memory(segment.index)
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.log_end_offset == 38
    assert read_offsets(reopened) == list(range(38))
    reopened.close()


def test_failed_index_write_keeps_entries_pending(tmp_path, monkeypatch):
    log = open_log(tmp_path)
    fill(log, 10)
    segment = log.active_segment
    real_write = os.write

    def half_then_fail(fd, data):
        if len(data) > 4:
            return real_write(fd, bytes(data)[: len(data) // 2 + 1])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(index_module.os, "write", half_then_fail)
    with pytest.raises(KafkaStorageError):
        log.flush()
    monkeypatch.undo()
    # The torn tail was cut back: the file still holds whole entries only.
    assert os.path.getsize(segment.index.path) == 0
    assert segment.index.pending == 9
    log.flush()
    assert on_disk(segment.index) == in_memory(segment.index)
    assert on_disk(segment.time_index) == in_memory(segment.time_index)
    log.close()


def test_deleted_segment_pending_entries_are_dropped(tmp_path):
    clock = Clock()
    config = TopicConfig(index_interval_bytes=1, file_delete_delay_ms=1000)
    log = SegmentPartitionLog(str(tmp_path), "orders", 0, config, reactor=clock, clean=True)
    fill(log, 10)
    old = log.active_segment
    assert old.index.pending == 9
    log.delete_records_before(10)
    log.truncate_to(5)  # below the log start: every segment goes
    assert old.deleted
    # Renamed as they were: the pending entries were not written first.
    assert os.path.getsize(old.index.path) == 0
    assert old.index.path.endswith(".deleted")
    clock.advance(1)
    names = sorted(os.listdir(str(tmp_path)))
    assert names == [
        "00000000000000000005.index",
        "00000000000000000005.log",
        "00000000000000000005.timeindex",
    ]
    log.close()
    assert sorted(os.listdir(str(tmp_path))) == names


def test_offset_index_encoding_matches_struct(tmp_path):
    holder = index_module.OffsetIndex(str(tmp_path / "x.index"), 100, 1 << 20)
    holder.create()
    for i in range(5):
        holder.append(100 + 3 * i, 70 * i)
    holder.append(100, 9999)  # not increasing: ignored
    holder.close()
    with open(holder.path, "rb") as handle:
        data = handle.read()
    assert data == b"".join(OFFSET_ENTRY.pack(3 * i, 70 * i) for i in range(5))
    loaded = index_module.OffsetIndex(holder.path, 100, 1 << 20)
    loaded.load(log_size=1000)
    assert (loaded.offsets, loaded.positions) == (
        array("I", [0, 3, 6, 9, 12]),
        array("I", [0, 70, 140, 210, 280]),
    )
    assert loaded.written == 5 and loaded.pending == 0


def test_failed_page_write_does_not_fail_the_append(tmp_path, monkeypatch):
    log = open_log(tmp_path)
    segment = log.active_segment
    fill(log, OFFSET_BATCH, step=0)

    def no_space(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(index_module.os, "write", no_space)
    info = log.append(make_batch(2, ts=1000), now_ms=0)  # reaches a page
    monkeypatch.undo()
    assert info.first_offset == 2 * OFFSET_BATCH
    assert log.log_end_offset == 2 * OFFSET_BATCH + 2
    assert log._dirty == [segment]  # still flushed by the next flush
    assert segment.index.pending == OFFSET_BATCH
    assert os.path.getsize(segment.index.path) == 0
    log.flush()
    assert log.recovery_point == log.log_end_offset
    assert on_disk(segment.index) == in_memory(segment.index)
    log.close()


def test_a_new_segments_first_append_reads_no_index_file(tmp_path, monkeypatch):
    # Its index files were created empty with the empty log: nothing to load.
    log = open_log(tmp_path)
    reads = []
    real = index_module._IndexFile._read_file
    monkeypatch.setattr(
        index_module._IndexFile,
        "_read_file",
        lambda self: (reads.append(self.path), real(self))[1],
    )
    fill(log, 3)
    assert reads == []
    assert in_memory(log.active_segment.index)[0] == [2, 4]
    log.close()
    reopened = open_log(tmp_path)
    reopened.read(0, 1 << 20)
    assert in_memory(reopened.active_segment.index)[0] == [2, 4]


def test_stale_entries_in_an_empty_logs_index_are_not_taken_as_loaded(tmp_path):
    # An empty .log whose index file is not empty (what a crash may leave)
    # is loaded and checked as before, not assumed empty.
    log = open_log(tmp_path)
    path = log.active_segment.index.path
    log.close()
    with open(path, "wb") as handle:
        handle.write(OFFSET_ENTRY.pack(5, 900))
    reopened = open_log(tmp_path)
    assert not reopened.active_segment._indexes_loaded
    fill(reopened, 3)  # the bad entry (past the log's end) is dropped by a rebuild
    assert in_memory(reopened.active_segment.index)[0] == [2, 4]
    assert reopened.read(2, 1 << 20).first_offset == 2
