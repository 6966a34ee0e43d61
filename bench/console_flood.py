"""A scripted flood of console requests beside a produce benchmark (issue 23).

    python3 bench/console_flood.py [--rounds 4] [--seconds 8] [--workers 4] [--root CHECKOUT ...]

One ``twistd pluglog --http`` broker (a fresh data dir, 127.0.0.1) holds
the console tests' data (tests/integration/console_data.py) and 200 more
topics. A stop-and-wait producer (confluent-kafka, acks=1, 50 x 200-byte
records per flush, as the paper benchmark's batch-50 test) runs for
``--seconds`` per phase; phases alternate, ``--rounds`` times each:

* ``quiet``: the producer alone;
* ``flood``: the producer while ``--workers`` processes request console
  pages as fast as the broker answers them: the overview, the topics list
  at the largest page size, a topic, the message browser at the largest
  page, a record, the group page, and every malformed URL of
  tests/integration/test_console_http.py's BAD list.

Per phase it prints the producer's batches per second and round-trip
percentiles, the console requests answered (by status) and refused
connections, and the broker's CPU (/proc utime+stime) per produced message
and per second. The medians per phase kind follow. Give ``--root`` twice
(another checkout, then this one) to compare two versions of the broker in
one run: both brokers run side by side, their phases interleaved. Everything runs on this
machine: the flood's clients and the producer compete with the broker for
the same cores, so part of a slowdown is the machine's, not the reactor's.
"""

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.broker_process import BrokerProcess, free_port  # noqa: E402
from tests.integration import console_data as data  # noqa: E402

PAGES = [
    "/console/",
    "/console/topics?size=500",
    f"/console/topics/{data.TOPIC}",
    f"/console/topics/{data.TOPIC}/0?limit=500",
    f"/console/topics/{data.TOPIC}/0/2",
    f"/console/groups/{data.GROUP}",
    "/console/groups",
]
BAD = [
    f"/console/topics/{data.TOPIC}/abc",
    f"/console/topics/{data.TOPIC}/0?offset=-5",
    f"/console/topics/{data.TOPIC}/0?offset=" + "9" * 30,
    f"/console/topics/{data.TOPIC}/0?offset=" + "9" * 5000,
    f"/console/topics/{data.TOPIC}/0?offset=%FF",
    f"/console/topics/{data.TOPIC}/0?time=2024-13-45T99:00Z",
    f"/console/topics/{data.TOPIC}/0?limit=99999999999",
    "/console/topics?size=1000000000",
    "/console/topics/%3Cscript%3Ealert(1)%3C%2Fscript%3E",
    "/console/topics/%FF%FE",
    "/console/static/../../../etc/passwd",
    "/console/actions/delete-topic?topic=x",
]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def flood(base, stop, counts, refused):
    """One worker: request every path in turn until ``stop`` is set."""
    paths = PAGES + BAD
    i = 0
    while not stop.is_set():
        path = paths[i % len(paths)]
        i += 1
        try:
            with urllib.request.urlopen(base + path, timeout=30) as response:
                response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            exc.read()
            exc.close()
            status = exc.code
        except OSError:
            with refused.get_lock():
                refused.value += 1
            continue
        slot = counts[status // 100]
        with slot.get_lock():
            slot.value += 1


def produce_phase(bootstrap, seconds):
    """Stop-and-wait batches of 50 for ``seconds``: (batches, [round trip s])."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, "batch.num.messages": 50}
    )
    value = b"x" * 200
    trips = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        for _ in range(50):
            producer.produce("flood-bench", value)
        if producer.flush(30) != 0:
            raise SystemExit("a produce batch was not acknowledged")
        trips.append(time.perf_counter() - started)
    return trips


def run_phase(kind, broker, base, seconds, workers):
    stop = multiprocessing.Event()
    counts = {k: multiprocessing.Value("l", 0) for k in range(1, 6)}
    refused = multiprocessing.Value("l", 0)
    procs = []
    if kind == "flood":
        procs = [
            multiprocessing.Process(target=flood, args=(base, stop, counts, refused))
            for _ in range(workers)
        ]
        for proc in procs:
            proc.start()
        time.sleep(0.5)  # the flood is under way before the producer starts
    cpu0, t0 = cpu_seconds(broker.proc.pid), time.monotonic()
    trips = produce_phase(broker.bootstrap, seconds)
    cpu1, t1 = cpu_seconds(broker.proc.pid), time.monotonic()
    stop.set()
    for proc in procs:
        proc.join(60)
    messages = 50 * len(trips)
    answered = {f"{k}xx": v.value for k, v in counts.items() if v.value}
    trips.sort()
    return {
        "kind": kind,
        "batches_per_s": len(trips) / (t1 - t0),
        "p50_ms": trips[len(trips) // 2] * 1000,
        "p99_ms": trips[int(len(trips) * 0.99)] * 1000,
        "cpu_us_per_msg": (cpu1 - cpu0) * 1e6 / messages,
        "cpu_per_s": (cpu1 - cpu0) / (t1 - t0),
        "console": answered,
        "console_per_s": sum(answered.values()) / (t1 - t0),
        "refused": refused.value,
    }


class RootBroker(BrokerProcess):
    """A broker run from the checkout ``root`` (its ``pluglog`` package)."""

    def __init__(self, root, *args, **kwargs):
        self.root = root
        super().__init__(*args, **kwargs)

    def start(self, timeout=30):
        os.makedirs(self.data_dir, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=self.root)
        return self._spawn(
            self.command(), self._listening, "listen", timeout, env=env, cwd=self.root
        )


def start_broker(work, root):
    http = free_port()
    broker = RootBroker(
        root, os.path.join(work, "data"), extra_args=["--http", f"tcp:{http}:interface=127.0.0.1"]
    ).start()
    data.seed(broker.bootstrap)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = [NewTopic(f"extra-{i:03d}", 1, 1) for i in range(200)] + [NewTopic("flood-bench")]
    for future in admin.create_topics(topics).values():
        future.result(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the HTTP listener starts after the Kafka one
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{http}/console/", timeout=5).close()
            break
        except OSError:
            time.sleep(0.1)
    return broker, f"http://127.0.0.1:{http}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--root",
        action="append",
        help="a checkout to run the broker from (repeat to compare; default: this one)",
    )
    args = parser.parse_args()
    roots = [os.path.abspath(r) for r in (args.root or [HERE])]
    results = []
    logs = {}
    with tempfile.TemporaryDirectory(prefix="pluglog-console-flood-") as work:
        brokers = {}
        try:
            for n, root in enumerate(roots):
                brokers[root] = start_broker(os.path.join(work, str(n)), root)
                produce_phase(brokers[root][0].bootstrap, 2)  # warm-up
            print(f"loadavg at start: {open('/proc/loadavg').read().strip()}", flush=True)
            for number in range(1, args.rounds + 1):
                for root, (broker, base) in brokers.items():
                    for kind in ("quiet", "flood"):
                        got = run_phase(kind, broker, base, args.seconds, args.workers)
                        got["root"] = root
                        results.append(got)
                        print(
                            f"round {number} {root} {kind:5}: {got['batches_per_s']:7.1f} "
                            f"batches/s p50 {got['p50_ms']:5.2f} ms p99 {got['p99_ms']:6.2f} "
                            f"ms, broker {got['cpu_us_per_msg']:5.2f} µs CPU/message, "
                            f"{got['cpu_per_s']:.2f} CPU s/s; console "
                            f"{got['console_per_s']:.0f} req/s {got['console']} "
                            f"refused {got['refused']}",
                            flush=True,
                        )
        finally:
            for root, (broker, _base) in brokers.items():
                logs[root] = broker.log()
                broker.stop()
    print()
    print(
        "| broker from | phase | batches/s | p50 ms | p99 ms | broker CPU µs/msg "
        "| broker CPU s/s | console req/s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for root in roots:
        for kind in ("quiet", "flood"):
            rows = [r for r in results if r["kind"] == kind and r["root"] == root]

            def med(key, rows=rows):
                return statistics.median(r[key] for r in rows)

            print(
                f"| {root} | {kind} | {med('batches_per_s'):.1f} | {med('p50_ms'):.2f} "
                f"| {med('p99_ms'):.2f} | {med('cpu_us_per_msg'):.2f} "
                f"| {med('cpu_per_s'):.2f} | {med('console_per_s'):.0f} |"
            )
    for root in roots:
        print(f"tracebacks in the broker log ({root}): {logs[root].count('Traceback')}")


if __name__ == "__main__":
    main()
