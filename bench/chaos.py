"""Chaos rounds on a local 3-broker cluster: nothing acknowledged with acks=all is lost.

A confluent-kafka producer (acks=all) writes unique values continuously to a
topic with replication factor 3 and min.insync.replicas=2 while, each round,
a seeded random victim (a partition leader, a follower, or the controller)
is SIGKILLed, the cluster fails over, and the victim is started again at
once and catches up. Every third round begins with a ZooKeeper fault: the
standalone ZooKeeper SIGKILLed or SIGTERMed (in turn) and restarted just
before the broker kill, or with ``--ensemble`` (a 3-node ZooKeeper
ensemble) one node, the ensemble's leader every other time, SIGKILLed and
restarted after the broker failover.

Prints rounds, records acked, lost (must be 0), duplicated (retries of
writes whose acknowledgement died with a leader: allowed without
idempotence), failover times, the longest time any partition had no live
leader in a broker's Metadata (must be at most 2 x the session timeout),
brokers that failed to restart (must be 0), and whether the replicas' logs
are identical batch for batch. Starts its own ZooKeeper (Debian package) and
brokers; exits 1 if any of those limits is broken.

    python3 bench/chaos.py --rounds 20 --seed 7
    python3 bench/chaos.py --rounds 20 --seed 7 --ensemble
    python3 bench/chaos.py --rounds 6 --seed 7 --fetchers 2   # num.replica.fetchers

The test suite runs a short version (tests/replication/test_chaos.py); the
pieces live in tests/chaos.py.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.chaos import compare_replicas, run_chaos  # noqa: E402
from tests.cluster import FAST_SETTINGS, Cluster  # noqa: E402
from tests.zookeeper import ZooKeeperEnsemble, ZooKeeperProcess  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rate", type=int, default=2000, help="produce rate, records/s")
    parser.add_argument("--ensemble", action="store_true", help="a 3-node ZooKeeper ensemble")
    parser.add_argument(
        "--no-zk-faults", action="store_true", help="broker kills only, no ZooKeeper faults"
    )
    parser.add_argument("--idempotent", action="store_true", help="an idempotent producer")
    parser.add_argument(
        "--checkpoint-ms",
        type=int,
        default=None,
        help="log.flush.offset.checkpoint.interval.ms (kills around checkpoints)",
    )
    parser.add_argument(
        "--fetchers", type=int, default=None, help="num.replica.fetchers of every broker"
    )
    args = parser.parse_args()
    settings = {}
    if args.checkpoint_ms is not None:
        settings["log.flush.offset.checkpoint.interval.ms"] = str(args.checkpoint_ms)
    if args.fetchers is not None:
        settings["num.replica.fetchers"] = str(args.fetchers)
    session_s = int(FAST_SETTINGS["zookeeper.session.timeout.ms"]) / 1000.0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pluglog-chaos-") as tmp:
        root = Path(tmp)
        if args.ensemble:
            zk = ZooKeeperEnsemble(root / "zk").start()
        else:
            zk = ZooKeeperProcess(root / "zk").start()
        cluster = Cluster(root, zk.connect_string("/chaos"), settings=settings).start()
        try:
            figures = run_chaos(
                cluster,
                "chaos",
                args.rounds,
                args.seed,
                args.partitions,
                args.rate,
                zk=None if args.no_zk_faults else zk,
                idempotent=args.idempotent,
            )
            figures["replica_mismatches"] = compare_replicas(cluster, "chaos", args.partitions)
        finally:
            cluster.stop()
            zk.stop()
    figures["session_timeout_s"] = session_s
    figures["wall_s"] = round(time.monotonic() - started, 1)
    for key, value in figures.items():
        print(f"{key}: {value}")
    ok = (
        figures["lost"] == 0
        and not figures["replica_mismatches"]
        and figures["restart_failures"] == 0
        and figures["longest_without_leader_s"] <= 2 * session_s
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
