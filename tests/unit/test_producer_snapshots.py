"""Producer-state snapshots: the periodic checkpoint's are not fsynced, a clean
stop's are, and one an OS crash left empty is dropped on load (issue 24)."""

import os

import pytest

from pluglog.broker import partition_txns
from tests.unit.test_txn_coordinator import _broker, _init, _produce, _settle
from tests.unit.test_txn_index import _abort

pytestmark = pytest.mark.unit


def _record_syncs(monkeypatch):
    calls = []
    real = partition_txns.atomic_write

    def recorded(path, data, sync=True):
        calls.append(sync)
        return real(path, data, sync)

    monkeypatch.setattr(partition_txns, "atomic_write", recorded)
    return calls


def test_checkpoint_snapshots_skip_fsync_and_a_clean_stop_syncs(tmp_path, monkeypatch):
    broker, clock, tc = _broker(tmp_path)
    _code, pid, epoch = _init(tc, clock)
    _abort(broker, clock, tc, pid, epoch, 0)
    calls = _record_syncs(monkeypatch)
    fsyncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    part = broker.partition("out", 0)
    part.snapshot_producers(sync=False)
    assert fsyncs == []  # not even the directory
    assert any(name.endswith(".snapshot") for name in os.listdir(part.log.directory))
    _produce(broker, 99, 0, 0, txn=False)
    broker.checkpoint()
    assert calls and not any(calls), calls
    _produce(broker, 99, 0, 1, txn=False)
    del calls[:]
    broker._snapshot_producers()  # what a clean stop runs
    assert calls and all(calls), calls


def test_an_empty_newest_snapshot_is_dropped_and_the_state_reloaded(tmp_path):
    broker, clock, tc = _broker(tmp_path)
    _code, pid, epoch = _init(tc, clock)
    _abort(broker, clock, tc, pid, epoch, 0)
    part = broker.partition("out", 0)
    part.snapshot_producers()
    _produce(broker, 99, 0, 0, txn=False)
    _settle(clock)
    # What an OS crash may leave of a snapshot written without fsync.
    torn = os.path.join(part.log.directory, f"{part.log.log_end_offset:020d}.snapshot")
    open(torn, "wb").close()
    part._reset_producers()
    assert part.aborted_transactions(0, 10) == [{"producer_id": pid, "first_offset": 0}]
    assert part.producers.epoch_of(99) == 0  # read from the log after the older snapshot
    assert not os.path.exists(torn)


def test_the_checkpoint_unlinks_older_snapshots_in_a_thread(tmp_path):
    broker, clock, tc = _broker(tmp_path)
    _code, pid, epoch = _init(tc, clock)
    _abort(broker, clock, tc, pid, epoch, 0)
    part = broker.partition("out", 0)
    jobs = []
    # The broker's reactor runs the job in its thread pool; here it is held.
    clock.callInThread = lambda function, *args: jobs.append((function, args))
    for seq in range(3):
        _produce(broker, 99, 0, seq, txn=False)
        broker.checkpoint()

    def names():
        return sorted(n for n in os.listdir(part.log.directory) if n.endswith(".snapshot"))

    assert len(names()) == 3  # nothing unlinked on the event loop
    assert len(jobs) == 1  # the third checkpoint retired the first snapshot
    function, (paths,) = jobs[0]
    newest = names()[-1]
    assert [os.path.basename(p) for p in paths] == names()[:1]
    function(paths)
    assert names()[-1] == newest and len(names()) == 2
    _produce(broker, 99, 0, 3, txn=False)
    broker._snapshot_producers()  # a clean stop's: unlinked at once
    assert len(names()) == 2 and len(jobs) == 1


def _snapshots(part):
    return sorted(n for n in os.listdir(part.log.directory) if n.endswith(".snapshot"))


def test_a_truncation_drops_the_snapshots_past_the_new_log_end(tmp_path):
    # Kafka's truncateAndReload. Kept, the snapshot at 3 would be read once
    # the new history grew past offset 3, with producer 99 at sequence 2.
    broker, _clock, _tc = _broker(tmp_path)
    part = broker.partition("out", 0)
    for seq in range(3):
        _produce(broker, 99, 0, seq, txn=False)
    part.snapshot_producers()
    assert _snapshots(part) == [f"{3:020d}.snapshot"]
    part.truncate_to(1)  # a follower's truncation: sequence 0 stays
    assert _snapshots(part) == []
    for seq in range(3):
        _produce(broker, 7, 0, seq, txn=False)  # the leader's history
    part._reset_producers()
    part._ensure_loaded()  # what a restart loads: the snapshot, then the log after it
    assert part.producers.check(99, 0, 1, 1) is None  # next in sequence
    assert part.producers.check(7, 0, 2, 2) is not None  # a duplicate


def test_a_restart_at_the_leaders_log_start_drops_every_snapshot(tmp_path):
    broker, _clock, _tc = _broker(tmp_path)
    part = broker.partition("out", 0)
    _produce(broker, 99, 0, 0, txn=False)
    part.snapshot_producers()
    assert _snapshots(part)
    part.restart_at(100)
    assert _snapshots(part) == []
