"""The group tests' commit-and-rewind step (tests.integration.test_groups).

A worker records a record as processed only once its offset commit
succeeded, and a partition whose commit failed is read again from its first
record of the batch. A CI run of the KIP-848 test lost 99 records of two
partitions when the rewind sought to every record in turn (leaving each
partition at its last one); these pin the rule with a stand-in consumer
that records its seeks.
"""

from types import SimpleNamespace

import confluent_kafka
import pytest

from tests.integration.test_groups import commit_confluent

pytestmark = pytest.mark.unit


class Msg:
    def __init__(self, partition, offset):
        self._p, self._o = partition, offset

    def topic(self):
        return "t"

    def partition(self):
        return self._p

    def offset(self):
        return self._o


class Consumer:
    """Answers commit() with per-partition errors for ``failing`` (or
    raises, with ``raises``), and records seeks."""

    def __init__(self, failing=(), raises=False):
        self.failing, self.raises = set(failing), raises
        self.committed, self.seeks = [], []

    def commit(self, offsets, asynchronous):
        assert asynchronous is False
        if self.raises:
            raise confluent_kafka.KafkaException(confluent_kafka.KafkaError(27))
        self.committed = [(tp.partition, tp.offset) for tp in offsets]
        error = confluent_kafka.KafkaError(confluent_kafka.KafkaError.REBALANCE_IN_PROGRESS)
        # As librdkafka answers: each partition with its own error (or None).
        return [
            SimpleNamespace(
                topic=tp.topic,
                partition=tp.partition,
                offset=tp.offset,
                error=error if tp.partition in self.failing else None,
            )
            for tp in offsets
        ]

    def seek(self, tp):
        self.seeks.append((tp.partition, tp.offset))


BATCH = [Msg(7, o) for o in range(100, 200)] + [Msg(8, o) for o in range(100, 200)]


def test_a_failed_partition_is_rewound_to_its_first_record():
    consumer = Consumer(failing={7})
    done = commit_confluent(consumer, BATCH)
    assert consumer.committed == [(7, 200), (8, 200)]
    assert consumer.seeks == [(7, 100)]
    assert [(m.partition(), m.offset()) for m in done] == [(8, o) for o in range(100, 200)]


def test_a_failed_request_rewinds_every_partition_and_records_nothing():
    consumer = Consumer(raises=True)
    assert commit_confluent(consumer, BATCH) == []
    assert sorted(consumer.seeks) == [(7, 100), (8, 100)]


def test_a_commit_that_succeeds_records_the_batch_and_seeks_nothing():
    consumer = Consumer()
    assert commit_confluent(consumer, BATCH) == BATCH
    assert consumer.seeks == []
