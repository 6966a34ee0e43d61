"""Partition roles without sockets: HW over the ISR, acks=all waits, ISR changes,
follower appends that keep offsets and epochs, the leader-epoch cache and truncation."""

import pytest
from twisted.internet.task import Clock

from pluglog.broker.partition import Partition
from pluglog.config import TopicConfig
from pluglog.errors import (
    NONE,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
    CorruptRecordError,
    KafkaStorageError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceError,
)
from pluglog.protocol.records import Record, build_batch
from pluglog.replication.epochs import UNDEFINED, LeaderEpochCache
from pluglog.storage import SegmentLogStorage
from pluglog.storage.memory import MemoryLogStorage
from pluglog.storage.offline import OfflineLog
from pluglog.storage.records import parse_header
from tests.unit.test_storage_segments import make_batch


def leader(node=1, replicas=(1, 2, 3), isr=(1, 2, 3), epoch=5, min_isr=2, storage=None):
    storage = storage or MemoryLogStorage()
    config = TopicConfig(min_insync_replicas=min_isr)
    part = Partition("t", 0, storage.open_log("t", 0, config), config, node_id=node)
    part.become_leader(epoch, replicas, isr, now_ms=0)
    return part


def result(d):
    out = []
    d.addBoth(out.append)
    assert out, "Deferred has not fired"
    return out[0]


def test_hw_is_the_smallest_leo_over_the_isr():
    part = leader()
    part.append(make_batch(3), 0, acks=1)
    part.append(make_batch(2), 0, acks=1)
    assert part.log.log_end_offset == 5
    assert part.high_watermark == 0  # followers have reported nothing yet
    part.update_follower(2, 5, now_ms=10)
    assert part.high_watermark == 0
    part.update_follower(3, 3, now_ms=10)
    assert part.high_watermark == 3
    part.update_follower(3, 5, now_ms=11)
    assert part.high_watermark == 5


def test_acks_all_waits_for_the_isr_and_times_out():
    clock = Clock()
    part = leader()
    info = part.append(make_batch(2), 0, acks=-1)
    waited = part.wait_for_hw(info.last_offset + 1, 1.0, clock)
    assert not waited.called
    part.update_follower(2, 2, 0)
    assert not waited.called
    part.update_follower(3, 2, 0)
    assert result(waited) == NONE
    info = part.append(make_batch(1), 0, acks=-1)
    late = part.wait_for_hw(info.last_offset + 1, 1.0, clock)
    clock.advance(1.0)
    assert result(late) == REQUEST_TIMED_OUT
    assert clock.getDelayedCalls() == []


def test_min_insync_refuses_before_append_and_reports_after():
    part = leader(isr=(1,), min_isr=2)
    with pytest.raises(NotEnoughReplicasError):
        part.append(make_batch(1), 0, acks=-1)
    assert part.log.log_end_offset == 0  # nothing appended
    part.append(make_batch(1), 0, acks=1)  # acks=1 is not held to min.insync.replicas
    assert part.high_watermark == 1  # alone in the ISR: HW follows the LEO

    part = leader(isr=(1, 2), min_isr=2)
    info = part.append(make_batch(1), 0, acks=-1)
    waited = part.wait_for_hw(info.last_offset + 1, 5.0, Clock())
    part.isr_changed((1,))  # follower 2 dropped out while we waited
    assert result(waited) == NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_losing_leadership_fails_waits_and_refuses_appends():
    clock = Clock()
    part = leader()
    info = part.append(make_batch(1), 0, acks=-1)
    waited = part.wait_for_hw(info.last_offset + 1, 5.0, clock)
    part.become_follower(2, 6, (1, 2, 3), (2, 3))
    assert result(waited) == NOT_LEADER_OR_FOLLOWER
    assert clock.getDelayedCalls() == []
    with pytest.raises(NotLeaderOrFollowerError):
        part.append(make_batch(1), 0, acks=1)
    part = leader()
    part.go_offline()
    with pytest.raises(NotLeaderOrFollowerError):
        part.append(make_batch(1), 0, acks=1)


def test_isr_expands_when_a_follower_catches_up_and_shrinks_when_it_lags():
    writes = []
    part = leader(isr=(1, 2))
    part.isr_writer = lambda p, isr: writes.append(isr)
    part.append(make_batch(4), 0, acks=1)
    part.update_follower(3, 2, now_ms=100)  # behind the HW? HW is 0 until 2 reports
    assert writes == [(1, 2, 3)]  # at the HW (0) and past the epoch start (0)
    part.isr_changed((1, 2, 3))
    part.update_follower(2, 4, now_ms=200)
    part.update_follower(3, 4, now_ms=200)
    assert part.high_watermark == 4
    part.append(make_batch(1), 300, acks=1)
    part.update_follower(2, 5, now_ms=400)
    assert part.lagging_followers(now_ms=30_350, lag_ms=30_000) == [3]
    assert part.lagging_followers(now_ms=30_150, lag_ms=30_000) == []


def test_follower_appends_keep_offsets_and_epochs_and_follow_the_hw():
    source = leader(isr=(1,), epoch=7)
    source.append(make_batch(3), 0, acks=1)
    source.append(make_batch(2), 0, acks=1)
    fetched = source.log.read(0, 1 << 20).records
    follower = leader(node=2)
    follower.become_follower(1, 7, (1, 2, 3), (1, 2, 3))
    follower.append_replicated(fetched, leader_hw=4, now_ms=0)
    assert follower.log.log_end_offset == 5
    assert follower.high_watermark == 4
    assert follower.log.read(0, 1 << 20).records == fetched  # byte for byte
    assert follower.epochs.entries == [(7, 0)]  # epoch 5 never wrote a batch here
    assert parse_header(fetched).partition_leader_epoch == 7
    with pytest.raises(CorruptRecordError):
        bad = bytearray(fetched)
        bad[-1] ^= 0xFF
        follower.append_replicated(bytes(bad), leader_hw=5, now_ms=0)


def test_epoch_cache_end_offsets_and_file(tmp_path):
    path = str(tmp_path / "leader-epoch-checkpoint")
    cache = LeaderEpochCache(path)
    assert cache.end_offset_for(3, 100) == (UNDEFINED, UNDEFINED)
    cache.assign(1, 0)
    cache.assign(3, 40)
    cache.assign(4, 90)
    assert cache.end_offset_for(4, 120) == (4, 120)
    assert cache.end_offset_for(3, 120) == (3, 90)
    assert cache.end_offset_for(2, 120) == (1, 40)
    assert cache.end_offset_for(0, 120) == (UNDEFINED, UNDEFINED)
    assert LeaderEpochCache(path).entries == [(1, 0), (3, 40), (4, 90)]
    assert open(path).read().splitlines()[:2] == ["0", "3"]
    cache.truncate_from_end(60)
    assert LeaderEpochCache(path).entries == [(1, 0), (3, 40)]


def test_epoch_for_offset_is_kafkas_epoch_for_offset():
    # ListOffsets LATEST_TIERED (-5) answers the epoch of the last uploaded
    # offset: the last entry starting at or before it, none before the first.
    cache = LeaderEpochCache(None)
    assert cache.epoch_for_offset(0) is None
    cache.assign(1, 10)
    cache.assign(3, 40)
    assert cache.epoch_for_offset(-1) is None
    assert cache.epoch_for_offset(9) is None
    assert cache.epoch_for_offset(10) == 1
    assert cache.epoch_for_offset(39) == 1
    assert cache.epoch_for_offset(40) == 3
    assert cache.epoch_for_offset(10**6) == 3


def test_divergent_follower_truncates_to_the_leaders_epoch_end(tmp_path):
    # The old leader wrote 3 records in epoch 1 that no follower got; the new
    # leader (epoch 2) wrote 2 others. The old leader, now a follower, must cut
    # its epoch-1 tail where epoch 2 begins on the new leader.
    storage = SegmentLogStorage(str(tmp_path))
    old = leader(node=1, epoch=1, isr=(1,), storage=storage)
    old.append(make_batch(2), 0, acks=1)  # offsets 0-1, replicated
    new = leader(node=2, epoch=1, isr=(2,))
    new.become_follower(1, 1, (1, 2), (1, 2))
    new.append_replicated(old.log.read(0, 1 << 20).records.read(), leader_hw=2, now_ms=0)
    old.append(make_batch(3), 0, acks=1)  # offsets 2-4, lost with the old leader
    new.become_leader(2, (1, 2), (2,), now_ms=0)
    new.append(make_batch(2), 0, acks=1)  # offsets 2-3 in epoch 2
    epoch, end = new.epochs.end_offset_for(old.epochs.latest_epoch(), new.log.log_end_offset)
    assert (epoch, end) == (1, 2)
    old.become_follower(2, 2, (1, 2), (2,))
    old.truncate_to(min(end, old.log.log_end_offset))
    assert old.log.log_end_offset == 2
    old.append_replicated(new.log.read(2, 1 << 20).records, leader_hw=4, now_ms=0)
    assert old.log.read(0, 1 << 20).records.read() == new.log.read(0, 1 << 20).records
    assert old.epochs.entries == [(1, 0), (2, 2)]
    storage.close()


def test_producer_id_ranges_of_brokers_never_meet(tmp_path):
    from pluglog.broker.producer_ids import ProducerIdAllocator

    single = ProducerIdAllocator(str(tmp_path / "a"))
    assert [single.allocate() for _ in range(3)] == [0, 1, 2]
    two = ProducerIdAllocator(str(tmp_path / "b"), block_size=10, broker_id=2)
    three = ProducerIdAllocator(str(tmp_path / "c"), block_size=10, broker_id=3)
    ids2 = [two.allocate() for _ in range(25)]
    assert ids2[0] == 2 << 32 and ids2 == list(range(2 << 32, (2 << 32) + 25))
    assert three.allocate() == 3 << 32
    # A restart resumes past the persisted block end, still in its own range.
    again = ProducerIdAllocator(str(tmp_path / "b"), block_size=10, broker_id=2)
    assert again.allocate() == (2 << 32) + 30


def test_offline_log_answers_storage_error_before_checking_sequences():
    # A failed log dir swaps the partition's log for an OfflineLog
    # (pluglog.broker.log_dirs). Every later batch must get
    # KAFKA_STORAGE_ERROR, never OUT_OF_ORDER_SEQUENCE_NUMBER: the batch after
    # one refused here has a sequence gap, and librdkafka answers that error
    # by bumping its epoch and renumbering every unacknowledged batch, those
    # the new leader already holds too (test_jbod_cluster stored two twice).
    def idempotent(seq):
        return build_batch(
            [Record(b"k", b"v")], producer_id=7, producer_epoch=0, base_sequence=seq
        )

    part = leader(isr=(1,))
    part.append(idempotent(0), 0, acks=1)
    with pytest.raises(OutOfOrderSequenceError):
        part.append(idempotent(2), 0, acks=1)  # the check this test is about
    part.log = OfflineLog("t", 0, "log dir /d failed")
    part.log_offline = True
    with pytest.raises(KafkaStorageError):
        part.append(idempotent(1), 0, acks=1)
    with pytest.raises(KafkaStorageError, match="offline: log dir /d failed"):
        part.append(idempotent(2), 0, acks=1)  # after the refused 1: a gap
