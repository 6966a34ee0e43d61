"""The checkpoint's longest event-loop turns on a broker of many partitions.

    python3 bench/checkpoint_turns.py [--partitions 10000] [--n 1000000]
        [--checkpoint-ms 10000] [--seconds 30] [--rate 20000] [--runs 2]
        [--compare DIR]

One broker (default settings but ``log.flush.offset.checkpoint.interval.ms``)
started through bench/broker_probe.py; a topic of ``--partitions``
partitions (created 500 at a time) gets ``--n`` records of 200 B spread over
every partition (confluent-kafka, acks=1); then, for ``--seconds`` (at
least two checkpoints), a paced producer keeps writing ``--rate`` records a
second to random partitions, so every checkpoint has thousands of logs to
flush and a loop to hold up. Printed per run: the probe's reactor turns over
that window (p99, p99.9, max, how many over 10 and 100 ms), the fsyncs made
in the loop, and the broker's CPU. ``--compare DIR`` runs another
checkout's code (e.g. a worktree of main with its C extensions built) the
same way, alternating with this one's.
"""

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]

import broker_probe  # noqa: E402
from partitions_bench import create, proc_cpu, produce  # noqa: E402

from tests.broker_process import BrokerProcess  # noqa: E402


def paced(bootstrap, topic, rate, seconds, stop):
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 5,
            "partitioner": "random",
            "sticky.partitioning.linger.ms": 0,
            "log_level": 3,
        }
    )
    value = b"p" * 200
    start = time.monotonic()
    sent = 0
    while not stop.is_set() and time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * rate)
        while sent < due:
            try:
                producer.produce(topic, value)
                sent += 1
            except BufferError:
                break
        producer.poll(0.001)
    producer.flush(60)


def one_run(root, work, args, probe_path):
    broker = BrokerProcess(
        work / "data",
        settings={"log.flush.offset.checkpoint.interval.ms": str(args.checkpoint_ms)},
        root=root,
    ).start(timeout=120)
    try:
        create(broker.bootstrap, "t", args.partitions)
        produce(broker.bootstrap, "t", args.n, spread=True)
        pid = broker.proc.pid
        os.kill(pid, signal.SIGUSR2)  # the probe starts over
        cpu = proc_cpu(pid)
        stop = threading.Event()
        paced(broker.bootstrap, "t", args.rate, args.seconds, stop)
        cpu = proc_cpu(pid) - cpu
        path = probe_path % {"pid": pid}
        os.unlink(path)
        os.kill(pid, signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.1)
        with open(path) as handle:
            probe = json.load(handle)
    finally:
        broker.stop()
    return probe, cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=10000)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--checkpoint-ms", type=int, default=10000)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rate", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--compare", metavar="DIR", help="another checkout's code")
    parser.add_argument("--work", default=None, help="where data dirs go (default: a temp dir)")
    args = parser.parse_args()
    codes = {"this": ROOT}
    if args.compare:
        codes["other"] = os.path.abspath(args.compare)
    with tempfile.TemporaryDirectory(prefix="pluglog-ckpt-", dir=args.work) as tmp:
        probe_path = os.path.join(tmp, "probe-%(pid)s.json")
        broker_probe.probe_brokers(probe_path)
        for run in range(args.runs):
            names = list(codes) if run % 2 == 0 else list(codes)[::-1]
            for name in names:
                work = Path(tmp) / f"{name}-{run}"
                work.mkdir()
                probe, cpu = one_run(codes[name], work, args, probe_path)
                turns, syncs = probe["turns"], probe["fsync"]
                threads = probe.get("fsync_threads") or {}
                print(
                    f"run {run + 1} {name:5} {args.partitions} partitions, "
                    f"{probe['seconds']:.0f} s: turns p99 {turns['p99']} "
                    f"p99.9 {turns['p999']} max {turns['max']} ms, "
                    f"{turns['over_10ms']} over 10 ms, {turns['over_100ms']} over 100 ms"
                    f"; fsyncs in the loop {syncs.get('count', 0)} "
                    f"({syncs.get('total_ms', 0)} ms, max {syncs.get('max', 0)} ms), "
                    f"in threads {threads.get('count', 0)} "
                    f"({threads.get('total_ms', 0)} ms); "
                    f"broker CPU {cpu:.1f} s (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )


if __name__ == "__main__":
    main()
