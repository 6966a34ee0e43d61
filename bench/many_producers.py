"""50 producer connections at once against one producer: aggregate produce throughput.

    python3 bench/many_producers.py [--n 1000000] [--producers 50] [--procs 5]
                                    [--partitions 1] [--runs 3] [--linger-ms 5]
                                    [--checkout before=/work/main ...]

One broker (``twistd -n pluglog``, default settings, fresh data dir). Each
run produces ``--n`` records of 200 B into a fresh topic twice, in
alternating order (one, many, then many, one, ...):

* ``one``: one confluent-kafka producer in one process;
* ``many``: ``--producers`` confluent-kafka producers (each its own client,
  so its own connection to the broker) spread over ``--procs`` processes,
  ``--n / --producers`` records each, all at once.

Every producer is the same code: acks=1, linger.ms=5 (librdkafka's
default; ``--linger-ms`` for a tuned figure: a longer linger means fuller
batches, fewer requests per message), records round-robin over
``--partitions``, produce() until BufferError, then poll. Each process
builds its producers and fetches metadata (connected) before a common start
signal; the aggregate is ``--n`` over the time from
the start signal to the last producer's last acknowledgement. Printed per
phase: msgs/s, the broker's CPU per message (/proc utime+stime over the
phase), the broker's share of a core, its CPU per Produce request and the
records per request (from the broker's /metrics: librdkafka's batches shrink
as producers are added, so the per-request figure tells the broker's cost
apart from the clients' batching), the clients' CPU (rusage of the
producer processes), and the medians and the ratio many / one (the issue's
target: at least 0.90). On 2 cores the client processes and the broker
compete for the CPU; the client CPU column shows how much the clients took.

``--checkout LABEL=PATH`` (repeat it) measures the broker of each checkout
in the same run, e.g. ``--checkout before=/work/main --checkout after=.``:
one broker per checkout, started from its own tree, and every run does each
checkout's phases in turn, the order rotating between runs.
"""

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

SIZE = 200


def proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce_requests(broker):
    """Produce requests the broker has answered (its /metrics on ``--http``)."""
    url = f"http://127.0.0.1:{broker.http_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(r'^pluglog_requests_total\{api="Produce"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def checkout_broker(root, data_dir):
    """A :class:`tests.broker_process.BrokerProcess` run from the checkout
    ``root``, with its /metrics on an HTTP port (request counts)."""
    from tests.broker_process import BrokerProcess, free_port

    class Broker(BrokerProcess):
        def start(self, timeout=30):
            os.makedirs(self.data_dir, exist_ok=True)
            env = dict(os.environ, PYTHONPATH=root)
            return self._spawn(
                self.command(), self._listening, "listen", timeout, env=env, cwd=root
            )

    http_port = free_port()
    broker = Broker(data_dir, extra_args=["--http", f"tcp:{http_port}:interface=127.0.0.1"])
    broker.http_port = http_port
    return broker


def parse_checkouts(parser, specs):
    """``--checkout LABEL=PATH`` values -> {label: absolute path} (this tree by default)."""
    checkouts = {}
    for spec in specs or [f"this={HERE}"]:
        label, sep, path = spec.partition("=")
        if not sep or not os.path.isdir(os.path.join(path, "pluglog")):
            parser.error(f"--checkout {spec!r}: want LABEL=PATH of a pluglog checkout")
        checkouts[label] = os.path.abspath(path)
    return checkouts


def report_medians(checkouts, results, runs, show):
    """Print each checkout's medians of ``results[label, "one"|"many"]`` and many / one."""
    print(f"load average at end: {os.getloadavg()}")
    print(f"\nmedians of {runs} run(s)")
    for label in checkouts:
        medians = {
            which: {
                key: statistics.median(r[key] for r in results[label, which])
                for key in results[label, which][0]
            }
            for which in ("one", "many")
        }
        for which in ("one", "many"):
            print(f"{label:8} " + show(which, medians[which]))
        ratio = medians["many"]["rate"] / medians["one"]["rate"]
        print(f"{label:8} many / one: {ratio:.2f} of the throughput (target >= 0.90)")


def worker(args):
    """``count`` producers in this process, ``each`` records each, after "go" on stdin."""
    import confluent_kafka

    producers = []
    for _ in range(args.count):
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": args.bootstrap,
                "acks": 1,
                "linger.ms": args.linger_ms,
                "log_level": 4,
            }
        )
        producer.list_topics(args.topic, timeout=20)  # connected, metadata known
        producers.append(producer)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    payload = b"x" * SIZE
    failed = []

    def report(err, _msg):
        if err is not None:
            failed.append(err)

    c0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.monotonic()
    chunk = 100
    left = [args.each] * len(producers)
    while any(left):
        for number, producer in enumerate(producers):
            todo = min(chunk, left[number])
            for i in range(todo):
                while True:
                    try:
                        producer.produce(
                            args.topic, payload, partition=i % args.partitions, on_delivery=report
                        )
                        break
                    except BufferError:
                        producer.poll(0.001)
            left[number] -= todo
            producer.poll(0)
    for producer in producers:
        if producer.flush(120):
            failed.append("not flushed in 120 s")
    end = time.monotonic()
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
    out = {"start": start, "end": end, "records": args.each * len(producers), "cpu": cpu}
    out["failed"] = [str(f) for f in failed[:3]]
    print(json.dumps(out), flush=True)
    return 0


def phase(broker, topic, n, producers, procs, partitions, linger_ms=5):
    """One phase: ``producers`` producers over ``procs`` processes; returns a result dict."""
    from tests.chaos import create_topic

    create_topic(broker.bootstrap, topic, partitions, rf=1, min_isr=1)
    each = n // producers
    counts = [producers // procs + (1 if i < producers % procs else 0) for i in range(procs)]
    children = []
    for count in counts:
        cmd = [sys.executable, __file__, "worker", "--bootstrap", broker.bootstrap]
        cmd += ["--topic", topic, "--count", str(count), "--each", str(each)]
        cmd += ["--partitions", str(partitions), "--linger-ms", str(linger_ms)]
        children.append(
            subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=HERE
            )
        )
    for child in children:
        if child.stdout.readline().strip() != "ready":
            raise SystemExit("a producer process did not start")
    requests0 = produce_requests(broker)
    cpu0 = proc_cpu(broker.proc.pid)
    t0 = time.monotonic()
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    outs = []
    for child in children:
        out, _ = child.communicate(timeout=600)
        outs.append(json.loads(out.strip().splitlines()[-1]))
    elapsed = max(o["end"] for o in outs) - t0
    cpu = proc_cpu(broker.proc.pid) - cpu0
    requests = produce_requests(broker) - requests0
    records = sum(o["records"] for o in outs)
    failed = [f for o in outs for f in o["failed"]]
    if failed:
        raise SystemExit(f"deliveries failed: {failed}")
    return {
        "rate": records / elapsed,
        "broker_us": 1e6 * cpu / records,
        "per_request": records / requests,
        "request_us": 1e6 * cpu / requests,
        "broker_share": cpu / elapsed,
        "client_cpu": sum(o["cpu"] for o in outs),
        "seconds": elapsed,
    }


def show(label, result):
    return (
        f"{label:5} {result['rate']:10,.0f} msgs/s  broker {result['broker_us']:5.2f} µs/msg "
        f"({100 * result['broker_share']:3.0f} % of a core, "
        f"{result['request_us']:4.0f} µs/request of {result['per_request']:5.0f} msgs)  "
        f"clients {result['client_cpu']:5.1f} s CPU in {result['seconds']:.1f} s"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--producers", type=int, default=50)
    parser.add_argument("--procs", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--checkout", action="append", metavar="LABEL=PATH")
    w = sub.add_parser("worker", help="internal: one producer process")
    w.add_argument("--bootstrap", required=True)
    w.add_argument("--topic", required=True)
    w.add_argument("--count", type=int, required=True)
    w.add_argument("--each", type=int, required=True)
    w.add_argument("--partitions", type=int, default=1)
    w.add_argument("--linger-ms", type=int, default=5)
    args = parser.parse_args()
    if args.mode == "worker":
        return worker(args)
    if args.procs > args.producers:
        parser.error("--procs must not exceed --producers")
    checkouts = parse_checkouts(parser, args.checkout)
    results = {(label, which): [] for label in checkouts for which in ("one", "many")}
    many = f"{args.producers} producers in {args.procs} processes"
    print(
        f"{args.n:,} records of {SIZE} B per phase, linger.ms={args.linger_ms}; "
        f"one producer against {many}; checkouts: {checkouts}",
        flush=True,
    )
    print(f"load average at start: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="pluglog-many-producers-") as tmp:
        brokers = {}
        try:
            for label, root in checkouts.items():
                brokers[label] = checkout_broker(root, Path(tmp) / label / "data").start()
            labels = list(checkouts)
            for number in range(args.runs):
                shift = number % len(labels)
                for label in labels[shift:] + labels[:shift]:
                    order = ("one", "many") if number % 2 == 0 else ("many", "one")
                    for which in order:
                        producers, procs = (
                            (1, 1) if which == "one" else (args.producers, args.procs)
                        )
                        topic = f"{which}-{number}"
                        result = phase(
                            brokers[label],
                            topic,
                            args.n,
                            producers,
                            procs,
                            args.partitions,
                            args.linger_ms,
                        )
                        results[label, which].append(result)
                        print(f"run {number + 1} {label:8} " + show(which, result), flush=True)
        finally:
            for broker in brokers.values():
                broker.stop()
    report_medians(checkouts, results, args.runs, show)
    return 0


if __name__ == "__main__":
    sys.exit(main())
