"""Schema registry on a 3-broker cluster: write latency and follower read lag.

Starts a real ZooKeeper and three ``twistd pluglog --http`` brokers
(tests/cluster.py), then registers ``--n`` distinct schemas alternately
through the leader of ``_schemas``-0 (local write) and through a follower
(forwarded over HTTP), and after each write polls the other follower every
10 ms until it serves the new id. Prints medians and p95s in milliseconds.

    PYTHONPATH=$PWD python3 bench/registry_cluster_bench.py --n 100 [--fetch-wait-ms 500]

A follower learns the new high watermark from its next fetch response, which
the leader holds for up to ``replica.fetch.wait.max.ms`` when no new data
comes: that, not the registry's 0.1 s tail, is most of the read lag.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cluster import Cluster  # noqa: E402
from tests.integration.registry_helpers import http  # noqa: E402
from tests.zookeeper import ZooKeeperProcess, new_chroot  # noqa: E402


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument(
        "--fetch-wait-ms", type=int, default=500, help="replica.fetch.wait.max.ms (Kafka's 500)"
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="registry-bench-"))
    zk = ZooKeeperProcess(root / "zk").start()
    settings = {"replica.fetch.wait.max.ms": str(args.fetch_wait_ms)}
    cluster = Cluster(
        root, zk.connect_string(new_chroot()), brokers=3, settings=settings, http=True
    )
    try:
        cluster.start()
        for node in cluster.brokers:
            cluster.wait_for(lambda n=node: http(cluster.url(n) + "/subjects")[0] == 200)
        http(cluster.url(1) + "/config", "PUT", {"compatibility": "NONE"})
        cluster.wait_for_isr("_schemas", 1, 3)
        leader = cluster.leader("_schemas")
        follower, other = sorted(set(cluster.brokers) - {leader})
        latency = {"leader": [], "forwarded": []}
        lag = []
        for i in range(args.n):
            via, node = ("leader", leader) if i % 2 == 0 else ("forwarded", follower)
            schema = json.dumps({"type": "fixed", "name": f"F{i}", "size": 4})
            start = time.monotonic()
            status, _ctype, body = http(
                f"{cluster.url(node)}/subjects/bench-value/versions", "POST", {"schema": schema}
            )
            done = time.monotonic()
            assert status == 200, body
            latency[via].append((done - start) * 1000)
            while http(f"{cluster.url(other)}/schemas/ids/{body['id']}")[0] != 200:
                time.sleep(0.01)
            lag.append((time.monotonic() - done) * 1000)
        for via, values in latency.items():
            print(
                f"register via {via}: median {statistics.median(values):.1f} ms, "
                f"p95 {pct(values, 0.95):.1f} ms ({len(values)} writes)"
            )
        print(
            f"other follower serves the id after: median {statistics.median(lag):.1f} ms, "
            f"p95 {pct(lag, 0.95):.1f} ms, max {max(lag):.1f} ms"
        )
    finally:
        cluster.stop()
        zk.stop()


if __name__ == "__main__":
    main()
