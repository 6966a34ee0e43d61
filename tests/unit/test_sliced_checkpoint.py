"""The broker's checkpoint over reactor turns (issue 24, pluglog.broker.checkpoint):
leader-epoch files written before the flush, a few per turn, then one flush
that syncs them before any recovery point moves; producer snapshots taken in
the flush's turn and written over the next ones, skipped where a partition
was truncated or deleted meanwhile."""

import os

import pytest
from twisted.internet.task import Clock

from pluglog.broker import checkpoint
from pluglog.protocol.records import Record, build_batch
from pluglog.storage import epochs as epochs_module
from pluglog.storage.epochs import FILE_NAME, LeaderEpochCache
from pluglog.storage.manager import SegmentLogStorage
from tests.unit.test_group_coordinator import make_broker, result_of
from tests.unit.test_storage_segments import make_batch

pytestmark = pytest.mark.unit


@pytest.fixture
def sliced(monkeypatch):
    # Every checkpoint of 2+ logs spreads, one step per turn.
    monkeypatch.setattr(checkpoint, "SLICED_MIN_LOGS", 2)
    monkeypatch.setattr(checkpoint, "SLICE_SECONDS", 0.0)


def _broker(tmp_path, partitions=6):
    clock = Clock()
    clock.advance(1_000)
    broker = make_broker(tmp_path, clock, storage="segments", fsync="interval")
    result_of(broker.create_topic("t", partitions, 1))
    clock.advance(0)
    return broker, clock, [broker.partition("t", i) for i in range(partitions)]


def _batch(pid=-1, seq=-1):
    return build_batch(
        [Record(None, b"v", (), 0)],
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
    )


def _epoch_file(part):
    return os.path.join(part.log.directory, FILE_NAME)


def _run(broker, clock, between=None):
    """Turn the reactor until the checkpoint is done; ``between(turn)`` runs
    after each turn. Returns the number of turns."""
    turns = 0
    checkpointer = broker.checkpointer
    while checkpointer.running:
        # One reactor turn: the pending callLater(0) alone (Clock.advance
        # would also run the calls it schedules, all in one go).
        call = checkpointer._call
        assert call is not None and call.active() and call.getTime() <= clock.seconds()
        call.cancel()
        checkpointer._step()
        turns += 1
        if between is not None:
            between(turns)
        assert turns < 1000
    return turns


def _watch_flush(broker, monkeypatch, seen):
    real = broker.storage.flush_all

    def flush_all():
        seen.append("flush")
        real()

    monkeypatch.setattr(broker.storage, "flush_all", flush_all)


def test_epoch_files_are_written_over_turns_and_synced_before_the_recovery_points_move(
    tmp_path, sliced, monkeypatch
):
    broker, clock, parts = _broker(tmp_path)
    for part in parts:
        part.append(_batch(), broker.now_ms(), acks=1)
    seen = []
    _watch_flush(broker, monkeypatch, seen)
    synced = []
    real_fsync = LeaderEpochCache.fsync
    monkeypatch.setattr(
        LeaderEpochCache, "fsync", lambda self: (synced.append(self.path), real_fsync(self))[1]
    )
    broker.checkpoint()
    assert broker.checkpointer.running  # the first turn did one log's writes
    written = []

    def between(_turn):
        if not seen:
            written.append(sum(os.path.exists(_epoch_file(p)) for p in parts))
            assert all(p.log.recovery_point == 0 for p in parts)

    turns = _run(broker, clock, between)
    assert turns >= len(parts)
    assert written == sorted(written) and written[-1] == len(parts)  # before the flush
    assert seen == ["flush"]
    # Fewer logs than syncfs_min_logs: flushed log by log, each epoch file
    # written earlier without a sync is fsynced by that flush.
    assert set(synced) >= {_epoch_file(p) for p in parts}
    for part in parts:
        assert part.log.recovery_point == 1
        assert LeaderEpochCache(_epoch_file(part)).entries == part.epochs.entries


def test_a_truncation_or_a_deletion_during_the_preparation_is_respected(
    tmp_path, sliced, monkeypatch
):
    broker, clock, parts = _broker(tmp_path)
    for part in parts:
        part.append(_batch(), broker.now_ms(), acks=1)
        part.append(_batch(), broker.now_ms(), acks=1)
    broker.checkpoint()
    cut, gone = parts[-1], parts[-2]
    gone_dir = gone.log.directory

    def between(turn):
        if turn == 1:
            cut.truncate_to(0)  # written and synced at once; not undone later
            broker._drop_partition(("t", gone.index))

    _run(broker, clock, between)
    assert cut.log.log_end_offset == 0 and cut.log.recovery_point == 0
    assert LeaderEpochCache(_epoch_file(cut)).entries == cut.epochs.entries == []
    assert not os.path.exists(gone_dir)  # nothing written into a deleted log
    for part in parts[:-2]:
        assert part.log.recovery_point == 2


def test_an_epoch_file_written_unsynced_is_synced_before_a_checkpoint_without_a_flush(
    tmp_path, monkeypatch
):
    # A checkpoint written after a truncation elsewhere (no flush first)
    # must not name a recovery point past an epoch that is not on disk.
    store = SegmentLogStorage(str(tmp_path))
    log = store.open_log("t", 0)
    log.append(make_batch(2), now_ms=0)
    log.leader_epochs.assign(3, 0)
    log.flush()  # the recovery point passes offset 0
    log.leader_epochs.assign(4, 2)
    log.write_unsynced()  # a checkpoint's preparation: written, not synced
    calls = []
    real = epochs_module.atomic_write
    monkeypatch.setattr(
        epochs_module,
        "atomic_write",
        lambda path, data, sync=True: (calls.append(sync), real(path, data, sync))[1],
    )
    store.write_checkpoints()
    assert calls == [True]
    calls.clear()
    store.write_checkpoints()
    assert calls == []  # synced once is enough


def _snapshots(part):
    return sorted(n for n in os.listdir(part.log.directory) if n.endswith(".snapshot"))


def test_snapshots_are_taken_at_the_flush_and_written_over_the_next_turns(
    tmp_path, sliced, monkeypatch
):
    broker, clock, parts = _broker(tmp_path, partitions=5)
    for i, part in enumerate(parts):
        part.append(_batch(pid=100 + i, seq=0), broker.now_ms(), acks=1)
    seen = []
    _watch_flush(broker, monkeypatch, seen)
    broker.checkpoint()
    changed = {}

    def between(_turn):
        if not seen or changed:
            return
        # The turn after the flush: of the snapshots not written yet, one
        # partition grows and one is truncated before theirs are written.
        waiting = [p for p in parts if not _snapshots(p)]
        assert len(waiting) >= 2
        changed["grown"], changed["cut"] = waiting[0], waiting[1]
        waiting[0].append(_batch(pid=200, seq=0), broker.now_ms(), acks=1)
        waiting[1].truncate_to(0)

    _run(broker, clock, between)
    grown, cut = changed["grown"], changed["cut"]
    # The state as of the flush (offset 1, synced), not the grown log end.
    assert _snapshots(grown) == [f"{1:020d}.snapshot"]
    assert _snapshots(cut) == []
    for part in parts:
        if part not in (grown, cut):
            assert _snapshots(part) == [f"{1:020d}.snapshot"]
    assert grown.log.log_end_offset == 2


def test_a_checkpoint_due_while_one_runs_is_skipped_and_a_stop_abandons_it(
    tmp_path, sliced, monkeypatch
):
    broker, clock, parts = _broker(tmp_path)
    for part in parts:
        part.append(_batch(), broker.now_ms(), acks=1)
    seen = []
    _watch_flush(broker, monkeypatch, seen)
    broker.checkpoint()
    broker.checkpoint()  # skipped: one at a time
    _run(broker, clock)
    assert seen == ["flush"]
    for part in parts:
        part.append(_batch(), broker.now_ms(), acks=1)
    broker.checkpoint()
    assert broker.checkpointer.running
    broker.checkpointer.stop()
    assert not broker.checkpointer.running
    clock.advance(0)
    assert seen == ["flush"]  # nothing ran after the stop


def test_few_logs_checkpoint_in_the_calling_turn(tmp_path):
    broker, _clock, parts = _broker(tmp_path, partitions=2)
    parts[0].append(_batch(pid=7, seq=0), broker.now_ms(), acks=1)
    broker.checkpoint()
    assert not broker.checkpointer.running
    assert parts[0].log.recovery_point == 1
    assert _snapshots(parts[0]) == [f"{1:020d}.snapshot"]
