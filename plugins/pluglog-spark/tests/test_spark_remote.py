"""format("pluglog") reads a topic's remote tier straight from S3.

One real ``moto_server`` (tests/moto_s3.py), one real broker with tiered
storage to it (``--http`` for its /metrics) and the shared local Spark. A
two-partition topic holds many times its local retention; a batch read
given the ``rsm.config.s3.*`` options plans the remote offsets as segment
splits that the executors fetch from S3 with boto3, and must give exactly
the rows of the same read through the broker while the broker serves less
than the local tail's bytes. Sizes are scaled down; bench/spark_remote_bench.py
is the large, timed version.
"""

import json
import os
import re
import time
import urllib.request
import uuid

import pytest
from pluglog_spark.control import ClusterView
from spark_helpers import BASE_TS, create_topic, make_records, produce
from test_spark_read import as_tuples, run_available_now

from pluglog.childprocess import free_port
from tests.broker_process import BrokerProcess
from tests.moto_s3 import DUMMY_CREDENTIALS, MotoServer

PARTITIONS = 2
COUNT = 12_000
SEGMENT_BYTES = 65536
LOCAL_RETENTION = 131072
TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    "segment.bytes": str(SEGMENT_BYTES),
    "local.retention.bytes": str(LOCAL_RETENTION),
    "file.delete.delay.ms": "0",
    # The records' timestamps are in January 2026: keep them past retention.ms.
    "retention.ms": "-1",
}


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    # conftest put moto's dummy credentials in the environment, which the
    # broker and Spark's workers inherit.
    assert all(os.environ.get(k) for k in DUMMY_CREDENTIALS)
    server = MotoServer(str(tmp_path_factory.mktemp("moto"))).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tiered(moto, tmp_path_factory):
    bucket = f"pluglog-{uuid.uuid4().hex[:12]}"
    moto.client().create_bucket(Bucket=bucket)
    http = free_port()
    settings = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "s3",
        "rsm.config.s3.bucket": bucket,
        "rsm.config.s3.endpoint.url": moto.url,
        "rsm.config.s3.region": "us-east-1",
        "rsm.config.s3.prefix": "spark/",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "remote.log.metadata.topic.num.partitions": "1",
    }
    proc = BrokerProcess(
        tmp_path_factory.mktemp("tiered") / "data",
        settings=settings,
        extra_args=["--http", f"tcp:{http}:interface=127.0.0.1"],
    ).start()
    proc.http_url = f"http://127.0.0.1:{http}"
    proc.remote_options = {k: v for k, v in settings.items() if k.startswith("rsm.config.s3.")}
    yield proc
    proc.stop()


def bytes_out(broker):
    """The broker's fetch bytes served so far, ``{topic: bytes}``."""
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = re.findall(r'^pluglog_bytes_out_total\{topic="([^"]*)"\} (\S+)$', text, re.M)
    return {topic: float(v) for topic, v in found}


def local_tail_bytes(broker, topic):
    total = 0
    for p in range(PARTITIONS):
        directory = os.path.join(broker.data_dir, f"{topic}-{p}")
        total += sum(
            os.path.getsize(os.path.join(directory, n))
            for n in os.listdir(directory)
            if n.endswith(".log")
        )
    return total


def read(spark, broker, topic, **options):
    frame = (
        spark.read.format("pluglog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        frame = frame.option(key, value)
    return frame.load()


@pytest.fixture(scope="module")
def history(tiered):
    """A topic whose older part is in S3 only: (name, produced count)."""
    topic = f"t-{uuid.uuid4().hex[:10]}"
    create_topic(tiered.bootstrap, topic, PARTITIONS, TOPIC_CONFIG)
    # Small batches, so the partitions roll many segments.
    produce(tiered.bootstrap, topic, make_records(COUNT), PARTITIONS, {"batch.size": 8192})
    view = ClusterView(tiered.bootstrap)
    tps = [(topic, p) for p in range(PARTITIONS)]
    deadline = time.monotonic() + 60
    try:
        # Local retention removed most of each partition once it was uploaded.
        limit = PARTITIONS * (LOCAL_RETENTION + SEGMENT_BYTES)
        while (
            min(view.earliest_local(tps).values()) < COUNT // PARTITIONS // 2
            or local_tail_bytes(tiered, topic) > limit
        ):
            assert time.monotonic() < deadline, "uploads and local retention did not happen"
            time.sleep(0.2)
        assert all(v == 0 for v in view.earliest(tps).values())
    finally:
        view.close()
    return topic


def test_batch_read_takes_the_remote_tier_from_s3_with_the_brokers_rows(spark, tiered, history):
    before = bytes_out(tiered)
    through_broker = as_tuples(read(spark, tiered, history))
    middle = bytes_out(tiered)
    tail = local_tail_bytes(tiered, history)
    direct = read(spark, tiered, history, **tiered.remote_options)
    direct_rows = as_tuples(direct)
    after = bytes_out(tiered)
    assert len(through_broker) == COUNT
    assert direct_rows == through_broker
    # Through the broker: the whole topic, most of it fetched from S3 by the broker.
    assert middle[history] - before.get(history, 0.0) > 2 * tail
    # Direct: the broker served the local tail only; the planner's read of
    # __remote_log_metadata is a few hundred bytes per segment on top.
    assert 0 < after[history] - middle[history] <= tail
    metadata = after.get("__remote_log_metadata", 0.0) - middle.get("__remote_log_metadata", 0.0)
    assert metadata < tail / 10
    remote_splits = direct.rdd.getNumPartitions() - PARTITIONS
    assert remote_splits >= PARTITIONS  # at least one segment split per partition


def test_direct_read_of_a_range_inside_the_remote_tier(spark, tiered, history):
    options = {
        **tiered.remote_options,
        "startingOffsets": json.dumps({history: {"0": 100, "1": 250}}),
        "endingOffsets": json.dumps({history: {"0": 1500, "1": 300}}),
    }
    direct = as_tuples(read(spark, tiered, history, **options))
    plain = as_tuples(
        read(
            spark,
            tiered,
            history,
            startingOffsets=options["startingOffsets"],
            endingOffsets=options["endingOffsets"],
        )
    )
    assert direct == plain
    assert len(direct) == (1500 - 100) + (300 - 250)


def test_read_committed_with_remote_offsets_is_refused(spark, tiered, history):
    frame = read(spark, tiered, history, isolationLevel="read_committed", **tiered.remote_options)
    with pytest.raises(Exception, match="read_uncommitted only"):
        frame.collect()


def remote_tier_use(broker):
    """How often the broker itself looked into its remote tier: cache
    lookups (hits and misses) and reads from S3."""
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    names = (
        "pluglog_remote_cache_hits_total",
        "pluglog_remote_cache_misses_total",
        "pluglog_remote_read_seconds_count",
    )
    found = dict(re.findall(r"^(pluglog_remote_\w+) (\S+)$", text, re.M))
    return {name: float(found[name]) for name in names}


def test_streaming_available_now_reads_the_remote_tier_from_s3_with_the_brokers_rows(
    spark, tiered, history, tmp_path
):
    through_broker = as_tuples(read(spark, tiered, history))
    # Read-ahead the broker started for that read may still land: wait
    # until its remote tier is quiet.
    used = remote_tier_use(tiered)
    while True:
        time.sleep(0.5)
        used, was = remote_tier_use(tiered), used
        if used == was:
            break
    before = bytes_out(tiered)
    out, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    # Micro-batches of 5000 offsets: the first wholly in the remote tier
    # (the fixture left at least 3000 of each partition in S3 only), a
    # later one across the boundary into the local tail.
    batches = run_available_now(
        spark,
        tiered,
        history,
        out,
        checkpoint,
        maxOffsetsPerTrigger="5000",
        **tiered.remote_options,
    )
    assert batches == [5000, 5000, COUNT - 10_000]
    assert as_tuples(spark.read.parquet(str(out))) == through_broker
    # The remote offsets came from S3 in the executors: the broker served
    # the local tail (a consumer stopping mid-tail fetches ahead of its end,
    # so the next micro-batch may fetch some of it again) and never looked
    # into its remote tier.
    assert bytes_out(tiered)[history] > before.get(history, 0.0)
    assert remote_tier_use(tiered) == used


def test_starting_timestamp_inside_a_remote_segment_starts_at_the_exact_record(
    spark, tiered, history
):
    everything = as_tuples(read(spark, tiered, history))
    # Record i has timestamp BASE_TS + 7 i, and i = 2000 is in the remote
    # tier (at least the first 3000 of each partition's 6000 records are),
    # inside a segment and inside a batch: 3 ms before it names that record.
    target = BASE_TS + 7 * 2000 - 3
    first = {
        p: min(r[1] for r in everything if r[0] == p and r[5] >= target) for p in range(PARTITIONS)
    }
    expected = [r for r in everything if r[1] >= first[r[0]]]
    assert all(r[5] < target for r in everything if r[1] < first[r[0]])
    since = read(spark, tiered, history, startingTimestamp=str(target), **tiered.remote_options)
    assert as_tuples(since) == expected
