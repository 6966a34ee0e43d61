"""Idempotent producer sequence checks and deduplication."""

import pytest

from pluglog.broker.producer_state import ProducerStateTable
from pluglog.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    OutOfOrderSequenceError,
)


def test_new_producer_accepted_and_tracked():
    table = ProducerStateTable()
    assert table.check(7, 0, 0, 9) is None
    table.update(7, 0, 0, 9, 100, 109, -1)
    assert table.check(7, 0, 10, 19) is None


def test_duplicate_of_any_of_last_five():
    table = ProducerStateTable()
    for n in range(7):
        table.update(1, 0, n * 10, n * 10 + 9, 1000 + n * 10, 1009 + n * 10, -1)
    assert table.check(1, 0, 60, 69) == (1060, 1069, -1)
    assert table.check(1, 0, 20, 29) == (1020, 1029, -1)
    # The 6th-newest batch is no longer retained: it is a sequence error now.
    with pytest.raises(OutOfOrderSequenceError):
        table.check(1, 0, 10, 19)


def test_gap_and_epochs():
    table = ProducerStateTable()
    table.update(1, 3, 0, 4, 0, 4, -1)
    with pytest.raises(OutOfOrderSequenceError):
        table.check(1, 3, 6, 7)
    with pytest.raises(InvalidProducerEpochError):
        table.check(1, 2, 5, 5)
    with pytest.raises(OutOfOrderSequenceError):
        table.check(1, 4, 5, 5)  # a new epoch must restart at 0
    assert table.check(1, 4, 0, 0) is None


def test_sequence_wraps():
    table = ProducerStateTable()
    top = 2**31 - 1
    table.update(1, 0, top - 1, top, 0, 1, -1)
    assert table.check(1, 0, 0, 3) is None


def test_missing_sequence_is_invalid():
    with pytest.raises(InvalidRecordError):
        ProducerStateTable().check(1, 0, -1, -1)


def test_non_idempotent_batches_pass():
    assert ProducerStateTable().check(-1, -1, -1, -1) is None


def test_partition_rebuilds_state_from_the_log_after_a_restart(tmp_path):
    from twisted.internet.task import Clock

    from pluglog.broker.partition import Partition
    from pluglog.broker.producer_state import DuplicateAppend
    from pluglog.config import TopicConfig
    from pluglog.protocol.records import Record, build_batch
    from pluglog.storage import SegmentLogStorage

    def batch(seq, count=3):
        records = [Record(value=b"v") for _ in range(count)]
        return build_batch(records, producer_id=42, producer_epoch=0, base_sequence=seq)

    storage = SegmentLogStorage(str(tmp_path), reactor=Clock())
    part = Partition("t", 0, storage.open_log("t", 0, TopicConfig()), TopicConfig())
    part.append(build_batch([Record(value=b"plain")]), 0)  # not idempotent
    assert part.append(batch(0), 0).first_offset == 1
    assert part.append(batch(3), 0).first_offset == 4
    storage.close()

    storage = SegmentLogStorage(str(tmp_path), reactor=Clock())
    part = Partition("t", 0, storage.open_log("t", 0, TopicConfig()), TopicConfig())
    part.append(build_batch([Record(value=b"plain again")]), 0)
    retried = part.append(batch(3), 0)
    assert isinstance(retried, DuplicateAppend) and retried.first_offset == 4
    with pytest.raises(OutOfOrderSequenceError):
        part.append(batch(9), 0)
    assert part.append(batch(6), 0).first_offset == 8
    storage.close()


def test_min_insync_replicas_refuses_acks_all():
    from twisted.internet.task import Clock

    from pluglog.broker.partition import Partition
    from pluglog.config import TopicConfig
    from pluglog.errors import NotEnoughReplicasError
    from pluglog.protocol.records import Record, build_batch
    from pluglog.storage import MemoryLogStorage

    config = TopicConfig(min_insync_replicas=2)
    part = Partition("t", 0, MemoryLogStorage(reactor=Clock()).open_log("t", 0, config), config)
    batch = build_batch([Record(value=b"v")])
    with pytest.raises(NotEnoughReplicasError):
        part.append(batch, 0, acks=-1)
    assert part.log.log_end_offset == 0
    assert part.append(batch, 0, acks=1).first_offset == 0
