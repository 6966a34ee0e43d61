"""The checkpoint flush with its sync in a thread (pluglog.storage.background_flush).

The real segment storage over real files; syncfs itself is replaced by a
recorder (or a failure), and fsync / fdatasync calls are recorded by path,
so each test sees what was synced and when. The rule under test: a
recovery point moves only to a log end that was written before the sync
began, and anything written, rolled or truncated meanwhile stays for the
next flush to sync. Most tests run in both of the sync's ways (``mode``):
one syncfs of the log dir, and each handed-over file synced by path (a dir
with fewer than ``syncfs_min_logs`` logs to flush).
"""

import os
import random

import pytest
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from pluglog.broker import checkpoint
from pluglog.config import TopicConfig
from pluglog.storage import background_flush, batchsync
from pluglog.storage.checkpoints import read_checkpoint
from pluglog.storage.filenames import RECOVERY_POINT_CHECKPOINT
from pluglog.storage.manager import SegmentLogStorage
from tests.unit.test_batched_durability import failing_syncfs, record_syncs
from tests.unit.test_group_coordinator import make_broker, result_of
from tests.unit.test_storage_segments import make_batch

pytestmark = pytest.mark.unit


@pytest.fixture
def syncs(monkeypatch):
    """Paths fsynced / fdatasynced, and the dirs syncfs was asked for."""
    return record_syncs(monkeypatch, background_flush, batchsync)


@pytest.fixture(params=["syncfs", "files"])
def mode(request):
    """How the background sync covers a dir: one syncfs, or file by file."""
    return request.param


def store_of(data_dir, logs, mode="syncfs"):
    store = SegmentLogStorage(str(data_dir))
    # syncfs for any dir with a log to flush, or for none (file by file)
    store.syncfs_min_logs = 1 if mode == "syncfs" else 1000
    for partition in range(logs):
        log = store.open_log("t", partition, TopicConfig())
        append(log, 3)
    return store


def begin(store):
    """A background flush with every log handed over."""
    flush = store.begin_background_flush()
    for _ in flush.capture():
        pass
    return flush


def finish(flush, result):
    for _ in flush.finish(result):
        pass
    return flush.complete


def append(log, records=1):
    for n in range(records):
        log.append(make_batch(1, value=b"record %d" % n), 1000)


def segment_files(paths):
    return [p for p in paths if p.endswith(".log")]


def first_segments(logs):
    return {os.path.join(log.directory, "00000000000000000000.log") for log in logs}


def synced_by(flush, syncs, logs, mode, data_dir):
    """Run ``flush``'s sync; assert it synced the way ``mode`` says, each
    handed-over log's first segment included when file by file."""
    syncs["fsync"].clear()
    failed = flush.sync()
    if mode == "syncfs":
        assert syncs["syncfs"][-1:] == [str(data_dir)]
        assert segment_files(syncs["fsync"]) == []
    else:
        assert syncs["syncfs"] == []
        assert first_segments(logs) <= set(syncs["fsync"])
    return failed


def test_recovery_points_move_to_the_log_ends_of_the_capture(tmp_path, syncs, mode):
    store = store_of(tmp_path, 3, mode)
    logs = [store.get_log("t", p) for p in range(3)]
    syncs["fsync"].clear()
    flush = begin(store)
    assert len(flush) == 3
    assert syncs["fsync"] == []  # the capture writes, it does not sync
    append(logs[0], 2)  # after the capture, before the sync
    logs[1].roll(2000)
    append(logs[1])
    failed = synced_by(flush, syncs, logs, mode, tmp_path)
    assert failed == {}
    if mode == "files":
        # The capture's, not the segment rolled in after it.
        assert not any(p.endswith("3.log") for p in syncs["fsync"])
    append(logs[2])  # after the sync began
    assert finish(flush, failed)
    assert [log.recovery_point for log in logs] == [3, 3, 3]
    assert [log.log_end_offset for log in logs] == [5, 4, 4]
    # What came after the capture is still to flush, the new segment's
    # directory entry included.
    assert all(log.has_unflushed() for log in logs)
    assert logs[1]._directory_dirty
    store.syncfs_min_logs = 100
    store.flush_all()  # few logs: log by log
    assert [log.recovery_point for log in logs] == [5, 4, 4]
    synced = segment_files(syncs["fsync"])
    assert os.path.join(logs[1].directory, "00000000000000000003.log") in synced
    assert not any(log.has_unflushed() for log in logs)
    store.close()


def test_a_truncation_meanwhile_leaves_the_recovery_point_where_it_was(tmp_path, syncs, mode):
    store = store_of(tmp_path, 1, mode)
    log = store.get_log("t", 0)
    log.flush()
    append(log, 3)  # offsets 3-5
    flush = begin(store)
    log.truncate_to(4)
    append(log, 3)  # offsets 4-6, not what the capture wrote
    assert finish(flush, flush.sync())
    assert log.recovery_point == 3
    assert log.has_unflushed()
    syncs["fsync"].clear()
    store.syncfs_min_logs = 100  # few logs: log by log
    store.flush_all()
    assert log.recovery_point == 7
    assert segment_files(syncs["fsync"]) == [
        os.path.join(log.directory, "00000000000000000000.log")
    ]
    store.close()


def test_a_flush_while_the_sync_is_in_flight_syncs_what_was_handed_over(tmp_path, syncs, mode):
    store = store_of(tmp_path, 1, mode)
    log = store.get_log("t", 0)
    flush = begin(store)
    log.roll(2000)  # the handed-over segment is no longer the active one
    append(log, 2)
    syncs["fsync"].clear()
    log.flush()  # e.g. flush.messages, before the background sync ran
    first = os.path.join(log.directory, "00000000000000000000.log")
    assert first in syncs["fsync"]
    assert log.directory in syncs["fsync"]  # the new segment's entry
    assert log.recovery_point == log.log_end_offset == 5
    assert finish(flush, flush.sync())
    assert log.recovery_point == 5
    store.close()


def failing_files(targets):
    raise OSError(5, f"fdatasync of {targets[0][0]}: Input/output error")


def test_a_failed_sync_gives_everything_back_to_the_flush_log_by_log(
    tmp_path, syncs, monkeypatch, mode
):
    store = store_of(tmp_path, 2, mode)
    logs = [store.get_log("t", p) for p in range(2)]
    flush = begin(store)
    monkeypatch.setattr(background_flush, "syncfs", failing_syncfs)
    monkeypatch.setattr(background_flush, "sync_files", failing_files)
    failed = flush.sync()
    assert list(failed) == [str(tmp_path)]
    assert not finish(flush, failed)  # the caller runs flush_all
    assert [log.recovery_point for log in logs] == [0, 0]
    assert all(log.has_unflushed() for log in logs)
    assert all(log._unflushed_records == 3 for log in logs)
    store.syncfs_min_logs = 100  # few logs: log by log
    store.flush_all()
    assert sorted(segment_files(syncs["fsync"])) == sorted(first_segments(logs))
    assert [log.recovery_point for log in logs] == [3, 3]
    store.close()


def test_an_abandoned_flush_is_synced_by_the_close(tmp_path, syncs, mode):
    store = store_of(tmp_path, 2, mode)
    logs = [store.get_log("t", p) for p in range(2)]
    flush = begin(store)
    flush.abandon()  # a stop while the sync runs
    assert all(log.has_unflushed() for log in logs)
    store.syncfs_min_logs = 100
    store.close()  # two logs: closed log by log, each fdatasynced
    assert set(segment_files(syncs["fsync"])) == {
        os.path.join(log.directory, "00000000000000000000.log") for log in logs
    }
    reopened = SegmentLogStorage(str(tmp_path))
    assert reopened.opened_clean
    assert [reopened.get_log("t", p).recovery_point for p in range(2)] == [3, 3]
    reopened.close()


def test_a_log_deleted_or_closed_meanwhile_is_left_alone(tmp_path, syncs, mode):
    store = store_of(tmp_path, 2, mode)
    flush = begin(store)
    store.delete_log("t", 1)
    assert finish(flush, flush.sync())
    assert store.get_log("t", 0).recovery_point == 3
    store.close()


def test_below_the_syncfs_minimum_each_file_is_synced_by_path(tmp_path, syncs):
    # syncfs writes back every program's dirty pages: not for a few logs.
    store = store_of(tmp_path, 2)
    store.syncfs_min_logs = 3
    flush = begin(store)
    assert len(flush) == 2 and not flush.syncfs_dirs
    store.syncfs_min_logs = 2
    flush.abandon()
    assert begin(store).syncfs_dirs == {str(tmp_path)}
    store.close()


def test_each_log_dir_syncs_its_own_way(tmp_path, syncs):
    # Log dir a has 3 logs to flush (syncfs), b has 1 (file by file).
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    store = SegmentLogStorage(dirs)
    store.syncfs_min_logs = 3
    for partition in range(6):
        append(store.open_log("t", partition, TopicConfig()), 2)
    by_dir = {
        d: [store._logs[k] for k in sorted(store._logs) if store._dir_of[k] == d] for d in dirs
    }
    assert [len(by_dir[d]) for d in dirs] == [3, 3]  # spread evenly
    by_dir[dirs[1]][0].flush()
    by_dir[dirs[1]][1].flush()
    flush = begin(store)
    assert len(flush) == 4 and flush.syncfs_dirs == {dirs[0]}
    syncs["fsync"].clear()
    assert flush.sync() == {}
    assert syncs["syncfs"][-1:] == [dirs[0]]
    assert set(segment_files(syncs["fsync"])) == first_segments(by_dir[dirs[1]][2:])
    assert finish(flush, {})
    assert all(log.recovery_point == 2 for log in store._logs.values())
    store.close()


def test_without_syncfs_every_dir_syncs_by_path_and_batched_flush_off_has_none(
    tmp_path, monkeypatch
):
    store = store_of(tmp_path, 1)  # syncfs for any dir, where it exists
    monkeypatch.setattr(batchsync, "syncfs_available", lambda: False)
    flush = begin(store)
    assert len(flush) == 1 and not flush.syncfs_dirs
    flush.abandon()
    store.batched_flush = False
    monkeypatch.undo()
    assert store.begin_background_flush() is None
    store.close()


@pytest.mark.parametrize("seed", range(4))
def test_by_path_the_sync_covers_what_a_flush_would_sync(tmp_path, syncs, monkeypatch, seed):
    # A log's handed-over files are the ones its flush syncs: each
    # segment written to (appends, rolls), its transaction index after an
    # abort, its leader-epoch file and its directory.
    rng = random.Random(seed)
    store = store_of(tmp_path, 3, "files")
    logs = [store.get_log("t", p) for p in range(3)]
    for log in logs:
        log.flush()
        for step in range(rng.randint(1, 6)):
            op = rng.random()
            if op < 0.5:
                append(log, rng.randint(1, 3))
            elif op < 0.7:
                log.roll(2000 + step)
                append(log)
            elif op < 0.85:
                log.leader_epochs.assign(rng.randint(1, 9) + step * 10, log.log_end_offset)
            else:
                end = log.log_end_offset
                append(log)
                log.append_aborted_txn(7, end, end, end)
    flush = begin(store)
    handed = {
        id(log): {path for path, _data in mark.files}
        for log, mark in flush.captured[str(tmp_path)]
    }
    flush.abandon()  # every log takes its part back, unsynced
    for log in logs:
        syncs["fsync"].clear()
        log.flush()
        assert set(syncs["fsync"]) == handed.get(id(log), set()), log
    store.close()


def test_a_stop_during_the_capture_or_the_return_gives_every_mark_back(tmp_path, syncs, mode):
    store = store_of(tmp_path, 4, mode)
    logs = [store.get_log("t", p) for p in range(4)]
    flush = store.begin_background_flush()
    steps = flush.capture()
    next(steps)
    next(steps)
    assert len(flush) == 2
    flush.abandon()  # two handed over, two not yet
    assert list(steps) == []
    assert all(log.has_unflushed() and log._unflushed_records == 3 for log in logs)
    flush = begin(store)
    assert len(flush) == 4
    steps = flush.finish(flush.sync())
    next(steps)  # one log's recovery point moved
    flush.abandon()
    assert list(steps) == []
    assert sorted(log.recovery_point for log in logs) == [0, 0, 0, 3]
    assert sum(log.has_unflushed() for log in logs) == 3
    store.flush_all()
    assert [log.recovery_point for log in logs] == [3, 3, 3, 3]
    store.close()


def test_a_log_deleted_before_its_capture_is_skipped(tmp_path, syncs, mode):
    store = store_of(tmp_path, 3, mode)
    flush = store.begin_background_flush()
    store.delete_log("t", 2)
    assert sum(1 for _ in flush.capture()) == 2
    assert finish(flush, flush.sync())
    store.close()


@pytest.mark.parametrize("seed", range(8))
def test_random_work_around_the_sync_never_moves_a_recovery_point_past_it(
    tmp_path, syncs, seed, mode
):
    rng = random.Random(seed)
    store = store_of(tmp_path, 4, mode)
    logs = [store.get_log("t", p) for p in range(4)]
    now = [2000]

    def work(log, steps):
        """Appends, rolls, truncations and inline flushes; True if it truncated."""
        truncated = False
        for _ in range(steps):
            op = rng.random()
            if op < 0.5:
                append(log, rng.randint(1, 3))
            elif op < 0.7:
                now[0] += 1000
                log.roll(now[0])
                append(log)
            elif op < 0.85 and log.log_end_offset > log.log_start_offset:
                log.truncate_to(rng.randint(log.log_start_offset, log.log_end_offset - 1))
                truncated = True
            else:
                handed = log._handed_over
                log.flush()
                # A flush moves the recovery point to the log end: what was
                # handed over to a sync still in flight is synced too.
                if handed is not None:
                    assert not any(seg._unsynced for seg, _ in handed.segments if not seg.deleted)
        return truncated

    for _round in range(6):
        for log in logs:
            work(log, rng.randint(0, 3))
        flush = begin(store)
        ends = {log: log.log_end_offset for log in logs}
        truncated = {log: work(log, rng.randint(0, 3)) for log in logs}
        at_sync = {log: log.log_end_offset for log in logs}
        failed = flush.sync()
        for log in logs:
            truncated[log] |= work(log, rng.randint(0, 3))
        before = {log: log.recovery_point for log in logs}
        assert finish(flush, failed)
        for log in logs:
            rp = log.recovery_point
            assert rp <= log.log_end_offset
            if truncated[log]:
                assert rp == before[log]
            else:
                assert rp == max(before[log], ends[log])
                assert ends[log] <= at_sync[log]
            # Every segment with data above the recovery point is the next
            # flush's: it is listed dirty (a flush syncs what is listed).
            for segment in log.segments:
                if segment.next_offset > max(rp, segment.base_offset):
                    assert segment in log._dirty
                    assert segment._unsynced  # fdatasynced even with its file closed
    store.flush_all()
    for log in logs:
        assert log.recovery_point == log.log_end_offset
        assert not log.has_unflushed()
    store.close()


# -- the broker's checkpoint (pluglog.broker.checkpoint) ----------------------


class HeldPool:
    """A thread pool whose jobs run at once, or, while ``hold``, when the
    test says (:meth:`run`): the test decides what the reactor does while a
    sync is in flight."""

    def __init__(self):
        self.hold = False
        self.jobs = []

    def callInThreadWithCallback(self, on_result, function, *args, **kwargs):  # noqa: N802
        job = (on_result, function, args, kwargs)
        if self.hold:
            self.jobs.append(job)
        else:
            self._call(job)

    def run(self):
        jobs, self.jobs = self.jobs, []
        for job in jobs:
            self._call(job)

    @staticmethod
    def _call(job):
        on_result, function, args, kwargs = job
        try:
            result = function(*args, **kwargs)
        except Exception:
            on_result(False, Failure())
        else:
            on_result(True, result)


class ThreadedClock(Clock):
    def __init__(self):
        super().__init__()
        self.pool = HeldPool()

    def getThreadPool(self):  # noqa: N802 - the reactor's name
        return self.pool

    def callFromThread(self, function, *args, **kwargs):  # noqa: N802
        function(*args, **kwargs)


def threaded_broker(tmp_path, partitions=3, mode="syncfs"):
    clock = ThreadedClock()
    clock.advance(1_000)
    broker = make_broker(tmp_path, clock, storage="segments", fsync="interval")
    broker.storage.syncfs_min_logs = 1 if mode == "syncfs" else 1000
    result_of(broker.create_topic("t", partitions, 1))
    clock.advance(0)
    parts = [broker.partition("t", i) for i in range(partitions)]
    for part in parts:
        part.append(make_batch(1), broker.now_ms(), acks=1)
    return broker, clock, parts


def checkpointed(broker, key):
    path = os.path.join(broker.storage.data_dirs[0], RECOVERY_POINT_CHECKPOINT)
    return read_checkpoint(path).get(key)


def test_the_checkpoint_syncs_in_the_pool_and_the_loop_serves_meanwhile(tmp_path, syncs, mode):
    broker, clock, parts = threaded_broker(tmp_path, mode=mode)
    clock.pool.hold = True
    syncs["fsync"].clear()
    syncs["syncfs"].clear()  # the topic creation's
    broker.checkpoint()
    assert broker.checkpointer.running and len(clock.pool.jobs) == 1
    assert syncs["syncfs"] == [] and segment_files(syncs["fsync"]) == []
    for part in parts:
        assert part.log.recovery_point == 0
        part.append(make_batch(1), broker.now_ms(), acks=1)  # served meanwhile
    clock.pool.run()  # the sync, then the rest of the checkpoint
    assert not broker.checkpointer.running
    if mode == "syncfs":
        assert syncs["syncfs"] == [broker.storage.data_dirs[0]]
        assert segment_files(syncs["fsync"]) == []
    else:
        assert syncs["syncfs"] == []
        assert set(segment_files(syncs["fsync"])) == first_segments(p.log for p in parts)
    for part in parts:
        # The log end when the sync was handed over, not the one now.
        assert part.log.recovery_point == 1 and part.log.log_end_offset == 2
        assert checkpointed(broker, ("t", part.log.partition)) == 1
        assert part.log.has_unflushed()
    clock.pool.hold = False
    broker.checkpoint()
    assert [part.log.recovery_point for part in parts] == [2, 2, 2]
    assert checkpointed(broker, ("t", 0)) == 2
    result_of(broker.stop())


def test_a_stop_while_the_sync_runs_leaves_the_flush_to_the_close(tmp_path, syncs, mode):
    broker, clock, parts = threaded_broker(tmp_path, mode=mode)
    clock.pool.hold = True
    broker.checkpoint()
    broker.checkpointer.stop()
    assert not broker.checkpointer.running
    assert all(part.log.has_unflushed() for part in parts)
    clock.pool.run()  # the sync ends after the stop: nothing moves
    assert [part.log.recovery_point for part in parts] == [0, 0, 0]
    broker.storage.flush_all()
    assert [part.log.recovery_point for part in parts] == [1, 1, 1]
    result_of(broker.stop())


def test_a_failed_sync_is_followed_by_the_flush_log_by_log(tmp_path, syncs, monkeypatch, mode):
    broker, clock, parts = threaded_broker(tmp_path, mode=mode)
    monkeypatch.setattr(background_flush, "syncfs", failing_syncfs)
    monkeypatch.setattr(background_flush, "sync_files", failing_files)
    monkeypatch.setattr(batchsync, "syncfs", failing_syncfs)
    syncs["fsync"].clear()
    broker.checkpoint()
    assert not broker.checkpointer.running
    assert set(segment_files(syncs["fsync"])) == {
        os.path.join(part.log.directory, "00000000000000000000.log") for part in parts
    }
    assert [part.log.recovery_point for part in parts] == [1, 1, 1]
    assert checkpointed(broker, ("t", 0)) == 1
    result_of(broker.stop())


def one_turn(broker):
    """The checkpoint's pending callLater(0) alone (Clock.advance would also
    run the calls it schedules, all in one go)."""
    call = broker.checkpointer._call
    assert call is not None and call.active()
    call.cancel()
    broker.checkpointer._step()


def test_with_many_logs_the_hand_over_and_the_return_spread_over_turns(
    tmp_path, syncs, monkeypatch
):
    monkeypatch.setattr(checkpoint, "SLICED_MIN_LOGS", 2)
    monkeypatch.setattr(checkpoint, "SLICE_SECONDS", 0.0)  # a step per turn
    broker, clock, parts = threaded_broker(tmp_path, partitions=4)
    clock.pool.hold = True
    broker.checkpoint()
    turns = 0
    while not clock.pool.jobs:
        # Each turn hands one more log over; the others still take appends.
        for part in parts:
            part.append(make_batch(1), broker.now_ms(), acks=1)
        one_turn(broker)
        turns += 1
        assert turns < 100
    assert turns >= len(parts)
    clock.pool.run()
    returned = 1
    while broker.checkpointer.running:
        one_turn(broker)
        returned += 1
        assert returned < 100
    assert returned >= len(parts)
    for part in parts:
        # Each log's recovery point is its own log end when it was handed over.
        assert 1 < part.log.recovery_point < part.log.log_end_offset
        assert checkpointed(broker, ("t", part.log.partition)) == part.log.recovery_point
    result_of(broker.stop())
