"""Does one CreateTopics of many partitions stop the broker serving others? (issue 24)

    python3 bench/create_topics_block.py [--partitions 10000] [--runs 1] [--zookeeper]

One broker (``twistd -n pluglog``, default settings, started through
bench/broker_probe.py so its fsyncs are counted and timed from inside). A
probe producer (confluent-kafka, acks=1, linger 0) sends one 200 B record
at a time to a 1-partition topic and waits for each acknowledgement, all
the time. Then one CreateTopics of ``--partitions`` partitions is sent
(AdminClient, request timeout 900 s) and timed until its answer. Printed:
the CreateTopics time; the broker's fsyncs over that time; the probe's
acknowledgements during it, its longest wait for one and its median; the
broker's clean stop (SIGTERM until it exited) at the end. A
broker whose reactor the creation blocks answers no produce until the
creation ends. ``--zookeeper``: the broker is a 1-broker ZooKeeper cluster
(tests/zookeeper.py), whose controller writes the topic and its partition
states to ZooKeeper before the CreateTopics answer; also printed, the
seconds from the topic znode's creation to the last partition state's, by
ZooKeeper's clock (the controller's share of the time).
"""

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import broker_probe  # noqa: E402
import confluent_kafka  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import tests.broker_process  # noqa: E402

PATIENT = {"socket.timeout.ms": 300_000}


def load_average():
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


class Probe(threading.Thread):
    """Stop-and-wait produce; keeps (sent at, seconds to the ack)."""

    def __init__(self, bootstrap):
        super().__init__(daemon=True)
        self.acks = []
        self.stopping = threading.Event()
        self.producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": 1,
                "linger.ms": 0,
                "log_level": 3,
                "message.timeout.ms": 900_000,
                **PATIENT,
            }
        )

    def run(self):
        value = b"p" * 200
        while not self.stopping.is_set():
            sent = time.monotonic()
            self.producer.produce("probe", value)
            self.producer.flush(900)
            self.acks.append((sent, time.monotonic() - sent))

    def stop(self):
        self.stopping.set()
        self.join(900)


def read_probe(path, pid):
    target = path % {"pid": pid}
    if os.path.exists(target):
        os.unlink(target)
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 60
    while not os.path.exists(target) and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(target) as handle:
        return json.load(handle)


def start_broker(root, zk):
    """One broker: on its own, or a 1-broker ZooKeeper cluster (``zk``)."""
    if zk is None:
        return tests.broker_process.BrokerProcess(root / "data").start()
    from tests.cluster import Cluster

    cluster = Cluster(root / "cluster", zk.connect_string(f"/{root.name}"), 1)
    cluster.start()
    return cluster.brokers[1]


def one_run(root, partitions, probe_path, zk=None):
    broker = start_broker(root, zk)
    try:
        # librdkafka drops a connection whose request waits longer than
        # socket.timeout.ms (60 s): the old code's 10,000-partition creation
        # did, under load. Its maximum, so that the wait is measured.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **PATIENT})
        admin.create_topics([NewTopic("probe", 1, 1)])["probe"].result(60)
        probe = Probe(broker.bootstrap)
        probe.start()
        time.sleep(2)  # the probe is connected and acknowledged
        read_probe(probe_path, broker.proc.pid)
        start = time.monotonic()
        future = admin.create_topics([NewTopic("big", partitions, 1)], request_timeout=900)
        future["big"].result()
        end = time.monotonic()
        seen = read_probe(probe_path, broker.proc.pid)
        time.sleep(1)
        probe.stop()
        states_s = zk_states_seconds(zk, root, "big", partitions) if zk else None
    finally:
        stopping = time.monotonic()
        broker.stop(timeout=300)
        stop_s = time.monotonic() - stopping
    during = [wait for sent, wait in probe.acks if sent + wait >= start and sent <= end]
    return {
        "create_s": end - start,
        "fsyncs": seen["fsync"].get("count", 0),
        "fsync_s": seen["fsync"].get("total_ms", 0) / 1e3,
        "acks_during": len(during),
        "longest_ack_s": max(during, default=0.0),
        "median_ack_ms": 1e3 * statistics.median(during) if during else 0.0,
        "stop_s": stop_s,
        "states_s": states_s,
    }


def zk_states_seconds(zk, root, topic, partitions):
    """Seconds from the topic znode's creation to the last partition state
    znode's, by ZooKeeper's own clock (the znodes' ctime): the controller's
    share of the CreateTopics time."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zk.connect_string(f"/{root.name}"), timeout=30)
    client.start(timeout=30)
    try:
        _, topic_stat = client.get(f"/brokers/topics/{topic}")
        # The answer may come before the last states (after the admin
        # timeout): wait for them.
        missing, last = list(range(partitions)), 0
        deadline = time.monotonic() + 600
        while missing and time.monotonic() < deadline:
            paths = [f"/brokers/topics/{topic}/partitions/{p}/state" for p in missing]
            pending = [client.exists_async(path) for path in paths]
            stats = [result.get() for result in pending]
            last = max([last] + [stat.ctime for stat in stats if stat is not None])
            missing = [p for p, stat in zip(missing, stats) if stat is None]
            if missing:
                time.sleep(0.5)
    finally:
        client.stop()
        client.close()
    return (last - topic_stat.ctime) / 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--zookeeper",
        action="store_true",
        help="a 1-broker ZooKeeper cluster (its controller creates the topic)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pluglog-create-block-") as tmp:
        zk = None
        if args.zookeeper:
            from tests.zookeeper import ZooKeeperProcess

            zk = ZooKeeperProcess(Path(tmp) / "zk").start()
        try:
            runs(args, tmp, zk)
        finally:
            if zk is not None:
                zk.stop()


def runs(args, tmp, zk):
    probe_path = os.path.join(tmp, "probe-%(pid)s.json")
    broker_probe.probe_brokers(probe_path)
    for run in range(args.runs):
        before = load_average()
        out = one_run(Path(tmp) / f"run{run}", args.partitions, probe_path, zk)
        print(
            f"run {run + 1}: CreateTopics of {args.partitions:,} partitions "
            f"{out['create_s']:.1f} s; broker: {out['fsyncs']:,} fsyncs "
            f"({out['fsync_s']:.1f} s); probe: {out['acks_during']} acks during it, "
            f"longest wait {out['longest_ack_s']:.2f} s, median "
            f"{out['median_ack_ms']:.1f} ms; clean stop {out['stop_s']:.1f} s; "
            + (
                f"states in ZooKeeper {out['states_s']:.1f} s after the topic; "
                if out["states_s"] is not None
                else ""
            )
            + f"load {before} -> {load_average()}",
            flush=True,
        )


if __name__ == "__main__":
    main()
