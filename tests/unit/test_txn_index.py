"""The per-segment aborted-transaction index (``.txnindex``) and its life with the log."""

import glob
import os

import pytest

from pluglog.storage.txnindex import ENTRY_SIZE, TxnIndex, carry_entries, read_entries
from tests.unit.test_group_coordinator import result_of
from tests.unit.test_txn_coordinator import _broker, _init, _produce, _settle

pytestmark = pytest.mark.unit


def test_file_appends_reloads_truncates_and_ignores_a_torn_tail(tmp_path):
    path = str(tmp_path / "00000000000000000000.txnindex")
    index = TxnIndex(path)
    assert index.entries == [] and not os.path.exists(path)
    index.append((7, 0, 5, 0))
    index.append((8, 2, 9, 2))
    index.append((8, 2, 9, 2))  # the same marker again: kept once
    index.flush()
    index.close()
    assert read_entries(path) == [(7, 0, 5, 0), (8, 2, 9, 2)]
    with open(path, "ab") as handle:
        handle.write(b"\x00" * (ENTRY_SIZE - 3))  # a crash mid-append
    again = TxnIndex(path)
    assert again.entries == [(7, 0, 5, 0), (8, 2, 9, 2)]
    again.append((9, 10, 12, 10))
    again.close()
    assert read_entries(path) == [(7, 0, 5, 0), (8, 2, 9, 2), (9, 10, 12, 10)]
    again = TxnIndex(path)
    again.truncate_to(9)
    assert read_entries(path) == [(7, 0, 5, 0)]
    again.truncate_to(0)
    assert not os.path.exists(path)
    carry_entries([path, str(tmp_path / "none")], path + ".cleaned")
    assert not os.path.exists(path + ".cleaned")


def _abort(broker, clock, tc, pid, epoch, seq):
    result_of(tc.add_partitions("t", pid, epoch, [("out", 0)]))
    _settle(clock)
    _produce(broker, pid, epoch, seq)
    d = tc.end_txn("t", pid, epoch, False)
    _settle(clock)
    assert result_of(d) == 0


def test_aborts_are_indexed_in_the_markers_segment_and_reloaded_from_it(tmp_path):
    broker, clock, tc = _broker(tmp_path)
    _code, pid, epoch = _init(tc, clock)
    _abort(broker, clock, tc, pid, epoch, 0)
    part = broker.partition("out", 0)
    files = glob.glob(os.path.join(part.log.directory, "*.txnindex"))
    assert [read_entries(f) for f in files] == [[(pid, 0, 1, 2)]]
    # A snapshot after the abort leaves the index to the log: a reload
    # from it (no header before the snapshot is read) still knows the abort.
    part.snapshot_producers()
    part._reset_producers()
    assert part.aborted_transactions(0, 10) == [{"producer_id": pid, "first_offset": 0}]


def test_retention_takes_the_index_with_its_segment(tmp_path):
    broker, clock, tc = _broker(tmp_path)
    _code, pid, epoch = _init(tc, clock)
    _abort(broker, clock, tc, pid, epoch, 0)
    part = broker.partition("out", 0)
    part.log.roll(broker.now_ms())
    _produce(broker, 99, 0, 0, txn=False)
    assert part.log.aborted_txns() == [(pid, 0, 1, 2)]
    assert part.log.delete_oldest_segments(1) == 1
    assert part.log.aborted_txns() == []
