"""Tiered storage: upload throughput and CPU, remote fetch latency.

    python3 bench/tiered_bench.py [--mb 256] [--segment-mb 8] [--provider s3|filesystem]

Runs a real ``moto_server`` (S3) and one broker with the ``s3`` provider,
reached through a TCP gate (tests/tcp_gate.py) that starts closed:

1. ``--mb`` MB are produced to a tiered topic (``--segment-mb`` segments,
   local retention of four segments) while nothing can be uploaded;
2. the gate opens and the upload's wall time and the broker's and
   moto_server's CPU (/proc utime+stime) are read until every closed
   segment is in the bucket: **upload throughput, CPU per uploaded GB**;
3. ``--fetches`` consumers each read one record at a random remote offset
   (time from assign to the record): **remote fetch latency cold** (a chunk
   not cached) and then the same offsets again, **cached**.

Produce latency with uploads running against without them is measured by
bench/tiered_produce_p99.py (blocks of each, interleaved). The machine's
other load lands on all phases alike; run it on a quiet one for figures
worth comparing.
"""

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import confluent_kafka  # noqa: E402

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.integration.clients import create_topic  # noqa: E402
from tests.moto_s3 import DUMMY_CREDENTIALS, MotoServer  # noqa: E402
from tests.tcp_gate import TcpGate  # noqa: E402


def _stat(pid):
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()


def cpu_seconds(pid, children=False):
    """CPU (utime+stime) of ``pid``; with ``children`` also of its live
    children: the broker's upload processes (remote.log.copy.processes)
    count as the broker's."""
    fields = _stat(pid)
    ticks = int(fields[11]) + int(fields[12])
    for child in os.listdir("/proc") if children else ():
        if child.isdigit():
            try:
                found = _stat(child)
            except (OSError, IndexError):
                continue
            if int(found[1]) == pid:
                ticks += int(found[11]) + int(found[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def quantiles(samples):
    ordered = sorted(samples)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def load(bootstrap, topic, megabytes):
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20}
    )
    value = os.urandom(1000)
    for i in range(megabytes * 1000):
        while True:
            try:
                producer.produce(topic, value=value, key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(300)


def bucket_bytes(client, bucket):
    total = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        total += sum(o["Size"] for o in page.get("Contents", []) if o["Key"].endswith(".log"))
    return total


def stored_bytes(provider, s3, bucket, root):
    if provider == "s3":
        return bucket_bytes(s3, bucket)
    directory = os.path.join(root, "hist-0")
    if not os.path.isdir(directory):
        return 0
    names = [n for n in os.listdir(directory) if n.endswith(".log")]
    return sum(os.path.getsize(os.path.join(directory, n)) for n in names)


def local_closed_bytes(data_dir, topic):
    directory = os.path.join(data_dir, f"{topic}-0")
    logs = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
    return sum(os.path.getsize(os.path.join(directory, n)) for n in logs[:-1])


def fetch_latency(bootstrap, topic, offsets):
    out = []
    for offset in offsets:
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "lat", "enable.auto.commit": False}
        )
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, offset)])
        start = time.perf_counter()
        while True:
            msg = consumer.poll(10)
            if msg is not None and not msg.error():
                break
        out.append((time.perf_counter() - start) * 1000)
        consumer.close()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--segment-mb", type=int, default=8)
    parser.add_argument("--fetches", type=int, default=40)
    parser.add_argument(
        "--provider",
        choices=("s3", "filesystem"),
        default="s3",
        help="filesystem: a local directory instead of moto_server, so the store's own "
        "CPU is not on the machine's two cores (uploads are held back by a file in "
        "the root's place instead of the gate)",
    )
    args = parser.parse_args()
    os.environ.update(DUMMY_CREDENTIALS)
    work = tempfile.mkdtemp(prefix="tiered-bench-")
    moto = MotoServer(work).start()
    bucket = "bench"
    s3 = moto.client()
    s3.create_bucket(Bucket=bucket)
    gate = TcpGate(moto.port)
    segment = args.segment_mb << 20
    settings = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "s3",
        "rsm.config.s3.bucket": bucket,
        "rsm.config.s3.endpoint.url": gate.url,
        "rsm.config.s3.multipart.threshold.bytes": str(5 << 20),
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "1000",
    }
    root = os.path.join(work, "remote")
    if args.provider == "filesystem":
        settings["remote.log.storage.manager.class.name"] = "filesystem"
        settings["rsm.config.filesystem.root"] = root
    broker = BrokerProcess(os.path.join(work, "data"), settings=settings).start()
    try:
        create_topic(
            broker.bootstrap,
            "hist",
            1,
            {
                "remote.storage.enable": "true",
                "segment.bytes": str(segment),
                "local.retention.bytes": str(4 * segment),
            },
        )
        time.sleep(2)  # __remote_log_metadata is made and loaded
        gate.close()
        if args.provider == "filesystem":
            # No gate to close: hold the uploads back by making the root a file.
            shutil.rmtree(root, ignore_errors=True)
            open(root, "w").close()
        load(broker.bootstrap, "hist", args.mb)
        backlog = local_closed_bytes(broker.data_dir, "hist")
        pids = {"broker": broker.proc.pid, "moto_server": moto.proc.pid, "bench": os.getpid()}
        cpu0, t0 = {k: cpu_seconds(p, k == "broker") for k, p in pids.items()}, time.monotonic()
        gate.open()
        if args.provider == "filesystem":
            os.unlink(root)
        while stored_bytes(args.provider, s3, bucket, root) < backlog:
            time.sleep(0.2)
        elapsed = time.monotonic() - t0
        cpu = {k: cpu_seconds(p, k == "broker") - cpu0[k] for k, p in pids.items()}
        gb = backlog / 1e9
        print(
            f"backlog uploaded: {backlog / 1e6:.1f} MB in {elapsed:.1f} s "
            f"= {backlog / 1e6 / elapsed:.1f} MB/s; broker CPU {cpu['broker']:.2f} s "
            f"= {cpu['broker'] / gb:.1f} CPU-s per uploaded GB"
        )
        print(
            f"  in the same time: moto_server CPU {cpu['moto_server']:.2f} s, this process "
            f"(the TCP gate's relay, the bucket listing) {cpu['bench']:.2f} s"
        )
        time.sleep(3)  # local retention runs
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "w"}
        )
        low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition("hist", 0))
        consumer.close()
        directory = os.path.join(broker.data_dir, "hist-0")
        first_local = int(sorted(n for n in os.listdir(directory) if n.endswith(".log"))[0][:20])
        rng = random.Random(1)
        offsets = [rng.randrange(low, first_local) for _ in range(args.fetches)]
        c50, c99 = quantiles(fetch_latency(broker.bootstrap, "hist", offsets))
        h50, h99 = quantiles(fetch_latency(broker.bootstrap, "hist", offsets))
        print(f"remote fetch (assign to first record), offsets {low}-{first_local} of {high}:")
        print(f"  cold   p50 {c50:.1f} ms p99 {c99:.1f} ms (n={len(offsets)})")
        print(f"  cached p50 {h50:.1f} ms p99 {h99:.1f} ms")
    finally:
        broker.stop()
        gate.close()
        moto.stop()


if __name__ == "__main__":
    main()
