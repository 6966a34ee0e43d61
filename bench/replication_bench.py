"""Produce throughput on 3 local brokers: RF=3 acks=all against RF=1 acks=1, same run.

Starts its own ZooKeeper (Debian package) and three broker processes on
127.0.0.1, creates one topic per configuration (same partition count), and
runs the same confluent-kafka producer (200-byte values, linger.ms=5) against
each, interleaved ``--runs`` times. While the RF=3 run loads the cluster, the
replication lag is sampled every 100 ms as the bytes by which each follower's
log for the partitions trails the leader's (partition directory sizes on disk,
which the brokers write as they append). Prints msgs/s, MB/s, the ratio and
the lag figures; bench/RESULTS.md keeps them.

    python3 bench/replication_bench.py --n 200000 --runs 3
"""

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import confluent_kafka  # noqa: E402

from tests.chaos import create_topic  # noqa: E402
from tests.cluster import Cluster  # noqa: E402
from tests.zookeeper import ZooKeeperProcess  # noqa: E402


def produce(bootstrap, topic, n, acks, size=200):
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 200000,
        }
    )
    value = b"x" * size
    failed = []

    def report(err, _msg):
        if err is not None:
            failed.append(err)

    start = time.monotonic()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
    producer.flush(120)
    elapsed = time.monotonic() - start
    if failed:
        raise RuntimeError(f"{len(failed)} records failed, e.g. {failed[0]}")
    return n / elapsed


def cluster_cpu(cluster):
    """CPU seconds of all broker processes (/proc)."""
    total = 0.0
    for broker in cluster.brokers.values():
        with open(f"/proc/{broker.proc.pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def dir_size(path):
    return sum(f.stat().st_size for f in Path(path).glob("*.log")) if Path(path).exists() else 0


class LagSampler(threading.Thread):
    """Bytes by which followers trail the leader, per partition, every 100 ms."""

    def __init__(self, cluster, topic, partitions):
        super().__init__(daemon=True)
        self.samples = []
        self.stop_event = threading.Event()
        self.layout = []
        for p in range(partitions):
            info = cluster.partition(topic, p)
            dirs = {
                n: Path(cluster.brokers[n].data_dir) / f"{topic}-{p}" for n in info["replicas"]
            }
            self.layout.append((info["leader"], dirs))

    def run(self):
        while not self.stop_event.is_set():
            for leader, dirs in self.layout:
                lead = dir_size(dirs[leader])
                for node, path in dirs.items():
                    if node != leader:
                        self.samples.append(max(0, lead - dir_size(path)))
            time.sleep(0.1)

    def stop(self):
        self.stop_event.set()
        self.join()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting, e.g. max.incremental.fetch.session.cache.slots=0 (no sessions)",
    )
    args = parser.parse_args()
    settings = dict(item.split("=", 1) for item in args.set)
    rates = {"rf1_acks1": [], "rf3_acksall": []}
    cpus = {"rf1_acks1": [], "rf3_acksall": []}
    lags = []
    with tempfile.TemporaryDirectory(prefix="pluglog-repl-bench-") as tmp:
        root = Path(tmp)
        zk = ZooKeeperProcess(root / "zk").start()
        cluster = Cluster(root, zk.connect_string("/bench"), settings=settings).start()
        try:
            for run in range(args.runs):
                rf1, rf3 = f"rf1-{run}", f"rf3-{run}"
                create_topic(cluster.bootstrap, rf1, args.partitions, rf=1, min_isr=1)
                create_topic(cluster.bootstrap, rf3, args.partitions, rf=3, min_isr=2)
                cluster.wait_for_isr(rf3, args.partitions, 3)
                c0 = cluster_cpu(cluster)
                rates["rf1_acks1"].append(produce(cluster.bootstrap, rf1, args.n, "1"))
                cpus["rf1_acks1"].append((cluster_cpu(cluster) - c0) / args.n)
                sampler = LagSampler(cluster, rf3, args.partitions)
                sampler.start()
                c0 = cluster_cpu(cluster)
                rates["rf3_acksall"].append(produce(cluster.bootstrap, rf3, args.n, "all"))
                cpus["rf3_acksall"].append((cluster_cpu(cluster) - c0) / args.n)
                sampler.stop()
                lags.extend(sampler.samples)
                print(
                    f"run {run + 1}: RF=1 acks=1 {rates['rf1_acks1'][-1]:,.0f} msgs/s, "
                    f"RF=3 acks=all {rates['rf3_acksall'][-1]:,.0f} msgs/s",
                    flush=True,
                )
        finally:
            cluster.stop()
            zk.stop()
    rf1 = statistics.median(rates["rf1_acks1"])
    rf3 = statistics.median(rates["rf3_acksall"])
    lags.sort()
    print(f"RF=1 acks=1   median {rf1:,.0f} msgs/s ({rf1 * 200 / 1e6:.1f} MB/s)")
    print(f"RF=3 acks=all median {rf3:,.0f} msgs/s ({rf3 * 200 / 1e6:.1f} MB/s)")
    print(f"ratio RF=3/RF=1: {rf3 / rf1:.2f}")
    for key, label in (("rf1_acks1", "RF=1 acks=1"), ("rf3_acksall", "RF=3 acks=all")):
        per = statistics.median(cpus[key]) * 1e6
        print(f"{label}: CPU of all three brokers {per:.2f} us per message (median)")
    if lags:
        print(
            "follower lag behind leader (bytes): "
            f"median {lags[len(lags) // 2]:,}, p99 {lags[int(len(lags) * 0.99)]:,}, "
            f"max {lags[-1]:,} over {len(lags)} samples"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
