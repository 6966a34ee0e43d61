"""A scripted flood of console requests beside a produce benchmark (issue 23).

    python3 bench/console_flood.py [--rounds 4] [--seconds 8] [--workers 4]

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
and per second. The medians per phase kind follow. Everything runs on this
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


def start_broker(work):
    http = free_port()
    broker = BrokerProcess(
        os.path.join(work, "data"), extra_args=["--http", f"tcp:{http}:interface=127.0.0.1"]
    ).start()
    data.seed(broker.bootstrap)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = [NewTopic(f"extra-{i:03d}", 1, 1) for i in range(200)] + [NewTopic("flood-bench")]
    for future in admin.create_topics(topics).values():
        future.result(60)
    return broker, f"http://127.0.0.1:{http}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pluglog-console-flood-") as work:
        broker, base = start_broker(work)
        try:
            print(f"loadavg at start: {open('/proc/loadavg').read().strip()}", flush=True)
            produce_phase(broker.bootstrap, 2)  # warm-up
            results = []
            for number in range(1, args.rounds + 1):
                for kind in ("quiet", "flood"):
                    got = run_phase(kind, broker, base, args.seconds, args.workers)
                    results.append(got)
                    print(
                        f"round {number} {kind:5}: {got['batches_per_s']:7.1f} batches/s "
                        f"p50 {got['p50_ms']:5.2f} ms p99 {got['p99_ms']:6.2f} ms, broker "
                        f"{got['cpu_us_per_msg']:5.2f} µs CPU/message, {got['cpu_per_s']:.2f} "
                        f"CPU s/s; console {got['console_per_s']:.0f} req/s {got['console']} "
                        f"refused {got['refused']}",
                        flush=True,
                    )
            log = broker.log()
        finally:
            broker.stop()
    print()
    print(
        "| phase | batches/s | p50 ms | p99 ms | broker CPU µs/msg | broker CPU s/s "
        "| console req/s |"
    )
    print("|---|---|---|---|---|---|---|")
    for kind in ("quiet", "flood"):
        rows = [r for r in results if r["kind"] == kind]

        def med(key, rows=rows):
            return statistics.median(r[key] for r in rows)

        print(
            f"| {kind} | {med('batches_per_s'):.1f} | {med('p50_ms'):.2f} | {med('p99_ms'):.2f} "
            f"| {med('cpu_us_per_msg'):.2f} | {med('cpu_per_s'):.2f} "
            f"| {med('console_per_s'):.0f} |"
        )
    print(f"tracebacks in the broker log: {log.count('Traceback')}")


if __name__ == "__main__":
    main()
