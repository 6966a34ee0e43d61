"""The flush scheduler's pass visits only the logs that can be due (issue 24):
unflushed records under a finite flush.ms, not every partition each second."""

import pytest
from twisted.internet.task import Clock

from pluglog.config import TopicConfig
from pluglog.protocol.records import Record, build_batch
from pluglog.storage.manager import SegmentLogStorage
from tests.unit.test_group_coordinator import make_broker, result_of
from tests.unit.test_storage_segments import make_batch

pytestmark = pytest.mark.unit


def _storage(tmp_path):
    return SegmentLogStorage(str(tmp_path), fsync="interval")


def test_only_logs_with_unflushed_records_and_a_finite_flush_ms_are_visited(tmp_path, monkeypatch):
    store = _storage(tmp_path)
    timed = store.open_log("t", 0, TopicConfig(flush_ms=100))
    default = store.open_log("t", 1, TopicConfig())  # flush.ms: never
    idle = store.open_log("t", 2, TopicConfig(flush_ms=100))
    visited = []
    for log in (timed, default, idle):
        real = log.maybe_flush
        monkeypatch.setattr(
            log, "maybe_flush", lambda now, log=log, real=real: (visited.append(log), real(now))[1]
        )
    timed.append(make_batch(2), now_ms=0)
    default.append(make_batch(2), now_ms=0)
    assert store.flush_due_logs(50) == 0
    assert visited == [timed]
    assert timed.recovery_point == 0
    assert store.flush_due_logs(100) == 1
    assert timed.recovery_point == 2
    del visited[:]
    assert store.flush_due_logs(10_000) == 0
    assert visited == []  # flushed: out of the set until its next write
    assert default.recovery_point == 0  # left to the checkpoint, as before
    timed.append(make_batch(1), now_ms=150)  # 50 ms after its flush: not due
    assert timed.recovery_point == 2
    assert store.flush_due_logs(199) == 0
    assert store.flush_due_logs(200) == 1
    assert timed.recovery_point == 3


def test_a_config_change_to_a_finite_flush_ms_makes_a_dirty_log_due(tmp_path):
    store = _storage(tmp_path)
    log = store.open_log("t", 0, TopicConfig())
    log.append(make_batch(2), now_ms=0)
    assert store.flush_due_logs(10**9) == 0
    log.update_config(TopicConfig(flush_ms=10))
    assert store.flush_due_logs(10**9) == 1
    assert log.recovery_point == 2


def test_a_log_flushed_by_the_checkpoint_or_deleted_leaves_the_set(tmp_path):
    store = _storage(tmp_path)
    flushed = store.open_log("t", 0, TopicConfig(flush_ms=10**6))
    deleted = store.open_log("t", 1, TopicConfig(flush_ms=10**6))
    flushed.append(make_batch(1), now_ms=0)
    deleted.append(make_batch(1), now_ms=0)
    assert set(store._flush_candidates) == {flushed, deleted}
    store.flush_all()
    store.delete_log("t", 1)
    store.flush_due_logs(1)
    assert store._flush_candidates == {}


def test_the_broker_flushes_a_topic_whose_flush_ms_passed(tmp_path):
    # Through the broker's pass (Broker.flush_due), as the service runs it.
    clock = Clock()
    clock.advance(1_000)
    broker = make_broker(tmp_path, clock, storage="segments", fsync="interval")
    result_of(broker.create_topic("f", 2, 1, configs={"flush.ms": "500"}))
    clock.advance(0)
    part = broker.partition("f", 0)
    part.append(build_batch([Record(None, b"v", (), 0)]), broker.now_ms(), acks=1)
    assert part.log.recovery_point == 0
    broker.flush_due()  # not due yet
    assert part.log.recovery_point == 0
    clock.advance(1)
    broker.flush_due()
    assert part.log.recovery_point == 1
    assert broker.partition("f", 1).log.recovery_point == 0  # nothing written there
