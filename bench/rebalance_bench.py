"""Rebalance time: the classic group protocol against KIP-848's consumer protocol.

    python3 bench/rebalance_bench.py --runs 3

One broker (tests/broker_process.py) with ``group.consumer.heartbeat.interval.ms``
500 and a 12-partition topic. Per run and protocol, three confluent-kafka
consumers (threads polling every 50 ms) form a group; then

* **join**: a fourth subscribes; timed until the four hold the 12 partitions
  between them, each exactly once, each member at least one;
* **leave**: one closes (LeaveGroup / epoch -1); timed until the three left
  hold all 12 again.

Protocols: ``classic`` (librdkafka's default eager ``range,roundrobin``,
heartbeat 500 ms, session 6 s), ``cooperative`` (classic with
``cooperative-sticky``, incremental) and ``consumer`` (``group.protocol=consumer``,
the broker's uniform assignor, heartbeat 500 ms from the broker). Also
printed: how many partition-seconds the group held nothing for (the sum over
partitions of the time no member owned them during the change: what eager
rebalancing stops) and the broker CPU of the change (/proc). Median of the
runs; protocols alternate within each run.

``--in-process`` instead measures the coordinator's own cost of a steady
KIP-848 heartbeat (decode, handler, encode; a Clock, memory storage, no
sockets) for groups of 10, 100 and 1000 members on 1000 partitions: the
work a broker does per member every ``group.consumer.heartbeat.interval.ms``.
"""

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import confluent_kafka  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.broker_process import BrokerProcess  # noqa: E402

PARTITIONS = 12
PROTOCOLS = {
    "classic": {
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "partition.assignment.strategy": "range,roundrobin",
    },
    "cooperative": {
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "partition.assignment.strategy": "cooperative-sticky",
    },
    "consumer": {"group.protocol": "consumer"},
}


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Member(threading.Thread):
    def __init__(self, bootstrap, group, topic, config):
        super().__init__(daemon=True)
        # range and roundrobin revoke and assign everything at each change.
        self.eager = "range" in config.get("partition.assignment.strategy", "")
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                **config,
            }
        )
        # Ownership is tracked in the rebalance callbacks, at the moment
        # librdkafka hands partitions over or takes them back.
        self.consumer.subscribe(
            [topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked
        )
        self.owned = set()
        self.stopping = threading.Event()
        self.start()

    def _assigned(self, consumer, parts):
        got = {tp.partition for tp in parts}
        self.owned = got if self.eager else self.owned | got

    def _revoked(self, consumer, parts):
        gone = {tp.partition for tp in parts}
        self.owned = set() if self.eager else self.owned - gone

    def run(self):
        while not self.stopping.is_set():
            self.consumer.poll(0.05)
        self.consumer.close()
        self.owned = set()

    def stop(self):
        self.stopping.set()
        self.join(30)


def timed_change(members, change, pid, timeout=60):
    """Run ``change``; seconds until ``members`` cover every partition once,
    the partition-seconds left unowned meanwhile, and broker CPU seconds."""
    cpu0, start = cpu_seconds(pid), time.monotonic()
    change()
    unowned = 0.0
    last = start
    while True:
        now = time.monotonic()
        held = [m.owned for m in members]
        flat = sorted(p for s in held for p in s)
        unowned += (PARTITIONS - len(set(flat))) * (now - last)
        last = now
        if flat == list(range(PARTITIONS)) and all(held):
            return now - start, unowned, cpu_seconds(pid) - cpu0
        if now - start > timeout:
            raise RuntimeError(f"no full assignment after {timeout}s: {held}")
        time.sleep(0.01)


def one_run(bootstrap, pid, protocol, n):
    topic, group = f"rb-{protocol}-{n}", f"rb-{protocol}-{n}-g"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result()
    config = PROTOCOLS[protocol]
    members = [Member(bootstrap, group, topic, config) for _ in range(3)]
    try:
        timed_change(members, lambda: None, pid)
        time.sleep(1)  # settled
        joiner = []

        def join():
            joiner.append(Member(bootstrap, group, topic, config))
            members.append(joiner[0])

        joined = timed_change(members, join, pid)
        time.sleep(1)
        leaver = members.pop(0)
        left = timed_change(members, leaver.stop, pid)
        return {"join": joined, "leave": left}
    finally:
        for m in members:
            m.stop()


def in_process(rounds=5):
    import tempfile as tf
    from pathlib import Path

    from tests.unit.test_consumer_groups import Member, converge
    from tests.unit.test_group_coordinator import Env, result_of

    for size in (10, 100, 1000):
        with tf.TemporaryDirectory() as work:
            env = Env(Path(work), group_consumer_session_timeout_ms=10**9)
            env.broker.group_coordinator = env.gc
            result_of(env.broker.create_topic("t", 1000, 1))
            members = [Member(env) for _ in range(size)]
            for m in members:
                m.heartbeat()
            converge(members, rounds=50)
            samples = []
            for _ in range(rounds):
                start = time.perf_counter()
                for m in members:
                    assert m.heartbeat()["error_code"] == 0
                samples.append((time.perf_counter() - start) / size)
            per = statistics.median(samples) * 1e6
            print(f"{size:5d} members: {per:7.1f} us per steady heartbeat", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--in-process", action="store_true", help="heartbeat cost only")
    args = parser.parse_args()
    if args.in_process:
        return in_process()
    results = {p: {"join": [], "leave": []} for p in PROTOCOLS}
    with tempfile.TemporaryDirectory(prefix="rebalance-") as work:
        broker = BrokerProcess(
            os.path.join(work, "data"),
            settings={
                "group.consumer.heartbeat.interval.ms": "500",
                "group.consumer.session.timeout.ms": "6000",
            },
        ).start()
        try:
            for n in range(args.runs):
                for protocol in PROTOCOLS:
                    got = one_run(broker.bootstrap, broker.proc.pid, protocol, n)
                    for phase, figures in got.items():
                        results[protocol][phase].append(figures)
                    print(f"run {n} {protocol}: {got}", flush=True)
        finally:
            broker.stop()
    print("\n| protocol | change | seconds | unowned partition-s | broker CPU ms |")
    print("|---|---|---|---|---|")
    for protocol, phases in results.items():
        for phase, runs in phases.items():
            secs, unowned, cpu = (statistics.median(x[i] for x in runs) for i in range(3))
            print(f"| {protocol} | {phase} | {secs:.2f} | {unowned:.1f} | {cpu * 1000:.0f} |")


if __name__ == "__main__":
    main()
