"""The leader-epoch checkpoint of a segment log: saved by the log's flushes, and
rebuilt from the log's batch headers after a crash (missing, damaged or stale);
the checkpoint's batched flush (one syncfs) and its fall-back (issue 24)."""

import os

import pytest

from pluglog.broker.partition import Partition
from pluglog.config import TopicConfig
from pluglog.fileutil import syncfs_available
from pluglog.storage import batchsync
from pluglog.storage.epochs import FILE_NAME
from pluglog.storage.manager import SegmentLogStorage
from tests.unit.test_storage_segments import make_batch

pytestmark = pytest.mark.unit

CONFIG = TopicConfig(segment_bytes=600, index_interval_bytes=150)


def _partition(store, key=("t", 0)):
    log = store.open_log(*key, CONFIG)
    return Partition(key[0], key[1], log, CONFIG, node_id=1)


def _lead(part, epoch, batches=2):
    """Lead ``epoch`` and write ``batches`` batches of 2 records in it."""
    part.become_leader(epoch, (1,), (1,), now_ms=0)
    for _ in range(batches):
        part.append(make_batch(2), 0, acks=1)


def _file(store, key=("t", 0)):
    return os.path.join(store.get_log(*key).directory, FILE_NAME)


def _read_file(path):
    with open(path) as handle:
        lines = handle.read().split()
    return [(int(e), int(o)) for e, o in zip(lines[2::2], lines[3::2], strict=True)]


def _crash_and_reopen(path):
    """The process dies (no close: no clean marker, nothing more flushed; what it
    wrote stays in the page cache) and the broker starts again."""
    store = SegmentLogStorage(str(path), topic_defaults=CONFIG)
    assert not store.opened_clean
    return store, _partition(store)


def test_a_new_epoch_is_saved_by_the_logs_next_flush_not_at_once(tmp_path, monkeypatch):
    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG)
    part = _partition(store)
    _lead(part, 1)
    store.flush_all()
    assert _read_file(_file(store)) == [(1, 0)]
    fsyncs = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real(fd))[1])
    _lead(part, 4)  # a follower's first batch of an epoch assigns the same way
    assert part.epochs.entries == [(1, 0), (4, 4)]
    assert fsyncs == []
    assert _read_file(_file(store)) == [(1, 0)]  # not yet written
    part.log.flush()  # a log-by-log flush (flush.ms, --fsync always, close)
    assert _read_file(_file(store)) == [(1, 0), (4, 4)]
    assert part.log.recovery_point == part.log.log_end_offset
    store.close()


def test_epochs_after_the_recovery_point_are_rebuilt_after_a_crash(tmp_path):
    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG)
    part = _partition(store)
    _lead(part, 1, batches=6)
    store.flush_all()  # recovery point 12, file [(1, 0)]
    _lead(part, 3, batches=6)
    _lead(part, 7, batches=3)
    end = part.log.log_end_offset
    assert _read_file(_file(store)) == [(1, 0)]  # the crash comes before any flush
    store, part = _crash_and_reopen(tmp_path)
    assert part.log.log_end_offset == end
    assert part.epochs.entries == [(1, 0), (3, 12), (7, 24)]
    assert _read_file(_file(store)) == [(1, 0), (3, 12), (7, 24)]  # and saved
    store.close()


@pytest.mark.parametrize("damage", ["missing", "empty", "garbage", "short"])
def test_a_damaged_or_missing_checkpoint_is_rebuilt_from_every_header(tmp_path, damage):
    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG)
    part = _partition(store)
    _lead(part, 2, batches=5)
    _lead(part, 5, batches=5)
    store.flush_all()  # everything below the recovery point: nothing re-scanned
    _lead(part, 6, batches=1)
    path = _file(store)
    # What an OS crash may leave of a file renamed into place before its data.
    if damage == "missing":
        os.unlink(path)
    else:
        body = {"empty": b"", "garbage": b"\x00\x00\x00", "short": b"0\n3\n2 0\n"}[damage]
        with open(path, "wb") as handle:
            handle.write(body)
    store, part = _crash_and_reopen(tmp_path)
    assert part.epochs.entries == [(2, 0), (5, 10), (6, 20)]
    assert _read_file(path) == [(2, 0), (5, 10), (6, 20)]
    store.close()


def test_entries_past_the_recovered_end_are_dropped(tmp_path):
    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG)
    part = _partition(store)
    _lead(part, 1, batches=2)
    _lead(part, 2, batches=2)
    store.flush_all()
    assert _read_file(_file(store)) == [(1, 0), (2, 4)]
    # The batches of epoch 2 were torn away by the crash (cut the active
    # segment back to the end of epoch 1's batches).
    active = part.log.segments[-1]
    keep = next(h for h in active.batch_headers(0) if h.base_offset == 4)
    position = sum(h.batch_length + 12 for h in active.batch_headers(0) if h.base_offset < 4)
    assert keep.partition_leader_epoch == 2
    os.truncate(active.log_path, position)
    os.unlink(os.path.join(str(tmp_path), "recovery-point-offset-checkpoint"))
    store, part = _crash_and_reopen(tmp_path)
    assert part.log.log_end_offset == 4
    assert part.epochs.entries == [(1, 0)]
    assert _read_file(_file(store)) == [(1, 0)]
    store.close()


def test_a_clean_stop_saves_the_epochs_and_reopens_without_a_rebuild(tmp_path, monkeypatch):
    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG)
    part = _partition(store)
    _lead(part, 1)
    _lead(part, 9)
    store.close()
    read = []
    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG)
    log = store.get_log("t", 0)
    monkeypatch.setattr(log, "batch_headers", lambda start=0: read.append(start) or iter(()))
    assert log.leader_epochs.entries == [(1, 0), (9, 4)]
    assert read == []
    store.close()


@pytest.mark.skipif(not syncfs_available(), reason="syncfs reports errors on Linux 5.8+ only")
def test_the_batched_checkpoint_flush_syncs_the_file_system_once(tmp_path, monkeypatch):
    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG)
    store.syncfs_min_logs = 5
    parts = [_partition(store, ("t", i)) for i in range(5)]
    for part in parts:
        _lead(part, 3)
    calls = []
    monkeypatch.setattr(batchsync, "syncfs", calls.append)
    monkeypatch.setattr(os, "fdatasync", lambda fd: pytest.fail("fdatasync in a batched flush"))
    store.flush_all()
    assert calls == [str(tmp_path)]
    for part in parts:
        assert part.log.recovery_point == part.log.log_end_offset == 4
        assert not part.log.segments[-1]._unsynced
        assert _read_file(os.path.join(part.log.directory, FILE_NAME)) == [(3, 0)]
    monkeypatch.undo()  # a close fdatasyncs each segment (and its indexes)
    store.close()


def test_few_logs_to_flush_are_flushed_log_by_log(tmp_path, monkeypatch):
    # syncfs would also write back other programs' dirty pages: not for a few logs.
    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG)
    store.syncfs_min_logs = 3
    parts = [_partition(store, ("t", i)) for i in range(3)]
    for part in parts:
        _lead(part, 3)
    store.flush_all()  # nothing new in any log
    _lead(parts[0], 4)
    _lead(parts[1], 4)
    calls = []
    monkeypatch.setattr(batchsync, "syncfs", calls.append)
    monkeypatch.setattr(batchsync, "syncfs_available", lambda: True)
    store.flush_all()
    assert calls == []
    assert [p.log.recovery_point for p in parts] == [8, 8, 4]
    assert _read_file(_file(store, ("t", 0))) == [(3, 0), (4, 4)]
    store.close()


def test_a_failed_syncfs_falls_back_to_flushing_log_by_log(tmp_path, monkeypatch):
    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG)
    store.syncfs_min_logs = 1
    part = _partition(store)
    _lead(part, 3)

    def fail(path):
        raise OSError(5, "Input/output error")

    synced = []
    real = os.fdatasync
    monkeypatch.setattr(batchsync, "syncfs", fail)
    monkeypatch.setattr(batchsync, "syncfs_available", lambda: True)
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real(fd))[1])
    store.flush_all()
    assert synced  # the log's own fdatasync ran
    assert part.log.recovery_point == 4
    assert _read_file(_file(store)) == [(3, 0)]
    store.close()


def test_a_checkpoint_without_a_flush_saves_pending_epochs_first(tmp_path):
    # --fsync always: the append's own flush runs before the partition assigns
    # the epoch of the batch it wrote, so the recovery point is past a batch
    # whose epoch is only in memory; a recovery-point checkpoint written
    # without a flush (a deleted partition, a finished log dir move) saves it.
    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG)
    part = _partition(store)
    _lead(part, 1)
    part.log.flush()
    start = part.log.log_end_offset
    part.append(make_batch(2), 0, acks=1)
    part.log.flush()  # the append's flush
    part.epochs.assign(2, start)  # then what Partition.append_replicated assigns
    assert part.epochs.unsaved
    assert part.log.recovery_point == part.log.log_end_offset == 6
    store.write_checkpoints()
    assert not part.epochs.unsaved
    assert _read_file(_file(store)) == [(1, 0), (2, 4)]
    store.close()
