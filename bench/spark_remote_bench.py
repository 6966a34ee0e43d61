"""pluglog-spark: a batch read of a tiered topic, direct from S3 against through the broker.

    python3 bench/spark_remote_bench.py [--mb 256] [--segment-mb 8] [--rounds 2]

Runs a real ``moto_server`` (S3), one broker with the ``s3`` provider
(``--http`` for /metrics) and a local[2] Spark. ``--mb`` MB of 1 KiB
records go to a two-partition tiered topic (``--segment-mb`` segments, local
retention of two segments per partition); once the uploads and local
retention are done, the same batch read (``count``, ``sum(length(value))``
and a ``bit_xor(xxhash64(...))`` of every column, so every row is decoded) runs
``--rounds`` times each way, alternating, after a small warm-up read each
way: through the broker (its remote chunk cache held to
``--broker-cache-mb``, so no round finds the history cached), and with the
``rsm.config.s3.*`` options (remote segments fetched by the executors).
Printed per read: wall time, the broker's fetch bytes
(``pluglog_bytes_out_total``, every topic) and the broker's CPU
(/proc utime+stime), against the local tail's size; the two reads' digests
must be equal. The issue's 2 GB run: ``--mb 2048 --segment-mb 64``.
"""

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN = os.path.join(HERE, "plugins", "pluglog-spark")
sys.path[:0] = [PLUGIN, HERE]
os.environ["PYTHONPATH"] = os.pathsep.join(
    [PLUGIN, HERE, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
)

import confluent_kafka  # noqa: E402

from pluglog.childprocess import free_port  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402
from tests.integration.clients import create_topic  # noqa: E402
from tests.moto_s3 import DUMMY_CREDENTIALS, MotoServer  # noqa: E402

TOPIC = "hist"
PARTITIONS = 2
DIGEST = (
    "count(*) AS n",
    "sum(length(value)) AS bytes",
    "bit_xor(xxhash64(key, value, partition, offset, timestamp, headers)) AS digest",
)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bytes_out(url):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = re.findall(r"^pluglog_bytes_out_total\{[^}]*\} (\S+)$", text, re.M)
    return sum(float(v) for v in found)


def load(bootstrap, mb):
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 262144}
    )
    value = os.urandom(1024)
    for i in range(mb * 1024):
        while True:
            try:
                producer.produce(TOPIC, value, b"k%d" % i, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


def local_bytes(data_dir):
    total = 0
    for p in range(PARTITIONS):
        directory = os.path.join(data_dir, f"{TOPIC}-{p}")
        total += sum(
            os.path.getsize(os.path.join(directory, n))
            for n in os.listdir(directory)
            if n.endswith(".log")
        )
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--segment-mb", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--broker-cache-mb",
        type=int,
        default=16,
        help="the broker's remote chunk cache; small, so no round reads a warm cache",
    )
    args = parser.parse_args()
    os.environ.update(DUMMY_CREDENTIALS)
    work = tempfile.mkdtemp(prefix="spark-remote-bench-")
    moto = MotoServer(work).start()
    moto.client().create_bucket(Bucket="bench")
    segment = args.segment_mb << 20
    http = free_port()
    remote = {
        "rsm.config.s3.bucket": "bench",
        "rsm.config.s3.endpoint.url": moto.url,
        "rsm.config.s3.region": "us-east-1",
        "rsm.config.s3.prefix": "bench/",
    }
    settings = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "s3",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "1000",
        "remote.log.index.file.cache.total.size.bytes": str(args.broker_cache_mb << 20),
        **remote,
    }
    broker = BrokerProcess(
        os.path.join(work, "data"),
        settings=settings,
        extra_args=["--http", f"tcp:{http}:interface=127.0.0.1"],
    ).start()
    url = f"http://127.0.0.1:{http}"
    spark = None
    try:
        create_topic(
            broker.bootstrap,
            TOPIC,
            PARTITIONS,
            {
                "remote.storage.enable": "true",
                "segment.bytes": str(segment),
                "local.retention.bytes": str(2 * segment),
            },
        )
        load(broker.bootstrap, args.mb)
        limit = PARTITIONS * 3 * segment
        while local_bytes(broker.data_dir) > limit:
            time.sleep(1)
        print(f"uploaded; local tail {local_bytes(broker.data_dir) / 1e6:.1f} MB", flush=True)

        from pluglog_spark import local_session

        spark = local_session(master="local[2]", app_name="spark-remote-bench")
        spark.sparkContext.setLogLevel("ERROR")
        pid = broker.proc.pid
        # Warm-up: the first query of a session pays for Spark's JIT and
        # Python workers; neither timed read should carry that.
        warm = (
            spark.read.format("pluglog")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", json.dumps({TOPIC: {"0": 100, "1": 100}}))
        )
        warm.load().selectExpr(*DIGEST).collect()
        for key, value in remote.items():
            warm = warm.option(key, value)
        warm.load().selectExpr(*DIGEST).collect()
        digests = {}
        for _round in range(args.rounds):
            for mode, options in (("broker", {}), ("direct", remote)):
                frame = (
                    spark.read.format("pluglog")
                    .option("kafka.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", TOPIC)
                    .option("startingOffsets", "earliest")
                )
                for key, value in options.items():
                    frame = frame.option(key, value)
                tail = local_bytes(broker.data_dir)
                b0, c0, t0 = bytes_out(url), cpu_seconds(pid), time.monotonic()
                row = frame.load().selectExpr(*DIGEST).collect()[0]
                wall = time.monotonic() - t0
                served, cpu = bytes_out(url) - b0, cpu_seconds(pid) - c0
                digests.setdefault(mode, set()).add(tuple(row))
                print(
                    f"{mode:6s} {wall:6.1f} s  {row.n} rows  {row.bytes / 1e6:.0f} MB values  "
                    f"broker sent {served / 1e6:8.1f} MB (local tail {tail / 1e6:.1f} MB)  "
                    f"broker CPU {cpu:.1f} s",
                    flush=True,
                )
        same = digests["broker"] == digests["direct"] and len(digests["broker"]) == 1
        print("same rows:", same)
        if not same:
            raise SystemExit(f"digests differ: {digests}")
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        moto.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
