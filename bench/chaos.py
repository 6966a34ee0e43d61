"""Chaos rounds on a local 3-broker cluster: nothing acknowledged with acks=all is lost.

A confluent-kafka producer (acks=all) writes unique values continuously to a
topic with replication factor 3 and min.insync.replicas=2 while, each round,
a seeded random victim (a partition leader, a follower, or the controller)
is SIGKILLed, the cluster fails over, and the victim comes back and catches
up. Prints rounds, records acked, lost (must be 0), duplicated (retries of
writes whose acknowledgement died with a leader: allowed without
idempotence), failover times, and whether the replicas' logs are identical
batch for batch. Starts its own ZooKeeper (Debian package) and brokers.

    python3 bench/chaos.py --rounds 20 --seed 7

The test suite runs a short version (tests/replication/test_chaos.py); the
pieces live in tests/chaos.py.
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.chaos import compare_replicas, run_chaos  # noqa: E402
from tests.cluster import Cluster  # noqa: E402
from tests.zookeeper import ZooKeeperProcess  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rate", type=int, default=2000, help="produce rate, records/s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pluglog-chaos-") as tmp:
        root = Path(tmp)
        zk = ZooKeeperProcess(root / "zk").start()
        cluster = Cluster(root, zk.connect_string("/chaos")).start()
        try:
            figures = run_chaos(
                cluster, "chaos", args.rounds, args.seed, args.partitions, args.rate
            )
            figures["replica_mismatches"] = compare_replicas(cluster, "chaos", args.partitions)
        finally:
            cluster.stop()
            zk.stop()
    for key, value in figures.items():
        print(f"{key}: {value}")
    return 0 if figures["lost"] == 0 and not figures["replica_mismatches"] else 1


if __name__ == "__main__":
    sys.exit(main())
