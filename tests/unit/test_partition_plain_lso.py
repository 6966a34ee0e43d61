"""A partition that only ever held plain batches answers the LSO and
read_committed questions without loading producer state (no header scan,
no snapshot), with the same answers a loaded partition gives."""

import glob
import os

import pytest

from pluglog.broker.partition import Partition
from pluglog.config import TopicConfig
from pluglog.protocol.records import Record, build_batch
from pluglog.storage import SegmentLogStorage
from tests.unit.test_txn_coordinator import _broker, _init, _produce, _settle

pytestmark = pytest.mark.unit


def _plain(part, now_ms, n=3):
    for i in range(n):
        part.append(build_batch([Record(None, b"v%d" % i, (), 0)]), now_ms)


def _snapshots(part):
    return glob.glob(os.path.join(part.log.directory, "*.snapshot"))


def test_plain_partition_answers_like_a_loaded_one_and_writes_no_snapshot(tmp_path):
    broker, _clock, _tc = _broker(tmp_path)
    plain, loaded = broker.partition("out", 0), broker.partition("out", 1)
    _plain(plain, broker.now_ms())
    _plain(loaded, broker.now_ms())
    loaded._ensure_loaded()  # the general path: a header scan
    assert plain.last_stable_offset == loaded.last_stable_offset == 3
    assert plain.aborted_transactions(0, 3) == loaded.aborted_transactions(0, 3) == []
    assert not plain.has_transactions
    broker.checkpoint()
    assert _snapshots(plain) == []  # nothing to remember: no file, no fsync
    assert len(_snapshots(loaded)) == 1


def test_a_transaction_after_plain_batches_is_seen(tmp_path):
    broker, clock, tc = _broker(tmp_path)
    part = broker.partition("out", 0)
    _plain(part, broker.now_ms())
    assert part.last_stable_offset == 3
    _code, pid, epoch = _init(tc, clock)
    tc.add_partitions("t", pid, epoch, [("out", 0)])
    _settle(clock)
    _produce(broker, pid, epoch, 0)  # an open transaction from offset 3
    assert part.high_watermark == 4 and part.last_stable_offset == 3
    # Truncated back to the plain batches: reloaded from the log, not assumed plain.
    part.truncate_to(3)
    assert part.last_stable_offset == 3 and part.high_watermark == 3


def test_a_reopened_log_with_data_is_loaded(tmp_path):
    broker, clock, tc = _broker(tmp_path)
    _code, pid, epoch = _init(tc, clock)
    tc.add_partitions("t", pid, epoch, [("out", 0)])
    _settle(clock)
    _produce(broker, pid, epoch, 0)
    old = broker.partition("out", 0)
    # As after a restart: a Partition over a log that is not empty loads its state.
    part = Partition(old.topic, old.index, old.log, old.config)
    assert part.high_watermark == 1 and part.last_stable_offset == 0


def _follower(storage, key=("r", 0)):
    config = TopicConfig()
    part = Partition(key[0], key[1], storage.open_log(key[0], key[1], config), config, node_id=2)
    part.become_follower(1, 3, (1, 2), (1, 2))
    return part


def _batch(base, pid=-1, seq=-1, txn=False):
    return build_batch(
        [Record(None, b"v", (), 0)],
        base_offset=base,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        is_transactional=txn,
        partition_leader_epoch=3,
    )


def test_a_follower_of_plain_batches_loads_no_state_and_snapshots_nothing(tmp_path):
    storage = SegmentLogStorage(str(tmp_path))
    part = _follower(storage)
    part.append_replicated(_batch(0) + _batch(1), leader_hw=2, now_ms=0)
    assert not part._producers_loaded
    part.snapshot_producers(sync=False)
    assert _snapshots(part) == []
    assert part.last_stable_offset == 2 and part.aborted_transactions(0, 2) == []


def test_a_followers_first_producer_batch_gives_the_state_a_load_would(tmp_path):
    storage = SegmentLogStorage(str(tmp_path))
    part = _follower(storage)
    part.append_replicated(_batch(0), leader_hw=1, now_ms=0)
    # A stale snapshot past the log end (another history) must not survive.
    stale = os.path.join(part.log.directory, f"{5:020d}.snapshot")
    open(stale, "wb").close()
    part.append_replicated(
        _batch(1, pid=7, seq=0) + _batch(2, pid=8, seq=0, txn=True), leader_hw=3, now_ms=0
    )
    assert part._producers_loaded
    assert not os.path.exists(stale)
    # The same as a partition that reads the whole log back (a restart).
    loaded = Partition(part.topic, part.index, part.log, part.config, node_id=2)
    loaded._ensure_loaded()
    assert part.producers.dump() == loaded.producers.dump()
    assert part.txns.ongoing == loaded.txns.ongoing == {8: 2}
    assert part.last_stable_offset == 2
    part.snapshot_producers(sync=False)
    assert [os.path.basename(p) for p in _snapshots(part)] == [f"{3:020d}.snapshot"]


def test_an_answer_without_records_moves_the_hw_and_reads_nothing(tmp_path):
    storage = SegmentLogStorage(str(tmp_path))
    part = _follower(storage)
    part.append_replicated(_batch(0, pid=7, seq=0), leader_hw=0, now_ms=0)
    # As after a restart: a log with data, its state not loaded yet.
    again = Partition(part.topic, part.index, part.log, part.config, node_id=2)
    again.become_follower(1, 3, (1, 2), (1, 2))
    again.append_replicated(b"", leader_hw=1, now_ms=0)
    assert again.high_watermark == 1
    assert not again._producers_loaded  # loaded with the first batch, not before
    again.append_replicated(_batch(1, pid=7, seq=1), leader_hw=2, now_ms=0)
    assert again._producers_loaded
    assert again.producers.check(7, 0, 1, 1) is not None  # seq 1 is a duplicate now
