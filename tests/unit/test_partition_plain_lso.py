"""A partition that only ever held plain batches answers the LSO and
read_committed questions without loading producer state (no header scan,
no snapshot), with the same answers a loaded partition gives."""

import glob
import os

import pytest

from pluglog.broker.partition import Partition
from pluglog.protocol.records import Record, build_batch
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
