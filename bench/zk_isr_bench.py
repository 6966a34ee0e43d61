"""A leader's ISR writes to ZooKeeper at many partitions, in process (issue 24).

    python3 bench/zk_isr_bench.py [--partitions 10000] [--rounds 4]
        [--idle 30] [--code DIR]

One real ZooKeeper (tests/zookeeper.py) and two in-process ZooKeeper
coordinators (tests/zk_cluster.py: brokers 1 and 2, each its own kazoo
session, on a private reactor thread), with a topic whose every partition is
led by broker 1 and followed by broker 2. No broker, no logs: only the
coordinator's ZooKeeper work is measured.

* ``isr``: broker 1 calls ``alter_isr`` for every partition at once
  (ISR [1, 2] -> [1], then back, ``--rounds`` times), as a follower leaving
  and rejoining every ISR makes it do; timed from the calls until every
  Deferred has fired and broker 2's cache has seen every new ISR (its
  watches' reads). Partitions per second, and the process's CPU per
  partition write (both coordinators and the ZooKeeper client threads; the
  ZooKeeper server's CPU apart, from /proc).
* ``idle``: then ``--idle`` seconds with nothing to do but the controller's
  leader-imbalance check every 5 s (``leader.imbalance.check.interval.seconds``);
  the process's and ZooKeeper's CPU over that time.

``--code DIR`` imports pluglog from DIR (another checkout: the code before a
change) instead of this one; the tests' helpers still come from here.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_seconds(pid="self"):
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--code", help="import pluglog from this checkout")
    args = parser.parse_args()
    sys.path[:0] = ([args.code] if args.code else []) + [HERE]

    import pluglog
    from tests.zk_cluster import CoordinatorNode, ReactorThread
    from tests.zookeeper import ZooKeeperProcess, new_chroot

    print(f"pluglog from {os.path.dirname(os.path.dirname(pluglog.__file__))}")
    n = args.partitions
    with tempfile.TemporaryDirectory(prefix="zk-isr-bench-") as tmp:
        zk = ZooKeeperProcess(Path(tmp) / "zk").start()
        rt = ReactorThread()
        nodes = []
        try:
            connect = zk.connect_string(new_chroot())
            settings = {
                "zookeeper_session_timeout_ms": 30000,
                "leader_imbalance_check_interval_seconds": 5,
            }
            for broker_id in (1, 2):
                node = CoordinatorNode(rt, connect, broker_id, Path(tmp), **settings)
                nodes.append(node.start())
            leader, follower = nodes
            rt.wait(lambda: leader.co.controller_id() == 1, timeout=60)
            cpu0, zk0 = cpu_seconds(), cpu_seconds(zk.proc.pid)
            began = time.monotonic()
            leader.call(
                "create_topic",
                "isr",
                n,
                2,
                {},
                assignments={p: [1, 2] for p in range(n)},
                timeout=900,
            )

            def all_states(node, isr):
                def check():
                    states = [node.co.partition_state("isr", p) for p in range(n)]
                    return all(s is not None and s.isr == isr for s in states)

                return check

            rt.wait(all_states(leader, (1, 2)), timeout=900, interval=0.5)
            rt.wait(all_states(follower, (1, 2)), timeout=900, interval=0.5)
            took = time.monotonic() - began
            cpu, zk_cpu = cpu_seconds() - cpu0, cpu_seconds(zk.proc.pid) - zk0
            print(
                f"{n} partitions created in {took:.1f} s ({n / took:,.0f} states/s, "
                "until both brokers' caches had them all); "
                f"process CPU {cpu * 1e6 / n:.0f} us/partition, "
                f"ZooKeeper {zk_cpu * 1e6 / n:.0f} us/partition"
            )

            isr = (1, 2)
            for round_ in range(args.rounds):
                target = (1,) if isr == (1, 2) else (1, 2)
                done = []

                def write_all(target=target, done=done):
                    for p in range(n):
                        state = leader.co.partition_state("isr", p)
                        d = leader.co.alter_isr("isr", p, state, target)
                        d.addCallbacks(lambda _: done.append(True), done.append)

                cpu0, zk0 = cpu_seconds(), cpu_seconds(zk.proc.pid)
                began = time.monotonic()
                rt.call(write_all)
                rt.wait(lambda done=done: len(done) == n, timeout=900, interval=0.02)
                written = time.monotonic() - began
                rt.wait(all_states(follower, target), timeout=900, interval=0.02)
                seen = time.monotonic() - began
                cpu, zk_cpu = cpu_seconds() - cpu0, cpu_seconds(zk.proc.pid) - zk0
                failed = [f for f in done if f is not True]
                print(
                    f"isr round {round_} {list(isr)} -> {list(target)}: "
                    f"{n / written:,.0f} writes/s (all written in {written:.2f} s, "
                    f"the follower saw them all at {seen:.2f} s); "
                    f"process CPU {cpu * 1e6 / n:.0f} us/partition, "
                    f"ZooKeeper {zk_cpu * 1e6 / n:.0f} us/partition; failed {len(failed)}"
                )
                isr = target

            if not args.idle:
                return
            cpu0, zk0 = cpu_seconds(), cpu_seconds(zk.proc.pid)
            time.sleep(args.idle)
            cpu, zk_cpu = cpu_seconds() - cpu0, cpu_seconds(zk.proc.pid) - zk0
            print(
                f"idle {args.idle:.0f} s (imbalance check every 5 s): process CPU "
                f"{cpu:.2f} s ({100 * cpu / args.idle:.1f} % of a core), "
                f"ZooKeeper {zk_cpu:.2f} s ({100 * zk_cpu / args.idle:.1f} %)"
            )
        finally:
            for node in nodes:
                try:
                    node.stop()
                except Exception as exc:  # noqa: BLE001 - report, then stop the rest
                    print(f"stopping broker {node.broker_id}: {exc!r}")
            rt.stop()
            zk.stop()


if __name__ == "__main__":
    main()
