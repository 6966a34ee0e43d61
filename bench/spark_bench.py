"""Spark (plugins/pluglog-spark) throughput: rows/s through format("pluglog").

Starts a real broker process (tests/broker_process.py) on a temp data dir and
measures, on one local[2] SparkSession:

* clients: the executor data-plane candidates without Spark, reading and
  producing N/3 records with confluent-kafka vs pluglog's BlockingClient +
  record codec (the measurement behind the client choice);
* batch read: ``spark.read.format("pluglog")`` of N records in 2 partitions
  into the ``noop`` sink (twice: the first run includes Python worker start);
* stream read: ``readStream`` with ``Trigger.AvailableNow`` into ``noop``;
* batch write: N DataFrame rows ``write.format("pluglog")``, with
  ``exactlyOnce`` (one transaction per task, the default) and without;
* stream write: ``readStream`` of the topic -> ``writeStream.format("pluglog")``,
  both ways; then a read_committed batch read of the batch-written topic.

Usage: ``python3 bench/spark_bench.py [--records 1000000] [--value-size 100]``
(needs pyspark 4.x, pyarrow, confluent-kafka, Java 17 and pluglog-spark).
"""

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import confluent_kafka  # noqa: E402
import pyarrow as pa  # noqa: E402
from pluglog_spark import executor, local_session  # noqa: E402

from pluglog import protocol as codec  # noqa: E402
from pluglog.client.blocking import BlockingClient  # noqa: E402
from pluglog.protocol.records import Record, build_batch, iter_batches  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402

BROKER_PID = None  # set by main(): timed() then adds the broker's CPU per row


def cpu_seconds(pid):
    """utime + stime of process ``pid`` from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(label, rows, function):
    cpu = cpu_seconds(BROKER_PID) if BROKER_PID else None
    start = time.perf_counter()
    function()
    took = time.perf_counter() - start
    line = f"{label:<44} {rows:>9,} rows {took:7.2f} s {rows / took:>11,.0f} rows/s"
    if cpu is not None:
        line += f"  broker {(cpu_seconds(BROKER_PID) - cpu) / rows * 1e6:.2f} µs CPU/row"
    print(line, flush=True)
    return rows / took


def produce(bootstrap, topic, count, value_size, partitions):
    producer = confluent_kafka.Producer(executor.producer_config(bootstrap, {}))
    value = b"v" * value_size
    for i in range(count):
        while True:
            try:
                producer.produce(
                    topic, value, b"key-%d" % i, partition=i % partitions, headers=[("h", b"x")]
                )
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def blocking_read(bootstrap, topic, partition, end):
    client = BlockingClient.from_bootstrap(bootstrap)
    position, columns = 0, ([], [], [], [], [])
    while position < end:
        (part,) = client.fetch(
            topic, {partition: position}, max_wait_ms=100, partition_max_bytes=8_388_608
        )
        data = part["records"]
        for batch in iter_batches(data or b""):
            for record in batch.records:
                if position <= record.offset < end:
                    for column, item in zip(
                        columns,
                        (
                            record.key,
                            record.value,
                            record.offset,
                            record.timestamp,
                            record.headers,
                        ),
                    ):
                        column.append(item)
            position = max(position, batch.last_offset + 1)
    client.close()
    pa.array(columns[0], pa.binary())
    pa.array(columns[1], pa.binary())


def blocking_produce(bootstrap, topic, count, value_size):
    client = BlockingClient.from_bootstrap(bootstrap)
    value = b"v" * value_size
    for first in range(0, count, 3000):
        records = [
            Record(b"key-%d" % i, value, [("h", b"x")], 0)
            for i in range(first, min(count, first + 3000))
        ]
        body = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 30000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": build_batch(records)}]}
            ],
        }
        client.request(codec.PRODUCE, 8, body)
    client.close()


def bench_clients(bootstrap, count, value_size):
    produce(bootstrap, "clients", count, value_size, 1)
    timed(
        "clients: read, confluent-kafka -> Arrow",
        count,
        lambda: list(executor.read_range(bootstrap, {}, "clients", 0, 0, count, True)),
    )
    timed(
        "clients: read, BlockingClient+codec -> Arrow",
        count,
        lambda: blocking_read(bootstrap, "clients", 0, count),
    )
    timed(
        "clients: produce, confluent-kafka",
        count,
        lambda: produce(bootstrap, "clients-p1", count, value_size, 1),
    )
    timed(
        "clients: produce, BlockingClient+codec",
        count,
        lambda: blocking_produce(bootstrap, "clients-p2", count, value_size),
    )


def bench_spark(bootstrap, count, value_size, scratch):
    spark = local_session(app_name="pluglog-spark-bench")
    spark.sparkContext.setLogLevel("ERROR")
    produce(bootstrap, "source", count, value_size, 2)

    def batch_read():
        (
            spark.read.format("pluglog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "source")
            .load()
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    timed("spark batch read -> noop (first run)", count, batch_read)
    timed("spark batch read -> noop", count, batch_read)

    def stream(target_format, checkpoint, topic=None, exactly_once="true"):
        writer = (
            spark.readStream.format("pluglog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "source")
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("key", "value", "headers")
            .writeStream.format(target_format)
            .option("checkpointLocation", os.path.join(scratch, checkpoint))
            .trigger(availableNow=True)
        )
        if topic:
            writer = (
                writer.option("kafka.bootstrap.servers", bootstrap)
                .option("topic", topic)
                .option("exactlyOnce", exactly_once)
            )
        query = writer.start()
        query.awaitTermination()
        assert query.exception() is None, query.exception()

    timed("spark stream read (availableNow) -> noop", count, lambda: stream("noop", "c1"))

    def batch_write(exactly_once="true", rows=count):
        (
            spark.range(rows)
            .selectExpr(f"repeat('v', {value_size}) AS value", "cast(id AS string) AS key")
            .write.format("pluglog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", "written")
            .option("exactlyOnce", exactly_once)
            .mode("append")
            .save()
        )

    # Both write modes in the same run, after an untimed warm-up write (the
    # writers' first Python workers and the topic), in alternating order:
    # one transaction per task (the default) against the idempotent producer.
    batch_write("false", 10_000)
    for mode in ("true", "false", "false", "true"):
        timed(
            f"spark batch write (range -> pluglog), exactlyOnce={mode}",
            count,
            lambda mode=mode: batch_write(mode),
        )
    timed(
        "spark stream write (pluglog -> pluglog), exactlyOnce=true",
        count,
        lambda: stream("pluglog", "c2", topic="stream-written"),
    )
    timed(
        "spark stream write (pluglog -> pluglog), exactlyOnce=false",
        count,
        lambda: stream("pluglog", "c3", topic="stream-written-2", exactly_once="false"),
    )

    def committed_read():
        (
            spark.read.format("pluglog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "written")
            .option("isolationLevel", "read_committed")
            .load()
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    # "written" holds 4 * count rows (+ the warm-up), half of them in transactions.
    timed("spark batch read, isolationLevel=read_committed -> noop", 4 * count, committed_read)
    spark.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--skip-clients", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as scratch:
        broker = BrokerProcess(
            os.path.join(scratch, "data"), settings={"num.partitions": "2"}
        ).start()
        global BROKER_PID
        BROKER_PID = broker.proc.pid
        try:
            print(
                f"broker {broker.bootstrap}; {args.records:,} records of "
                f"{args.value_size} B values; cpus {os.cpu_count()}",
                flush=True,
            )
            if not args.skip_clients:
                bench_clients(broker.bootstrap, args.records // 3, args.value_size)
            bench_spark(broker.bootstrap, args.records, args.value_size, scratch)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
