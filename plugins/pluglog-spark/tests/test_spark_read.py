"""format("pluglog") reads against a real broker and a real local Spark.

Batch reads must return exactly the records confluent-kafka produced (keys,
values, headers, offsets, timestamps); streaming reads with availableNow
must resume from the checkpoint without loss or duplicates, split batches by
maxOffsetsPerTrigger, and stop (or skip, if asked) when retention removed
records the query still needed.
"""

import json

import pytest
from pyspark.errors import StreamingQueryException
from spark_helpers import BASE_TS, create_topic, delete_records, make_records, produce

COLUMNS = [
    "partition",
    "offset",
    "key",
    "value",
    "headers",
    "unix_millis(timestamp) AS ts",
    "timestampType",
    "topic",
]


def expected_rows(records, partitions, topic, first_offsets=None):
    offsets = dict(first_offsets or {})
    rows = []
    for i, (key, value, headers, ts) in enumerate(records):
        p = i % partitions
        offset = offsets.get(p, 0)
        offsets[p] = offset + 1
        rows.append((p, offset, key, value, headers, ts, 0, topic))
    return sorted(rows)


def as_tuples(frame):
    out = []
    for r in frame.selectExpr(*COLUMNS).collect():
        headers = None if r.headers is None else [(h.key, bytes(h.value)) for h in r.headers]
        key = None if r.key is None else bytes(r.key)
        out.append(
            (r.partition, r.offset, key, bytes(r.value), headers, r.ts, r.timestampType, r.topic)
        )
    return sorted(out)


def reader(spark, broker, **options):
    frame = spark.read.format("pluglog").option("kafka.bootstrap.servers", broker.bootstrap)
    for key, value in options.items():
        frame = frame.option(key, value)
    return frame.load()


def test_batch_read_returns_exactly_the_produced_records(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 3)
    records = make_records(100_000)
    produce(broker.bootstrap, topic_name, records, 3)

    frame = reader(spark, broker, subscribe=topic_name)
    assert frame.rdd.getNumPartitions() == 3  # one input partition per topic-partition
    assert as_tuples(frame) == expected_rows(records, 3, topic_name)

    split = reader(spark, broker, subscribe=topic_name, minPartitions="12")
    assert split.rdd.getNumPartitions() == 12
    assert split.count() == 100_000
    assert split.select("partition", "offset").distinct().count() == 100_000


def test_batch_offset_bounds_assign_pattern_and_timestamp(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    records = make_records(400)
    produce(broker.bootstrap, topic_name, records, 2)
    every = expected_rows(records, 2, topic_name)

    bounded = reader(
        spark,
        broker,
        subscribe=topic_name,
        startingOffsets=json.dumps({topic_name: {"0": 10, "1": -2}}),
        endingOffsets=json.dumps({topic_name: {"0": 50, "1": -1}}),
    )
    want = [r for r in every if (r[0] == 0 and 10 <= r[1] < 50) or r[0] == 1]
    assert as_tuples(bounded) == want

    assigned = reader(spark, broker, assign=json.dumps({topic_name: [1]}))
    assert as_tuples(assigned) == [r for r in every if r[0] == 1]

    pattern = reader(spark, broker, subscribePattern=topic_name[:6] + ".*")
    assert {r.topic for r in pattern.select("topic").distinct().collect()} >= {topic_name}

    # Record i has timestamp BASE_TS + 7 i: start at record 300 (offset 150 in both).
    since = reader(spark, broker, subscribe=topic_name, startingTimestamp=str(BASE_TS + 2100))
    assert as_tuples(since) == [r for r in every if r[1] >= 150]

    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        reader(spark, broker, subscribe=topic_name, startingTimestamp=str(BASE_TS * 2)).count()


def run_available_now(spark, broker, topic, out, checkpoint, **options):
    stream = (
        spark.readStream.format("pluglog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        stream = stream.option(key, value)
    query = (
        stream.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive
    if query.exception() is not None:
        raise query.exception()
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_stream_available_now_resumes_exactly_once(spark, broker, topic_name, tmp_path):
    create_topic(broker.bootstrap, topic_name, 3)
    first = make_records(3000)
    produce(broker.bootstrap, topic_name, first, 3)
    out, checkpoint = tmp_path / "table", tmp_path / "checkpoint"

    batches = run_available_now(
        spark, broker, topic_name, out, checkpoint, maxOffsetsPerTrigger="1200"
    )
    assert batches == [1200, 1200, 600]
    assert as_tuples(spark.read.parquet(str(out))) == expected_rows(first, 3, topic_name)

    more = make_records(1500, start=3000)
    produce(broker.bootstrap, topic_name, more, 3)
    batches = run_available_now(
        spark, broker, topic_name, out, checkpoint, maxOffsetsPerTrigger="1200"
    )
    assert batches == [1200, 300]
    every = expected_rows(first, 3, topic_name) + expected_rows(
        more, 3, topic_name, first_offsets={0: 1000, 1: 1000, 2: 1000}
    )
    assert as_tuples(spark.read.parquet(str(out))) == sorted(every)

    # Nothing new: the query plans no batch and the table is unchanged.
    assert run_available_now(spark, broker, topic_name, out, checkpoint) == []
    assert spark.read.parquet(str(out)).count() == 4500

    offsets_dir = checkpoint / "offsets"
    last = max(int(n.name) for n in offsets_dir.iterdir() if n.name.isdigit())
    assert json.loads((offsets_dir / str(last)).read_text().splitlines()[-1]) == {
        topic_name: {"0": 1500, "1": 1500, "2": 1500}
    }


def test_stream_fails_or_skips_when_retention_removed_records(spark, broker, topic_name, tmp_path):
    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, make_records(100), 1)
    out, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    assert run_available_now(spark, broker, topic_name, out, checkpoint) == [100]

    produce(broker.bootstrap, topic_name, make_records(100, start=100), 1)
    assert delete_records(broker.bootstrap, topic_name, 0, 150) == 150

    with pytest.raises(StreamingQueryException, match=r"failOnDataLoss=false"):
        run_available_now(spark, broker, topic_name, out, checkpoint)
    assert spark.read.parquet(str(out)).count() == 100

    assert run_available_now(
        spark, broker, topic_name, out, checkpoint, failOnDataLoss="false"
    ) == [50]
    offsets = sorted(r.offset for r in spark.read.parquet(str(out)).select("offset").collect())
    assert offsets == list(range(100)) + list(range(150, 200))
