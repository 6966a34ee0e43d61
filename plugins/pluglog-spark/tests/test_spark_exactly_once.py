"""Exactly-once writes (one Kafka transaction per write task) and read_committed reads.

The first two tests drive :func:`pluglog_spark.transactional.write_transaction`
directly against the broker process, the way two attempts of one Spark task
would. The Spark tests fail a batch task once and SIGKILL a streaming
driver mid-batch, then check row by row that a read_committed read holds
each input row once, while a read_uncommitted one shows that the failed
attempt really had written rows (so the check could fail).
"""

import collections
import json
import os
import signal
import subprocess
import sys
import time

import confluent_kafka
import pyarrow as pa
import pytest
from pluglog_spark.transactional import write_transaction
from spark_helpers import BASE_TS, consume_all, create_topic, produce

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
        second.append(
            write_transaction(broker.bootstrap, {}, [arrow([b"b1"])], topic_name, txn_id, 0)
        )
        yield arrow([b"a3"])

    with pytest.raises(confluent_kafka.KafkaException) as fenced:
        write_transaction(broker.bootstrap, {}, first_attempt(), topic_name, txn_id, 0)
    assert "fenced" in str(fenced.value).lower(), fenced.value
    assert second == [(1, False)]

    # A third attempt of batch 0 (the second committed, then "died" before
    # Spark heard of it) finds the marker and writes nothing ...
    assert write_transaction(broker.bootstrap, {}, [arrow([b"c1"])], topic_name, txn_id, 0) == (
        0,
        True,
    )
    # ... while the next batch id is written.
    assert write_transaction(broker.bootstrap, {}, [arrow([b"d1"])], topic_name, txn_id, 1) == (
        1,
        False,
    )

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
        # The open transaction stays open across two Spark reads, which on a
        # loaded machine outlast librdkafka's default transaction.timeout.ms
        # (60 s): the coordinator then aborts it and bumps the epoch, as
        # Kafka's does, and the final abort is fenced. 10 min is under the
        # broker's transaction.max.timeout.ms (15 min).
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "transactional.id": txn_id,
                "transaction.timeout.ms": 600000,
            }
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


ROWS_PER_TASK = 15_000
FAIL_AT = 12_000  # row of task 1 where its first attempt fails, after writing rows


def test_batch_write_task_failed_once_and_retried_writes_each_row_once(spark, broker, topic_name):
    from pyspark import TaskContext
    from pyspark.sql.functions import spark_partition_id, udf

    create_topic(broker.bootstrap, topic_name, 2)
    bootstrap = broker.bootstrap

    @udf("string")
    def value_of(i):
        context = TaskContext.get()
        if context.attemptNumber() == 0 and i == ROWS_PER_TASK + FAIL_AT:
            # Fail only once this attempt's transaction holds records, so the
            # retry really has something to fence and abort.
            watcher = confluent_kafka.Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": "watcher",
                    "isolation.level": "read_uncommitted",  # the high watermark
                }
            )
            tp = confluent_kafka.TopicPartition(topic_name, 1)
            deadline = time.monotonic() + 60
            while watcher.get_watermark_offsets(tp, timeout=10)[1] < 5000:
                assert time.monotonic() < deadline, "the first attempt produced nothing"
                time.sleep(0.1)
            watcher.close()
            raise RuntimeError("injected failure of the first attempt")
        return f"row-{i}"

    (
        spark.range(0, 2 * ROWS_PER_TASK, numPartitions=2)
        .select(value_of("id").alias("value"), spark_partition_id().alias("partition"))
        .write.format("pluglog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic_name)
        .mode("append")
        .save()
    )
    want = {b"row-%d" % i: 1 for i in range(2 * ROWS_PER_TASK)}
    assert spark_values(spark, broker, topic_name, "read_committed") == want
    # The failed attempt's rows are in the log, aborted: read_uncommitted sees them.
    uncommitted = consume_all(broker.bootstrap, topic_name, 2, "read_uncommitted")
    assert len(uncommitted) >= 2 * ROWS_PER_TASK + 5000


def spark_rows(spark, broker, topic, isolation):
    frame = (
        spark.read.format("pluglog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("isolationLevel", isolation)
        .load()
    )
    return collections.Counter(
        (None if r.key is None else bytes(r.key), bytes(r.value))
        for r in frame.select("key", "value").collect()
    )


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def open_transaction_rows(bootstrap, topic, partitions):
    """Records past the last stable offset: rows of a transaction still open."""
    from pluglog_spark.control import ClusterView

    tps = [(topic, p) for p in range(partitions)]
    views = [ClusterView(bootstrap, read_committed=c) for c in (False, True)]
    try:
        high, stable = (view.latest(tps) for view in views)
    finally:
        for view in views:
            view.close()
    return sum(high[tp] - stable[tp] for tp in tps)


def batches_done(bootstrap, txn_prefix, marker_topic):
    """The batch marker of each of 3 write partitions: batches committed."""
    out = {}
    for partition in range(3):
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"{txn_prefix}-{partition}"}
        )
        (tp,) = consumer.committed([confluent_kafka.TopicPartition(marker_topic, 0)], 30)
        consumer.close()
        out[partition] = max(tp.offset, 0)
    return out


def run_driver(tmp_path, name, *args):
    driver = os.path.join(HERE, "eos_stream_driver.py")
    log = open(tmp_path / f"{name}.log", "wb")
    # Its own session, so the SIGKILL reaches the driver and its JVM together.
    return subprocess.Popen(
        [sys.executable, driver, *map(str, args)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_stream_driver_killed_mid_batch_and_restarted_writes_each_row_once(
    spark, broker, tmp_path
):
    import eos_stream_driver as driver

    source, target = f"eos-src-{tmp_path.name[-8:]}", f"eos-dst-{tmp_path.name[-8:]}"
    create_topic(broker.bootstrap, source, 3)
    create_topic(broker.bootstrap, target, 3)
    # 400-byte values: the hanging task's rows must get through the Python
    # UDF worker's 64 KiB output buffer to reach the writer before the hang.
    records = [
        (b"k%d" % i, b"v%06d-" % i + b"." * 400, None, BASE_TS + i)
        for i in range(3 * driver.ROWS_PER_PARTITION)
    ]
    produce(broker.bootstrap, source, records, 3)
    checkpoint, hang_file = tmp_path / "checkpoint", tmp_path / "hung"

    first = run_driver(tmp_path, "first", broker.bootstrap, source, target, checkpoint, hang_file)
    hung_pid = None
    try:
        wait_for(
            lambda: hang_file.exists() or first.poll() is not None,
            180,
            "the task of batch 1 to hang",
        )
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        wait_for(
            lambda: open_transaction_rows(broker.bootstrap, target, 3) > 0,
            60,
            "the hanging task's transaction to hold rows",
        )
        hung_pid = int(hang_file.read_text() or 0)
        # The two other tasks of batch 1 finish on the free slot and commit.
        query_id = json.loads((checkpoint / "metadata").read_text())["id"]
        prefix = f"pluglog-spark-{query_id}"
        wait_for(
            lambda: batches_done(broker.bootstrap, prefix, target) == {0: 2, 1: 2, 2: 1},
            60,
            "partitions 0 and 1 to commit batch 1",
        )
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(60)
    # Killed mid-batch: Spark planned batch 1 but never recorded it as done;
    # partitions 0 and 1 had committed it, the hung partition 2 had not.
    assert (checkpoint / "offsets" / "1").exists()
    assert not (checkpoint / "commits" / "1").exists()
    assert batches_done(broker.bootstrap, prefix, target) == {0: 2, 1: 2, 2: 1}

    # Restarted from the checkpoint by another driver: this test's session.
    query = driver.start_query(spark, broker.bootstrap, source, target, checkpoint)
    try:
        assert query.awaitTermination(180), "the restarted query did not finish"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    assert [p["batchId"] for p in query.recentProgress if p["numInputRows"]] == [1]
    assert (checkpoint / "commits" / "1").exists()

    want = {(key, value): 1 for key, value, _h, _ts in records}
    assert spark_rows(spark, broker, target, "read_committed") == want
    # The killed attempt's rows are in the log (aborted): the check above could fail.
    assert len(consume_all(broker.bootstrap, target, 3, "read_uncommitted")) > len(records)
    # The hung Python worker of the killed driver exits with its daemon once
    # that JVM is gone (it may have outlived the restart as a fenced zombie).
    if hung_pid:
        wait_for(lambda: not os.path.exists(f"/proc/{hung_pid}"), 60, "the hung worker to exit")
