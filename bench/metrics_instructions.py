"""What the metrics add per message in the paper tests, counted in instructions.

    python3 bench/metrics_instructions.py [--rounds 3] [--n-sync 4000] [--n 200000]

The paper benchmark (bench/paper_bench.py --metrics-compare) measures broker
CPU time per message with metrics off and on; on this shared 2-core VM its
run-to-run spread (10-30 %) is far larger than the effect it looks for
(< 2 %). Instructions do not depend on what else the machine runs, so this
script counts them: the broker runs under valgrind's callgrind (instrumented
only while a test runs, ``callgrind_control -i on|off``, one dump per test),
and the peers harness's own Kafka client (clients/kafka_client.py,
confluent-kafka, the paper tests' settings) drives it. Per round the broker
is started twice, ``metrics.enabled=false`` and metrics on (alternating
which goes first);
each time the four paper tests run: produce batch 1 (sync, ``--n-sync``),
batch 50 and async (``--n``), then consume (``--n``, from the batch-50 topic).

Both brokers listen with ``--http`` (the schema registry and console it
serves have timers of their own). Timers fire per wall second, and under
valgrind a test lasts about thirty times longer than natively (and longer
still when the machine is busy), so each broker's idle rate (instructions
per second with no client, 10 s counted before its tests) times a test's
wall time is subtracted from that test: what is left is the work the
requests caused. The metrics' own timer (the once-a-second fold of latency
samples) is the difference of the two idle rates, added back per message
at the test's native rate.

A Prometheus scrape costs per scrape, not per
message, so it is measured apart, natively: per round, a broker without
valgrind runs the same four tests (msgs/s and broker CPU per message from
/proc), then ``--scrapes`` reads of ``/metrics``. A scrape's share per
message at an interval S is its CPU over the CPU the broker spends in S
at the test's rate. Under valgrind the client outruns the broker, so
librdkafka's async batches are larger than natively and vary between runs;
batch 1 and batch 50 have fixed request shapes and are the exact comparison.

Callgrind slows the broker about 30x; the default N keeps a round near five
minutes. Needs valgrind (``apt-get install valgrind``) and the peers harness
at $PEERS_SRC (default /work/shared/bench-peers).
"""

import argparse
import glob
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS_SRC = os.environ.get("PEERS_SRC", "/work/shared/bench-peers")
CLIENT = os.path.join(PEERS_SRC, "clients", "kafka_client.py")
TESTS = ("produce/1", "produce/50", "produce/async", "consume/1000")
_TOTALS = re.compile(rb"^totals: (\d+)", re.M)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Broker:
    """One ``twistd pluglog`` process, optionally under callgrind."""

    def __init__(self, work, metrics, valgrind):
        self.port = free_port()
        self.http_port = free_port()
        self.data = tempfile.mkdtemp(dir=work)
        self.cg_prefix = os.path.join(self.data, "cg.out")
        self.idle = 0.0  # instructions per second with no client, see idle_rate()
        argv = [
            sys.executable,
            "-c",
            "from twisted.scripts.twistd import run; run()",
            "-n",
            "--pidfile=",
            "--logfile=" + os.path.join(self.data, "broker.log"),
            "pluglog",
            "--listen",
            f"tcp:{self.port}:interface=127.0.0.1",
            "--advertised-listener",
            f"127.0.0.1:{self.port}",
            "--data-dir",
            os.path.join(self.data, "d"),
        ]
        # --http either way: the registry and console it serves have timers
        # of their own, which are not the metrics' cost.
        argv += ["--http", f"tcp:{self.http_port}:interface=127.0.0.1"]
        if not metrics:
            argv += ["--set", "metrics.enabled=false"]
        if valgrind:
            argv = [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={self.cg_prefix}",
                *argv,
            ]
        env = dict(os.environ, PYTHONPATH=ROOT)
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.5)
        raise SystemExit(f"broker on port {self.port} did not start (see {self.data})")

    def control(self, *args):
        subprocess.run(
            ["callgrind_control", *args, str(self.proc.pid)],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=600,
        )

    def counted(self, action):
        """Run ``action()`` with instrumentation on; the instructions it cost."""
        before = set(glob.glob(self.cg_prefix + ".*"))
        self.control("-i", "on")
        try:
            result = action()
        finally:
            self.control("-d")
            self.control("-i", "off")
        dumps = set(glob.glob(self.cg_prefix + ".*")) - before
        if len(dumps) != 1:
            raise SystemExit(f"expected one new callgrind dump, found {sorted(dumps)}")
        with open(dumps.pop(), "rb") as dump:
            found = _TOTALS.search(dump.read())
        return int(found.group(1)), result

    def scrape(self):
        url = f"http://127.0.0.1:{self.http_port}/metrics"
        with urllib.request.urlopen(url, timeout=120) as reply:
            return len(reply.read())

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def client(broker, *argv):
    env = dict(os.environ, KAFKA_BOOTSTRAP=f"127.0.0.1:{broker.port}")
    out = subprocess.run(
        [sys.executable, CLIENT, *argv, "--time-limit", "3000"],
        env=env,
        capture_output=True,
        check=True,
        timeout=3600,
    )
    lines = out.stdout.decode().strip().splitlines()
    return json.loads(lines[-1]) if lines else None


def cpu_seconds(pid):
    """utime + stime of ``pid`` from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_tests(broker, n_sync, n, count):
    """``{test: (Ir per message or None, msgs/s, broker CPU s per message)}``.

    Counted runs subtract the broker's idle instructions over the test's
    wall time (``broker.idle``, Ir/s): timers fire per second, and under
    valgrind a test lasts ~30x longer than natively, so without this the
    figure would follow how long a run took on the shared machine."""
    results = {}
    for test in TESTS:
        kind, batch = test.split("/")
        if kind == "produce":
            topic = f"bench_b{batch}"
            client(broker, "setup", "--topic", topic)
            argv = ["produce", "--topic", topic, "--batch", batch, "--size", "200"]
            argv += ["--n", str(n_sync if batch == "1" else n)]
        else:
            argv = ["consume", "--topic", "bench_b50", "--n", str(n), "--prefetch", batch]
        cpu = cpu_seconds(broker.proc.pid)
        started = time.monotonic()
        if count:
            ir, out = broker.counted(lambda argv=argv: client(broker, *argv))
            ir -= broker.idle * (time.monotonic() - started)
        else:
            ir, out = None, client(broker, *argv)
        cpu = cpu_seconds(broker.proc.pid) - cpu
        if out.get("capped") or not out["messages"]:
            raise SystemExit(f"{test}: client stopped early: {out}")
        messages = out["messages"]
        rate = messages / out["seconds"]
        results[test] = (ir / messages if ir is not None else None, rate, cpu / messages)
    return results


def idle_rate(broker, seconds=10.0):
    """The broker's instructions per second with no client (its timers)."""
    time.sleep(2)  # start-up work done
    started = time.monotonic()
    ir, _ = broker.counted(lambda: time.sleep(seconds))
    return ir / (time.monotonic() - started)


def scrape_cost(broker, scrapes):
    """Native broker CPU seconds per ``/metrics`` scrape."""
    broker.scrape()
    cpu = cpu_seconds(broker.proc.pid)
    for _ in range(scrapes):
        broker.scrape()
    return (cpu_seconds(broker.proc.pid) - cpu) / scrapes


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n-sync", type=int, default=4000, help="messages for produce batch 1")
    parser.add_argument("--n", type=int, default=200000, help="messages for the other tests")
    parser.add_argument("--scrapes", type=int, default=200, help="native scrapes timed per round")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or not os.path.exists(CLIENT):
        raise SystemExit("needs valgrind and the peers harness ($PEERS_SRC)")
    work = tempfile.mkdtemp(prefix="metrics-ir-")
    per_msg = {"off": {t: [] for t in TESTS}, "on": {t: [] for t in TESTS}}
    native = {t: [] for t in TESTS}
    scrapes = []
    idle = {"off": [], "on": []}
    try:
        for round_no in range(1, args.rounds + 1):
            # Alternate which mode goes first, so a drift falls on both.
            modes = ("off", "on") if round_no % 2 else ("on", "off")
            for mode in modes:
                broker = Broker(work, metrics=mode == "on", valgrind=True)
                try:
                    broker.idle = idle_rate(broker)
                    idle[mode].append(broker.idle)
                    found = run_tests(broker, args.n_sync, args.n, True)
                finally:
                    broker.stop()
                for test, (ir, _rate, _cpu) in found.items():
                    per_msg[mode][test].append(ir)
                line = ", ".join(f"{t} {per_msg[mode][t][-1]:,.0f}" for t in TESTS)
                print(
                    f"round {round_no} metrics {mode}: idle {broker.idle:,.0f} Ir/s; "
                    f"beyond idle, Ir/msg {line}",
                    flush=True,
                )
            broker = Broker(work, metrics=True, valgrind=False)
            try:
                for test, (_ir, rate, cpu) in run_tests(
                    broker, args.n_sync, args.n, False
                ).items():
                    native[test].append((rate, cpu))
                scrapes.append(scrape_cost(broker, args.scrapes))
            finally:
                broker.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    scrape = statistics.median(scrapes)
    # The metrics' own timer (the once-a-second fold), per second, natively:
    # timers fire per wall second whether or not valgrind slows the rest.
    idle_added = statistics.median(idle["on"]) - statistics.median(idle["off"])
    print(
        f"\nidle broker: {statistics.median(idle['off']):,.0f} Ir/s with metrics off, "
        f"{statistics.median(idle['on']):,.0f} with them on ({idle_added:+,.0f} Ir/s)"
    )
    print(
        f"one /metrics scrape, native: {scrape * 1e3:.2f} ms of broker CPU "
        f"(median of {len(scrapes)} rounds of {args.scrapes})"
    )
    print(
        "\n| test | metrics off, Ir/msg | on, Ir/msg | hot path | + timers "
        "| native msgs/s | native broker µs/msg | + scrapes every 15 s | every 1 s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for test in TESTS:
        off = statistics.median(per_msg["off"][test])
        on = statistics.median(per_msg["on"][test])
        rate = statistics.median(r for r, _c in native[test])
        cpu = statistics.median(c for _r, c in native[test])
        hot = (on - off) / off
        timers = hot + idle_added / rate / off
        # A scrape's CPU per second, over the CPU the broker spends per second at that rate.
        share = scrape / (rate * cpu)
        print(
            f"| {test} | {off:,.0f} | {on:,.0f} | {100 * hot:+.2f} % | {100 * timers:+.2f} % "
            f"| {rate:,.0f} | {cpu * 1e6:.2f} | {100 * (timers + share / 15):+.2f} % "
            f"| {100 * (timers + share):+.2f} % |"
        )
    print("\nper round, Ir/msg:")
    for mode in ("off", "on"):
        for test in TESTS:
            values = ", ".join(f"{v:,.0f}" for v in per_msg[mode][test])
            print(f"  {mode:3} {test}: {values}")


if __name__ == "__main__":
    main()
