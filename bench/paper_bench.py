"""The 2011 Kafka paper's producer/consumer tests: pluglog against Redis streams, one run.

Runs the peers harness (/work/shared/bench-peers, copied to a scratch
directory because the shared copy is read-only) for each system, ``--runs``
times, interleaved so every system sees the same machine: the order of the
systems is reversed every other run (redis, pluglog, pluglog-tuned, then
pluglog-tuned, pluglog, redis, ...), so a load that grows or fades during
the run falls on all alike. It prints the medians, the ratios pluglog /
Redis per test and the server's CPU per message (the harness's
``server_cpu``, /proc utime+stime over the test). While a broker runs, its
RSS is sampled from /proc every 100 ms.

On a shared machine single runs of the batch-50 test move by 10-20 % (at
N=300,000 it lasts about a second): compare before/after with ``--base``,
``--runs 5`` or more and N of 1,000,000, and read the broker CPU per
message beside msgs/s.

Systems:

* ``redis``: the harness's Redis 7 streams adapter, as measured in its RESULTS.md;
* ``pluglog``: the harness's Kafka adapter (librdkafka), stock client settings;
* ``pluglog-tuned``: the same with two client settings changed (see
  bench/README.rst): async linger.ms=1, consumer fetch.queue.backoff.ms=1;
  it runs the batch-50 and async producer tests and the consumer;
* ``kafka-mock``: (``--mock``) librdkafka's in-process C mock broker at
  N=20,000: the client's own ceiling on this box;
* ``pluglog-base``: (``--base PATH``) the ``pluglog`` system run from another
  checkout (e.g. a worktree of the commit before a change), for a
  before/after comparison in one interleaved run;
* ``metrics-off``, ``metrics-unscraped`` and ``metrics-on``:
  (``--metrics-compare``) the ``pluglog`` system with
  ``metrics.enabled=false``; with metrics on (the default) and no
  ``--http``, so only the hot-path counters; and with metrics on,
  ``--http`` and a Prometheus-style scraper reading ``/metrics`` every
  second while it runs. The report's CPU column is the broker's CPU per
  message (the harness's ``server_cpu=`` per test, read from its output).

Usage: ``python3 bench/paper_bench.py [--runs 3] [--n 1000000] [--mock]``.
Everything listens on and talks to 127.0.0.1 only.
"""

import argparse
import csv
import io
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS_SRC = os.environ.get("PEERS_SRC", "/work/shared/bench-peers")
TESTS = [("produce", "1"), ("produce", "50"), ("produce", "async"), ("consume", "1000")]
TWISTD = (
    'python3 -c "from twisted.scripts.twistd import run; run()" -n --pidfile= --logfile=- '
    "pluglog --listen tcp:$KAFKA_PORT:interface=127.0.0.1 "
    "--advertised-listener 127.0.0.1:$KAFKA_PORT --data-dir $KAFKA_DATA"
)


# run.sh's log line per test (stderr): "[hh:mm:ss] system,test,batch,messages,
# seconds,msgs_per_s,mb_per_s server_cpu=S.SSs ..."
_SERVER_CPU = re.compile(r"\] [^,\s]+,(\w+),(\w+),(\d+),[\d.]+,[\d.]+,[\d.]+ server_cpu=([\d.]+)s")


def prepare(work):
    """Fresh writable copy of the harness plus bench/peers_overlay; venv if missing."""
    peers = os.path.join(work, "peers")
    shutil.rmtree(peers, ignore_errors=True)
    shutil.copytree(PEERS_SRC, peers)
    shutil.copytree(os.path.join(HERE, "peers_overlay"), peers, dirs_exist_ok=True)
    for base, dirs, files in os.walk(peers):
        for name in dirs + files:
            path = os.path.join(base, name)
            os.chmod(path, os.stat(path).st_mode | 0o200)
    venv = os.path.join(work, "venv")
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "-r", os.path.join(peers, "requirements.txt")],
            check=True,
        )
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server missing: apt-get install -y redis-server")
    return peers, venv


class RssSampler(threading.Thread):
    """Max VmRSS of the PID in ``pid_file`` while it lives (100 ms samples)."""

    def __init__(self, pid_file):
        super().__init__(daemon=True)
        self.pid_file = pid_file
        self.max_kb = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(0.1):
            try:
                with open(self.pid_file) as handle:
                    pid = handle.read().strip()
                with open(f"/proc/{pid}/status") as handle:
                    for line in handle:
                        if line.startswith("VmRSS:"):
                            self.max_kb = max(self.max_kb, int(line.split()[1]))
            except (OSError, ValueError):
                continue


class Scraper(threading.Thread):
    """GET ``url`` every ``interval`` s while the run lasts, as Prometheus would."""

    def __init__(self, url, interval=1.0):
        super().__init__(daemon=True)
        self.url = url
        self.interval = interval
        self.scrapes = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(self.interval):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    response.read()
                self.scrapes += 1
            except OSError:
                continue  # the broker is starting or stopping


def run_system(peers, venv, work, system, n, env_extra, pid_name):
    env = dict(os.environ)
    env_extra = dict(env_extra)
    root = env_extra.pop("PLUGLOG_ROOT", ROOT)
    scrape_url = env_extra.pop("SCRAPE_URL", None)
    env.update(
        PEERS_TMP=os.path.join(work, "tmp"),
        VENV=venv,
        PYTHONPATH=os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")])),
        **env_extra,
    )
    sampler = RssSampler(os.path.join(work, "tmp", pid_name, "server.pid"))
    sampler.start()
    scraper = Scraper(scrape_url) if scrape_url else None
    if scraper is not None:
        scraper.start()
    proc = subprocess.run(
        ["bash", os.path.join(peers, "run.sh"), system, str(n)],
        env=env,
        cwd=peers,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    sampler.stop.set()
    sampler.join()
    if scraper is not None:
        scraper.stop.set()
        scraper.join()
        print(f"  {scraper.scrapes} scrapes of {scrape_url}", flush=True)
    rows = {}
    for row in csv.reader(io.StringIO(proc.stdout)):
        if len(row) == 7:
            rows[(row[1], row[2])] = float(row[5])
    if not rows:
        sys.stderr.write(proc.stderr[-3000:])
    cpu = {}  # (test, batch) -> server CPU µs per message
    for test, batch, messages, seconds in _SERVER_CPU.findall(proc.stderr):
        if int(messages):
            cpu[(test, batch)] = 1e6 * float(seconds) / int(messages)
    return rows, cpu, sampler.max_kb // 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--port", type=int, default=0, help="pluglog port (0: a free one)")
    parser.add_argument("--work", default="/tmp/pluglog-bench")
    parser.add_argument("--mock", action="store_true", help="also run librdkafka's mock broker")
    parser.add_argument("--systems", default="redis,pluglog,pluglog-tuned")
    parser.add_argument(
        "--metrics-compare",
        action="store_true",
        help="run metrics-off, -unscraped and -on (--http, 1 s scrapes) instead of --systems",
    )
    parser.add_argument(
        "--base", help="another pluglog checkout, run as system pluglog-base (before/after)"
    )
    args = parser.parse_args()
    peers, venv = prepare(args.work)
    if not args.port:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            args.port = sock.getsockname()[1]
    kafka_env = {"KAFKA_SERVER_CMD": TWISTD, "KAFKA_BOOTSTRAP": f"127.0.0.1:{args.port}"}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        http_port = sock.getsockname()[1]
    plans = {
        "redis": ("redis", {}, "redis", args.n),
        "pluglog": ("pluglog", kafka_env, "pluglog", args.n),
        "pluglog-tuned": (
            "pluglog-tuned",
            {**kafka_env, "PEER_BATCHES": "50 async"},
            "pluglog-tuned",
            args.n,
        ),
        "pluglog-base": (
            "pluglog",
            {**kafka_env, "KAFKA_NAME": "pluglog-base", "PLUGLOG_ROOT": args.base or ROOT},
            "pluglog-base",
            args.n,
        ),
        "metrics-off": (
            "pluglog",
            {
                **kafka_env,
                "KAFKA_NAME": "metrics-off",
                "KAFKA_SERVER_CMD": TWISTD + " --set metrics.enabled=false",
            },
            "metrics-off",
            args.n,
        ),
        "metrics-unscraped": (
            "pluglog",
            {**kafka_env, "KAFKA_NAME": "metrics-unscraped"},
            "metrics-unscraped",
            args.n,
        ),
        "metrics-on": (
            "pluglog",
            {
                **kafka_env,
                "KAFKA_NAME": "metrics-on",
                "KAFKA_SERVER_CMD": TWISTD + f" --http tcp:{http_port}:interface=127.0.0.1",
                "SCRAPE_URL": f"http://127.0.0.1:{http_port}/metrics",
            },
            "metrics-on",
            args.n,
        ),
        "kafka-mock": (
            "kafka",
            {"KAFKA_NAME": "kafka-mock", "KAFKA_SERVER_CMD": "mock"},
            "kafka-mock",
            20_000,
        ),
    }
    systems = args.systems.split(",") + (["kafka-mock"] if args.mock else [])
    if args.metrics_compare:
        systems = ["metrics-off", "metrics-unscraped", "metrics-on"]
    if args.base:
        systems.insert(systems.index("pluglog") + 1 if "pluglog" in systems else 0, "pluglog-base")
    results = {name: [] for name in systems}
    cpus = {name: [] for name in systems}
    rss = {name: [] for name in systems}
    print(f"loadavg at start: {open('/proc/loadavg').read().strip()}", flush=True)
    for run in range(1, args.runs + 1):
        for name in systems if run % 2 else systems[::-1]:
            adapter, env_extra, pid_name, n = plans[name]
            t0 = time.monotonic()
            rows, cpu, max_rss = run_system(
                peers, venv, args.work, adapter, n, env_extra, pid_name
            )
            results[name].append(rows)
            cpus[name].append(cpu)
            rss[name].append(max_rss)
            shown = " ".join(
                f"{t}/{b}={v:,.0f}" + (f" ({cpu[(t, b)]:.2f} µs)" if (t, b) in cpu else "")
                for (t, b), v in sorted(rows.items())
            )
            print(
                f"run {run} {name}: {shown}  max RSS {max_rss} MB ({time.monotonic() - t0:.0f} s)",
                flush=True,
            )
    report(results, cpus, rss, systems)
    out = os.path.join(args.work, f"paper-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(out, "w") as handle:
        json.dump(
            {
                "results": {
                    k: [{"/".join(t): v for t, v in r.items()} for r in runs]
                    for k, runs in results.items()
                },
                "server_cpu_us_per_msg": {
                    k: [{"/".join(t): v for t, v in r.items()} for r in runs]
                    for k, runs in cpus.items()
                },
                "rss_mb": rss,
            },
            handle,
            indent=1,
        )
    print(f"raw results: {out}; harness logs under {args.work}/tmp/<system>/")


def median_of(runs, test):
    values = [rows[test] for rows in runs if test in rows]
    return (statistics.median(values), values) if values else (None, [])


def report(results, cpus, rss, systems):
    redis = results.get("redis", [])
    print()
    print(
        "| test | system | msgs/s (median) | runs | redis msgs/s | ratio "
        "| server CPU µs/msg (median) |"
    )
    print("|---|---|---|---|---|---|---|")
    for test in TESTS:
        base, _ = median_of(redis, test)
        for name in systems:
            if name == "redis":
                continue
            med, values = median_of(results[name], test)
            if med is None:
                continue
            ratio = f"{med / base:.2f}x" if base else "n/a"
            runs = " ".join(f"{v:,.0f}" for v in values)
            base_s = f"{base:,.0f}" if base else "n/a"
            cpu, _ = median_of(cpus[name], test)
            cpu_s = f"{cpu:.2f}" if cpu is not None else "n/a"
            print(
                f"| {'/'.join(test)} | {name} | {med:,.0f} | {runs} | {base_s} | {ratio} "
                f"| {cpu_s} |"
            )
    for name in systems:
        print(f"max broker RSS {name}: {rss[name]} MB")


if __name__ == "__main__":
    main()
