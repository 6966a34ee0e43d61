"""A wiped replica's catch-up: tiered topic (local tail only) against a full copy.

    python3 bench/tiered_catchup.py [--mb 1024] [--runs 3] [--segment-mb 16] [--local-mb 64]

Starts a real ZooKeeper (Debian package), ``moto_server`` (S3) and three
broker processes (tests/cluster.py, ``--http`` for /metrics). Each run
makes one topic, RF=3, leader broker 2, and writes ``--mb`` MB of
incompressible 1000-byte records to it with acks=all:

* **tiered**: ``remote.storage.enable=true``, ``local.retention.bytes`` of
  ``--local-mb``; the bench waits until the leader's upload lag is 0 and
  every replica's local log is trimmed to the retention;
* **full**: the same topic without a remote tier (every byte stays local).

Then broker 3 (a follower) is SIGKILLed, its whole data dir removed, its
ZooKeeper registration left to expire, and it is started again. The clock
runs from that start until broker 3 is in the partition's ISR and its log
end offset (its /metrics) equals the leader's. Reported per mode (median of
``--runs``, the modes alternated A B, B A, ...): catch-up seconds (and the
part spent starting the process), the bytes the wiped broker then holds for
the topic (what it fetched: its log start offset tells from where), its CPU
seconds since start, and the leader's CPU in the same interval. The topic is
deleted after each run so that the next wipe copies only the next topic.
"""

import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import confluent_kafka  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.cluster import Cluster  # noqa: E402
from tests.moto_s3 import DUMMY_CREDENTIALS, MotoServer  # noqa: E402
from tests.zookeeper import ZooKeeperProcess  # noqa: E402

LEADER, VICTIM = 2, 3
ASSIGNMENT = [LEADER, 1, VICTIM]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metrics(cluster, node, topic):
    """``{metric name: value}`` of ``topic`` partition 0 on ``node``."""
    with urllib.request.urlopen(cluster.url(node) + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    wanted = {f'topic="{topic}"', 'partition="0"'}
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        name, rest = line.split("{", 1)
        labels, value = rest.rsplit("} ", 1)
        if set(labels.split(",")) == wanted:
            out[name] = float(value)
    return out


def load(bootstrap, topic, megabytes):
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            # no duplicates from retries under load: every run holds the same data
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "compression.type": "none",
        }
    )
    value = os.urandom(1000)
    failed = []
    for i in range(megabytes * 1000):
        while True:
            try:
                producer.produce(
                    topic,
                    value=value,
                    key=str(i).encode(),
                    on_delivery=lambda err, _m: err is not None and failed.append(err),
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(600)
    if failed:
        raise SystemExit(f"{len(failed)} produce(s) failed: {failed[0]}")


def make_topic(bootstrap, topic, config):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(
        topic,
        num_partitions=1,
        replica_assignment=[ASSIGNMENT],
        config={"min.insync.replicas": "2", **config},
    )
    admin.create_topics([new])[topic].result(30)


def drop_topic(cluster, topic):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics([topic])[topic].result(30)

    def gone():
        return not any(
            glob.glob(os.path.join(b.data_dir, f"{topic}-*")) for b in cluster.brokers.values()
        )

    cluster.wait_for(gone, timeout=120, what=f"{topic}'s directories to go")


def settled(cluster, topic, limit):
    """Uploads done (leader's copy lag 0) and every replica trimmed."""
    lead = metrics(cluster, LEADER, topic)
    if lead.get("pluglog_remote_copy_lag_bytes", 1) != 0:
        return False
    return all(metrics(cluster, n, topic)["pluglog_log_size_bytes"] <= limit for n in ASSIGNMENT)


def one_run(cluster, args, topic, tiered):
    segment = args.segment_mb << 20
    config = {"segment.bytes": str(segment)}
    if tiered:
        config["remote.storage.enable"] = "true"
        config["local.retention.bytes"] = str(args.local_mb << 20)
    make_topic(cluster.bootstrap, topic, config)
    cluster.wait_for_isr(topic, 1, 3)
    t = time.monotonic()
    load(cluster.bootstrap, topic, args.mb)
    write_s = time.monotonic() - t
    if tiered:
        limit = (args.local_mb << 20) + 2 * segment
        cluster.wait_for(
            lambda: settled(cluster, topic, limit), timeout=1800, interval=1, what="uploads"
        )
    cluster.wait_for_isr(topic, 1, 3)
    if cluster.leader(topic) != LEADER:
        raise SystemExit(f"{topic}: broker {cluster.leader(topic)} leads, not {LEADER}")
    lead = metrics(cluster, LEADER, topic)
    leader_end = lead["pluglog_log_end_offset"]
    cluster.kill(VICTIM)
    shutil.rmtree(cluster.brokers[VICTIM].data_dir)
    cluster.wait_for(
        lambda: VICTIM not in {b["node_id"] for b in cluster.metadata()["brokers"]},
        what="the killed broker's registration to expire",
    )
    leader_pid = cluster.brokers[LEADER].proc.pid
    leader_cpu0 = cpu_seconds(leader_pid)
    started = time.monotonic()
    wiped = cluster.restart(VICTIM, wait_expiry=False)
    listening_s = time.monotonic() - started

    def caught_up():
        if VICTIM not in cluster.partition(topic, 0)["isr"]:
            return False
        return metrics(cluster, VICTIM, topic).get("pluglog_log_end_offset") == leader_end

    cluster.wait_for(caught_up, timeout=1800, interval=0.2, what="the wiped replica")
    catchup_s = time.monotonic() - started
    leader_cpu = cpu_seconds(leader_pid) - leader_cpu0
    wiped_cpu = cpu_seconds(wiped.proc.pid)
    mine = metrics(cluster, VICTIM, topic)
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
        with open(os.path.join(args.log_dir, f"{topic}-broker-{VICTIM}.log"), "w") as out:
            out.write(wiped.log_since_start())
    held = mine["pluglog_log_size_bytes"]
    row = {
        "catchup_s": catchup_s,
        "start_s": listening_s,
        "after_start_s": catchup_s - listening_s,
        "held_mb": held / 1e6,
        "from_offset": int(mine["pluglog_log_start_offset"]),
        "end_offset": int(leader_end),
        "leader_local_mb": lead["pluglog_log_size_bytes"] / 1e6,
        "wiped_cpu_s": wiped_cpu,
        "leader_cpu_s": leader_cpu,
        "write_s": write_s,
    }
    drop_topic(cluster, topic)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="MB written per topic")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--segment-mb", type=int, default=16)
    parser.add_argument("--local-mb", type=int, default=64, help="local.retention.bytes in MiB")
    parser.add_argument("--log-dir", help="keep the restarted broker's log of each run here")
    args = parser.parse_args()
    os.environ.update(DUMMY_CREDENTIALS)
    rows = {"tiered": [], "full": []}
    # ExitStack: whatever started is stopped, also when a later start fails.
    with tempfile.TemporaryDirectory(prefix="pluglog-catchup-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        zk = ZooKeeperProcess(root / "zk").start()
        stack.callback(zk.stop)
        moto = MotoServer(root / "moto").start()
        stack.callback(moto.stop)
        moto.client().create_bucket(Bucket="catchup")
        settings = {
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "s3",
            "rsm.config.s3.bucket": "catchup",
            "rsm.config.s3.endpoint.url": moto.url,
            "remote.log.manager.task.interval.ms": "500",
            "log.retention.check.interval.ms": "1000",
            "remote.log.metadata.topic.num.partitions": "2",
            "file.delete.delay.ms": "0",
        }
        cluster = Cluster(root, zk.connect_string("/catchup"), settings=settings, http=True)
        cluster.start()
        stack.callback(cluster.stop)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        meta = NewTopic(
            "__remote_log_metadata",
            num_partitions=2,
            replica_assignment=[[1, 2, 3], [1, 2, 3]],
            config={"cleanup.policy": "compact", "min.insync.replicas": "2"},
        )
        admin.create_topics([meta])["__remote_log_metadata"].result(30)
        cluster.wait_for_isr("__remote_log_metadata", 2, 3)
        for run in range(args.runs):
            order = ("tiered", "full") if run % 2 == 0 else ("full", "tiered")
            for mode in order:
                row = one_run(cluster, args, f"{mode}-{run}", mode == "tiered")
                rows[mode].append(row)
                print(
                    f"run {run + 1} {mode:6}: caught up in {row['catchup_s']:.1f} s "
                    f"(start {row['start_s']:.1f} s, then {row['after_start_s']:.1f} s) "
                    f"holding {row['held_mb']:.1f} MB "
                    f"from offset {row['from_offset']} of {row['end_offset']}; "
                    f"wiped broker CPU {row['wiped_cpu_s']:.1f} s, "
                    f"leader CPU {row['leader_cpu_s']:.1f} s; "
                    f"write took {row['write_s']:.1f} s",
                    flush=True,
                )
    print(f"median of {args.runs} ({args.mb} MB written per topic):")
    for mode, label in (("tiered", "tiered (local tail)"), ("full", "full copy")):
        got = rows[mode]

        def med(key, got=got):
            return statistics.median(r[key] for r in got)

        print(
            f"  {label:20} catch-up {med('catchup_s'):.1f} s (start {med('start_s'):.1f} s, "
            f"after it {med('after_start_s'):.1f} s), "
            f"{med('held_mb'):.1f} MB fetched, wiped broker CPU {med('wiped_cpu_s'):.1f} s, "
            f"leader CPU {med('leader_cpu_s'):.1f} s"
        )
    ratio = statistics.median(r["catchup_s"] for r in rows["full"]) / statistics.median(
        r["catchup_s"] for r in rows["tiered"]
    )
    after = statistics.median(r["after_start_s"] for r in rows["full"]) / statistics.median(
        r["after_start_s"] for r in rows["tiered"]
    )
    print(f"  full copy / tiered catch-up time: {ratio:.1f}x (after the start: {after:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
