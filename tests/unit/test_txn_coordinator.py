"""The transaction coordinator in process: states, fencing, markers, timeouts, restart."""

import pytest
from twisted.internet.task import Clock

from pluglog import errors
from pluglog.group import GroupCoordinator
from pluglog.protocol.control import COMMIT, marker_batch, markers_in
from pluglog.protocol.records import Record, build_batch
from pluglog.txn.model import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    ONGOING,
    TxnMetadata,
    parse_key,
    parse_value,
    txn_key,
    txn_value,
)
from tests.unit.test_group_coordinator import make_broker, result_of

pytestmark = pytest.mark.unit


def _broker(tmp_path, **settings):
    clock = Clock()
    broker = make_broker(
        tmp_path,
        clock,
        storage="segments",
        transaction_state_log_num_partitions=2,
        transaction_abort_timed_out_transaction_cleanup_interval_ms=1000,
        **settings,
    )
    result_of(broker.create_topic("out", 2, 1))
    clock.advance(0)
    tc = broker.txn_coordinator
    result_of(tc.store.ensure_topic())
    clock.advance(0)
    return broker, clock, tc


def _settle(clock, seconds=1.0, steps=20):
    for _ in range(steps):
        clock.advance(seconds / steps)


def _produce(broker, pid, epoch, seq, partition=0, values=(b"v",), txn=True):
    batch = build_batch(
        [Record(None, v, (), 0) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )
    return broker.partition("out", partition).append(batch, broker.now_ms())


def _init(tc, clock, txn_id="t", timeout=60000, **kw):
    d = tc.init_producer_id(txn_id, timeout, **kw)
    _settle(clock)
    return result_of(d)


def test_log_records_round_trip():
    meta = TxnMetadata("tid", 7, 3, 60000, 5)
    meta.state = ONGOING
    meta.partitions = {("a", 1), ("a", 0), ("b", 2)}
    meta.start_ms = 4
    back = parse_value(parse_key(txn_key("tid")), txn_value(meta))
    assert (back.producer_id, back.producer_epoch, back.state) == (7, 3, ONGOING)
    assert back.partitions == meta.partitions and back.start_ms == 4


def test_commit_writes_markers_and_publishes(tmp_path):
    broker, clock, tc = _broker(tmp_path)
    code, pid, epoch = _init(tc, clock)
    assert (code, epoch) == (errors.NONE, 0)
    codes = tc.add_partitions("t", pid, epoch, [("out", 0), ("out", 1)])
    _settle(clock)
    assert set(result_of(codes).values()) == {errors.NONE}
    _produce(broker, pid, epoch, 0)
    part = broker.partition("out", 0)
    assert part.last_stable_offset == 0 and part.high_watermark == 1
    d = tc.end_txn("t", pid, epoch, True)
    _settle(clock)
    assert result_of(d) == errors.NONE
    assert tc.txns["t"].state == COMPLETE_COMMIT
    assert part.last_stable_offset == part.high_watermark == 2
    data = part.log.read(0, 1 << 20).records
    data = data if isinstance(data, bytes) else data.read()
    assert [(m[0], m[3]) for m in markers_in(data)] == [(1, COMMIT)]


def test_abort_then_next_transaction(tmp_path):
    broker, clock, tc = _broker(tmp_path)
    _code, pid, epoch = _init(tc, clock)
    result_of(tc.add_partitions("t", pid, epoch, [("out", 0)]))
    _settle(clock)
    _produce(broker, pid, epoch, 0)
    d = tc.end_txn("t", pid, epoch, False)
    _settle(clock)
    assert result_of(d) == errors.NONE
    assert tc.txns["t"].state == COMPLETE_ABORT
    part = broker.partition("out", 0)
    assert part.aborted_transactions(0, 10) == [{"producer_id": pid, "first_offset": 0}]
    d = tc.add_partitions("t", pid, epoch, [("out", 1)])
    _settle(clock)
    assert result_of(d) == {("out", 1): errors.NONE}
    assert tc.txns["t"].state == ONGOING


def test_clients_may_not_write_markers_or_unsequenced_batches(tmp_path):
    # The storage stores the broker's own markers and transactional offset
    # commits; refusing them from clients is the partition's job.
    broker, _clock, _tc = _broker(tmp_path)
    part = broker.partition("out", 0)
    marker = marker_batch(5, 0, True, 0, 0)
    with pytest.raises(errors.InvalidRecordError, match="control"):
        part.append(marker, 0)
    with pytest.raises(errors.InvalidRecordError, match="base sequence"):
        _produce(broker, 5, 0, -1)
    assert part.log.log_end_offset == 0


def test_open_transaction_is_aborted_after_its_timeout_with_a_bumped_epoch(tmp_path):
    broker, clock, tc = _broker(tmp_path)
    _code, pid, epoch = _init(tc, clock, timeout=5000)
    result_of(tc.add_partitions("t", pid, epoch, [("out", 0)]))
    _settle(clock)
    _produce(broker, pid, epoch, 0)
    part = broker.partition("out", 0)
    assert part.last_stable_offset == 0
    _settle(clock, 4.0, 8)
    assert tc.txns["t"].state == ONGOING
    _settle(clock, 3.0, 12)
    meta = tc.txns["t"]
    assert (meta.state, meta.producer_epoch) == (COMPLETE_ABORT, epoch + 1)
    assert part.last_stable_offset == part.high_watermark == 2
    # The old producer is fenced at the partition and at the coordinator.
    with pytest.raises(errors.InvalidProducerEpochError):
        _produce(broker, pid, epoch, 1)
    d = tc.end_txn("t", pid, epoch, True)
    assert result_of(d) == errors.PRODUCER_FENCED


def test_kip360_bump_retry_and_fencing(tmp_path):
    _broker_, clock, tc = _broker(tmp_path)
    _code, pid, epoch = _init(tc, clock)
    code, pid2, epoch2 = _init(tc, clock, expected_pid=pid, expected_epoch=epoch)
    assert (code, pid2, epoch2) == (errors.NONE, pid, epoch + 1)
    # The same bump retried (its answer was lost) gets the same answer.
    retried = _init(tc, clock, expected_pid=pid, expected_epoch=epoch)
    assert retried == (errors.NONE, pid, epoch + 1)
    stale = _init(tc, clock, expected_pid=pid, expected_epoch=epoch + 7)
    assert stale[0] == errors.PRODUCER_FENCED
    assert _init(tc, clock, timeout=10**9)[0] == errors.INVALID_TRANSACTION_TIMEOUT


def test_state_survives_a_coordinator_restart_and_prepared_transactions_finish(tmp_path):
    broker, clock, tc = _broker(tmp_path)
    _code, pid, epoch = _init(tc, clock)
    result_of(tc.add_partitions("t", pid, epoch, [("out", 0)]))
    _settle(clock)
    _produce(broker, pid, epoch, 0)
    meta = tc.txns["t"]
    # Written PrepareCommit, then the coordinator stops before any marker.
    sent = []
    tc.complete = sent.append
    result_of(tc._prepare_end(meta, commit=True))
    assert sent == [meta] and meta.state == "PrepareCommit"
    result_of(tc.stop())
    again = type(tc)(broker, broker.allocate_producer_id)
    broker.txn_coordinator = again
    result_of(again.start())
    _settle(clock)
    assert again.txns["t"].state == COMPLETE_COMMIT
    part = broker.partition("out", 0)
    assert part.last_stable_offset == part.high_watermark == 2


def test_idle_transactional_ids_expire(tmp_path):
    _broker_, clock, tc = _broker(
        tmp_path,
        transactional_id_expiration_ms=10000,
        transaction_remove_expired_transaction_cleanup_interval_ms=1000,
    )
    _init(tc, clock)
    _settle(clock, 5.0, 10)
    assert "t" in tc.txns
    _settle(clock, 8.0, 16)
    assert "t" not in tc.txns
    # Expired for good: a reload of the log does not bring it back.
    index = tc.store.partition_of("t")
    tc._unload(index, "test")
    tc.leadership_changed(_broker_.partition("__transaction_state", index))
    _settle(clock)
    assert "t" not in tc.txns and tc.txn_error("t") == errors.NONE


def test_add_offsets_makes_the_offsets_topic_when_it_is_missing(tmp_path):
    broker, clock, tc = _broker(tmp_path)

    broker.group_coordinator = GroupCoordinator(broker)
    broker.group_coordinator.start()
    _settle(clock)
    assert broker.num_partitions("__consumer_offsets") is None
    _code, pid, epoch = _init(tc, clock)
    d = tc.add_offsets("t", pid, epoch, "g")
    _settle(clock)
    assert result_of(d) == errors.NONE
    assert broker.num_partitions("__consumer_offsets") == 3


def test_a_state_partition_named_here_but_not_open_yet_is_loading(tmp_path):
    """FindCoordinator names this broker from the cluster's state; until the
    ``__transaction_state`` log is open here (new logs open over reactor
    turns), its ids get COORDINATOR_LOAD_IN_PROGRESS, retried here by
    clients, not NOT_COORDINATOR; once open, they are served."""
    broker, clock, tc = _broker(tmp_path)
    index = tc.store.partition_of("t", 2)
    part = broker.partitions.pop(("__transaction_state", index))
    assert tc.txn_error("t") == errors.COORDINATOR_LOAD_IN_PROGRESS
    broker.partitions[("__transaction_state", index)] = part
    assert tc.txn_error("t") == errors.NONE
