"""50 producer connections against one, with clients too cheap to be the limit.

    python3 bench/many_raw_producers.py [--producers 50] [--procs 5] [--batch 50]
        [--depth 16] [--partitions 1] [--seconds 8] [--warmup 2] [--runs 3]
        [--checkout before=/path ...]

bench/many_producers.py runs the issue's 50 producers with confluent-kafka;
on this 2-core machine those 50 clients use the whole machine while the
broker gets a third of a core, so its ratio measures the clients. This
script asks the broker question: does a saturated broker serve 50
connections' produce as fast as one connection's?

One broker (``twistd -n pluglog``, default settings, fresh data dir) per
``--checkout``. Per run, in alternating order, a fresh topic of
``--partitions`` partitions and one of two phases:

* ``one``: one connection;
* ``many``: ``--producers`` connections over ``--procs`` processes.

Every connection is the same raw client as bench/workers_capacity.py's: a
socket sending one pre-encoded Produce v8 request (one batch of ``--batch``
x 200 B, acks=1, uncompressed: the broker walks and CRC-checks every record)
over and over, ``--depth`` requests in flight, answers counted and not
decoded (one in 1000 has its error code checked); connection ``i`` writes
partition ``i % --partitions``. After ``--warmup`` seconds a window of
``--seconds`` is measured: records acknowledged in it, and from /proc the
CPU of the broker, of the client processes and of the whole machine. A
broker near 100 % of a core with the clients well below it is the broker's
capacity; the ratio many / one of those capacities is the issue's target
(at least 0.90).
"""

import argparse
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [HERE, os.path.join(HERE, "bench")]

from many_producers import checkout_broker, parse_checkouts, report_medians  # noqa: E402
from workers_capacity import (  # noqa: E402
    check,
    machine_busy,
    open_window,
    proc_cpu,
    produce_request,
    split_answers,
)


def worker(args):
    """``--count`` connections; prints the answers counted in the window t0..t1 (stdin)."""
    conns = []
    for number in range(args.count):
        sock = socket.create_connection(("127.0.0.1", args.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        partition = (args.first + number) % args.partitions
        request = produce_request(partition, args.batch, topic=args.topic)
        buf = bytearray()
        sock.sendall(request)  # one stop-and-wait round trip: served, no error
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise SystemExit("the broker closed the connection")
            buf.extend(chunk)
            count, last = split_answers(buf)
            if count:
                check(last)
                break
        conns.append((sock, request, buf))
    print("ready", flush=True)
    t0, t1 = (float(x) for x in sys.stdin.readline().split())
    selector = selectors.DefaultSelector()
    for sock, request, buf in conns:
        sock.setblocking(False)
        sock.sendall(request * args.depth)
        selector.register(sock, selectors.EVENT_READ, (request, buf))
    counted = seen = 0
    while time.monotonic() < t1:
        for key, _ in selector.select(timeout=0.2):
            request, buf = key.data
            try:
                chunk = key.fileobj.recv(1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise SystemExit("the broker closed the connection")
            buf.extend(chunk)
            count, last = split_answers(buf)
            if not count:
                continue
            if t0 <= time.monotonic() < t1:
                counted += count
            seen += count
            if seen % 1000 < count:
                check(last)
            # Small writes fit the socket buffer; a full one would block
            # this loop, which the answers then drain.
            key.fileobj.setblocking(True)
            key.fileobj.sendall(request * count)
            key.fileobj.setblocking(False)
    print(json.dumps({"answers": counted}), flush=True)
    return 0


def phase(broker, topic, args, connections, procs):
    """One measured window; returns a result dict."""
    from tests.chaos import create_topic

    create_topic(broker.bootstrap, topic, args.partitions, rf=1, min_isr=1)
    counts = [connections // procs + (1 if i < connections % procs else 0) for i in range(procs)]
    children, first = [], 0
    for count in counts:
        cmd = [sys.executable, __file__, "worker", "--port", str(broker.port)]
        cmd += ["--topic", topic, "--count", str(count), "--first", str(first)]
        cmd += ["--partitions", str(args.partitions), "--batch", str(args.batch)]
        cmd += ["--depth", str(args.depth)]
        first += count
        children.append(
            subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=HERE
            )
        )
    _, t1 = open_window(children, args.warmup, args.seconds)
    pids = [broker.proc.pid] + [c.pid for c in children]
    before = [proc_cpu(pid) for pid in pids] + [machine_busy()]
    time.sleep(max(0.0, t1 - time.monotonic()))
    after = [proc_cpu(pid) for pid in pids] + [machine_busy()]
    used = [b - a for a, b in zip(before, after, strict=True)]
    answers = 0
    for child in children:
        out, _ = child.communicate(timeout=60)
        if child.returncode:
            raise SystemExit(f"a producer process failed: {out[-500:]}")
        answers += json.loads(out.strip().splitlines()[-1])["answers"]
    records = answers * args.batch
    broker_cpu, clients_cpu, machine = used[0], sum(used[1:-1]), used[-1]
    return {
        "rate": records / args.seconds,
        "broker_us": 1e6 * broker_cpu / max(records, 1),
        "broker_share": broker_cpu / args.seconds,
        "clients_share": clients_cpu / args.seconds,
        "other_share": (machine - broker_cpu - clients_cpu) / args.seconds,
    }


def show(label, result):
    return (
        f"{label:5} {result['rate']:11,.0f} msgs/s  broker {result['broker_us']:5.3f} µs/msg "
        f"({100 * result['broker_share']:3.0f} % of a core)  clients "
        f"{100 * result['clients_share']:3.0f} %  rest of the machine "
        f"{100 * result['other_share']:3.0f} %"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode")
    parser.add_argument("--producers", type=int, default=50)
    parser.add_argument("--procs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--checkout", action="append", metavar="LABEL=PATH")
    w = sub.add_parser("worker", help="internal: one client process")
    for name in ("--port", "--count", "--first", "--partitions", "--batch", "--depth"):
        w.add_argument(name, type=int, required=True)
    w.add_argument("--topic", required=True)
    args = parser.parse_args()
    if args.mode == "worker":
        return worker(args)
    if not 1 <= args.procs <= args.producers:
        parser.error("--procs must be between 1 and --producers")
    checkouts = parse_checkouts(parser, args.checkout)
    print(
        f"raw Produce v8 clients, batch {args.batch} x 200 B, depth {args.depth} per "
        f"connection, {args.partitions} partition(s); one connection against "
        f"{args.producers} in {args.procs} processes; window {args.seconds} s",
        flush=True,
    )
    print(f"load average at start: {os.getloadavg()}", flush=True)
    results = {(label, which): [] for label in checkouts for which in ("one", "many")}
    with tempfile.TemporaryDirectory(prefix="pluglog-many-raw-") as tmp:
        brokers = {}
        try:
            for label, root in checkouts.items():
                brokers[label] = checkout_broker(root, Path(tmp) / label / "data").start()
            for number in range(args.runs):
                order = ("one", "many") if number % 2 == 0 else ("many", "one")
                for label in checkouts:
                    for which in order:
                        shape = (1, 1) if which == "one" else (args.producers, args.procs)
                        topic = f"{which}-{number}"
                        result = phase(brokers[label], topic, args, *shape)
                        results[label, which].append(result)
                        print(f"run {number + 1} {label:8} " + show(which, result), flush=True)
        finally:
            for broker in brokers.values():
                broker.stop()
    report_medians(checkouts, results, args.runs, show)
    return 0


if __name__ == "__main__":
    sys.exit(main())
