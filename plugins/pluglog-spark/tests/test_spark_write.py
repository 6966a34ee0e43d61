"""df.write / df.writeStream .format("pluglog"), checked with confluent-kafka.

100,000 DataFrame rows written by a batch write and by a streaming write must
read back as the same rows; a streaming query restarted after the sink
committed a micro-batch that Spark had not yet recorded in its checkpoint
replays that batch, and the sink must not write it twice.
"""

import collections

from spark_helpers import consume_all, create_topic, make_records, produce

ROWS = 100_000


def source_frame(spark):
    """100,000 rows: string values, binary keys (some null), headers on half."""
    return spark.range(ROWS).selectExpr(
        "concat('row-', cast(id as string)) AS value",
        "CASE WHEN id % 10 = 0 THEN NULL ELSE encode(concat('k', cast(id as string)), 'utf-8')"
        " END AS key",
        "CASE WHEN id % 2 = 0 THEN array(named_struct('key', 'id', 'value',"
        " encode(cast(id as string), 'utf-8'))) ELSE NULL END AS headers",
    )


def expected(count=ROWS):
    out = []
    for i in range(count):
        key = None if i % 10 == 0 else b"k%d" % i
        headers = [("id", str(i).encode())] if i % 2 == 0 else None
        out.append((key, b"row-%d" % i, headers))
    return sorted(out, key=repr)


def test_batch_write_rows_read_back_with_confluent_kafka(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 3)
    (
        source_frame(spark)
        .repartition(4)
        .write.format("pluglog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", topic_name)
        .mode("append")
        .save()
    )
    got = consume_all(broker.bootstrap, topic_name, 3)
    assert sorted(((k, v, h) for _p, _o, k, v, h in got), key=repr) == expected()
    assert {p for p, *_ in got} == {0, 1, 2}  # keyed rows spread over partitions


def test_topic_and_partition_columns_route_rows(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    frame = spark.range(100).selectExpr(
        f"'{topic_name}' AS topic",
        "cast(id % 2 AS int) AS partition",
        "cast(id AS string) AS value",
    )
    frame.write.format("pluglog").option("bootstrap.servers", broker.bootstrap).mode(
        "append"
    ).save()
    got = consume_all(broker.bootstrap, topic_name, 2)
    assert sorted((p, int(v)) for p, _o, _k, v, _h in got) == sorted(
        (i % 2, i) for i in range(100)
    )


def run_stream_write(spark, broker, source_topic, target_topic, checkpoint):
    query = (
        spark.readStream.format("pluglog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", source_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "30000")
        .load()
        .selectExpr("key", "value", "headers")
        .writeStream.format("pluglog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", target_topic)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    return [(p["batchId"], p["numInputRows"]) for p in query.recentProgress if p["numInputRows"]]


def test_stream_write_does_not_repeat_committed_batches(spark, broker, tmp_path):
    source, target = f"src-{tmp_path.name[-8:]}", f"dst-{tmp_path.name[-8:]}"
    create_topic(broker.bootstrap, source, 3)
    create_topic(broker.bootstrap, target, 3)
    records = make_records(ROWS)
    produce(broker.bootstrap, source, records, 3)
    checkpoint = tmp_path / "checkpoint"

    batches = run_stream_write(spark, broker, source, target, checkpoint)
    # 33,334 + 33,333 + 33,333 records shared by backlog, like Spark's Kafka source.
    assert [b for b, _n in batches] == [0, 1, 2, 3]
    assert sum(n for _b, n in batches) == ROWS and all(n <= 30000 for _b, n in batches)
    want = sorted(((k, v, h) for k, v, h, _ts in records), key=repr)
    first = consume_all(broker.bootstrap, target, 3)
    assert sorted(((k, v, h) for _p, _o, k, v, h in first), key=repr) == want

    # A driver crash after the sink committed batch 3 but before Spark wrote
    # commits/3 leaves exactly this checkpoint: Spark must replay batch 3.
    (checkpoint / "commits" / "3").unlink()
    (checkpoint / "commits" / ".3.crc").unlink(missing_ok=True)
    replayed = run_stream_write(spark, broker, source, target, checkpoint)
    assert replayed == [batches[3]]
    again = consume_all(broker.bootstrap, target, 3)
    assert len(again) == ROWS
    counts = collections.Counter(v for _p, _o, _k, v, _h in again)
    assert max(counts.values()) == 1
    (query_dir,) = (checkpoint / "pluglog-commits").iterdir()
    assert sorted(m.name for m in query_dir.iterdir()) == ["0", "1", "2", "3"]
