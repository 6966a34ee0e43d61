"""Broker CPU and round-trip time per Produce request, stop-and-wait.

    python3 bench/produce_latency.py [--root CHECKOUT] [--n 10000] [--acks 1] [--runs 1]

Starts ``twistd -n pluglog`` from ``--root`` (default: this checkout) on a
fresh data directory, creates a one-partition topic and sends the same
Produce v8 request (one batch of 50 x 200-byte records) ``--n`` times, each
after the previous answer, from a raw socket client that costs almost
nothing, after 500 warm-up requests. Prints the broker's CPU (/proc
utime+stime) and the wall-clock time per request: with such a client the
wall time is the broker's latency, which is what a stop-and-wait producer
(the paper benchmark's batch-50 test) waits for. Give two ``--root``
checkouts in turn (interleaved runs) to compare commits.

``--second-version 10`` sends the second ``--side-by-side`` broker Produce
v10, the flexible version librdkafka >= 2.5 sends where the broker serves it
(the first gets v8): an old checkout that stops at v8 against this one.

``--side-by-side`` (exactly two ``--root``) runs both brokers at once and
alternates blocks of ``--block`` requests between them (ABBA), ``--n``
requests each in all, and reads each broker's CPU per block from
``/proc/PID/schedstat`` (nanoseconds, the reactor thread). On a machine
shared with other work this is the steadier comparison: load that comes and
goes within seconds falls on both alike, where whole interleaved runs land
on different moments. It prints the quartiles of CPU per request per block
and the median ratio of the paired blocks (second root / first); ``--set``
options after ``--`` go to the second broker only, so
``--side-by-side --root . --root . -- --set metrics.enabled=false`` measures
one setting. ``--broker-option=--fsync=always`` (repeatable) goes to every broker.

``--metrics-compare`` runs each checkout twice per run, interleaved: with
``metrics.enabled=false`` (no request counters, no ``/metrics``) and with
metrics on, ``--http`` and a scraper reading ``/metrics`` every second (as
Prometheus with a 1 s scrape interval would), so the "on" figure includes
the scrapes' own CPU.
"""

import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from pluglog.childprocess import free_port  # noqa: E402
from pluglog.protocol.records import Record, build_batch  # noqa: E402


def _string(text):
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


class Client:
    def __init__(self, port):
        for _ in range(300):
            try:
                self.sock = socket.create_connection(("127.0.0.1", port))
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise SystemExit(f"no broker on port {port}")
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def request(self, api, version, body, correlation_id=1):
        message = struct.pack(">hhi", api, version, correlation_id) + _string("bench")
        if api == 0 and version >= 9:
            message += b"\x00"  # a flexible request's (empty) header tags
        message += body
        self.sock.sendall(struct.pack(">i", len(message)) + message)
        (size,) = struct.unpack(">i", self._read(4))
        return self._read(size)

    def _read(self, size):
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise SystemExit("the broker closed the connection")
            data += chunk
        return data


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Scraper(threading.Thread):
    """GET ``url`` every ``interval`` seconds until stopped."""

    def __init__(self, url, interval=1.0):
        super().__init__(daemon=True)
        self.url = url
        self.interval = interval
        self.stop = threading.Event()
        self.scrapes = 0

    def run(self):
        while not self.stop.wait(self.interval):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    response.read()
                self.scrapes += 1
            except OSError:
                pass


# Options every broker gets (--broker-option), e.g. --fsync=always.
COMMON = []


def start_broker(root, extra=()):
    """``(process, work dir, port)`` of a broker from checkout ``root``."""
    port = free_port()
    work = tempfile.mkdtemp(prefix="pluglog-latency-")
    cmd = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n"]
    cmd += ["--pidfile=", f"--logfile={work}/log", "pluglog"]
    cmd += ["--listen", f"tcp:{port}:interface=127.0.0.1", "--data-dir", f"{work}/data"]
    cmd += COMMON
    proc = subprocess.Popen([*cmd, *extra], env=dict(os.environ, PYTHONPATH=root), cwd=root)
    return proc, work, port


def produce_body(acks, version=8):
    """A Produce v``version`` body: one batch of 50 x 200-byte records for
    partition t-0 (v9+: the flexible layout librdkafka >= 2.5 sends as v10)."""
    batch = build_batch([Record(None, b"x" * 200) for _ in range(50)])
    if version >= 9:
        body = b"\x00" + struct.pack(">hi", acks, 5000) + b"\x02\x02t\x02"
        return body + struct.pack(">i", 0) + _uvarint(len(batch) + 1) + batch + b"\x00" * 3
    body = struct.pack(">hhi", -1, acks, 5000) + struct.pack(">i", 1) + _string("t")
    return body + struct.pack(">iii", 1, 0, len(batch)) + batch


def _uvarint(value):
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def ready_client(port, body, version=8):
    """A client of a fresh broker, topic ``t`` created, 500 requests sent."""
    client = Client(port)
    # CreateTopics v0: topic "t", 1 partition, replication factor 1.
    topic = struct.pack(">i", 1) + _string("t") + struct.pack(">ihii", 1, 1, 0, 0)
    client.request(19, 0, topic + struct.pack(">i", 5000))
    time.sleep(0.5)
    for i in range(500):
        answer = client.request(0, version, body, i)
    error = struct.unpack_from(">h", answer, len(answer) - (35 if version >= 9 else 36))[0]
    if error:
        raise SystemExit(f"Produce v{version} answered error {error}")
    return client


def run(root, n, acks, metrics=None):
    """``metrics``: None (the broker's defaults), "off" or "on" (see the docstring)."""
    extra = []
    scraper = None
    if metrics == "off":
        extra = ["--set", "metrics.enabled=false"]
    elif metrics == "on":
        http = free_port()
        extra = ["--http", f"tcp:{http}:interface=127.0.0.1"]
        scraper = Scraper(f"http://127.0.0.1:{http}/metrics")
    proc, work, port = start_broker(root, extra)
    try:
        body = produce_body(acks)
        client = ready_client(port, body)
        if scraper is not None:
            scraper.start()
        cpu0, wall0 = cpu_seconds(proc.pid), time.perf_counter()
        for i in range(n):
            client.request(0, 8, body, i)
        cpu1, wall1 = cpu_seconds(proc.pid), time.perf_counter()
        return 1e6 * (cpu1 - cpu0) / n, 1e6 * (wall1 - wall0) / n
    finally:
        if scraper is not None:
            scraper.stop.set()
        proc.terminate()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def schedstat_ns(pid):
    """Nanoseconds the process's main (reactor) thread has run on a CPU."""
    with open(f"/proc/{pid}/schedstat") as handle:
        return int(handle.read().split()[0])


def quartiles(values):
    ordered = sorted(values)
    return [ordered[int(q * (len(ordered) - 1))] for q in (0.25, 0.5, 0.75)]


def side_by_side(roots, n, block, acks, extra, versions=(8, 8)):
    """Both brokers at once, blocks of requests alternating; see the docstring."""
    started = [start_broker(roots[0]), start_broker(roots[1], extra)]
    try:
        bodies = [produce_body(acks, version) for version in versions]
        clients = [
            ready_client(port, body, version)
            for (_, _, port), body, version in zip(started, bodies, versions)
        ]
        cpu = ([], [])
        for number in range(max(1, n // block)):
            for side in (0, 1) if number % 2 == 0 else (1, 0):
                pid = started[side][0].pid
                before = schedstat_ns(pid)
                for i in range(block):
                    clients[side].request(0, versions[side], bodies[side], i)
                cpu[side].append((schedstat_ns(pid) - before) / block / 1000)
    finally:
        for proc, work, _ in started:
            proc.terminate()
            proc.wait()
            shutil.rmtree(work, ignore_errors=True)
    for side, root in enumerate(roots):
        label = f"{root} {' '.join(extra)}" if side and extra else root
        label += f" (Produce v{versions[side]})"
        low, mid, high = quartiles(cpu[side])
        print(
            f"{label}: broker CPU per request (blocks' quartiles) "
            f"{low:.2f} / {mid:.2f} / {high:.2f} µs"
        )
    ratios = [second / first for first, second in zip(*cpu)]
    higher = sum(ratio > 1 for ratio in ratios)
    print(
        f"second / first, paired blocks: median {statistics.median(ratios):.3f}, "
        f"second higher in {higher} of {len(ratios)}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", action="append", help="checkout to run (repeatable)")
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--acks", type=int, default=1, choices=[1, -1])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="two --root brokers at once, blocks of requests alternating between them",
    )
    parser.add_argument(
        "--block", type=int, default=500, help="requests per block (--side-by-side)"
    )
    parser.add_argument(
        "--second-version",
        type=int,
        default=8,
        help="Produce version the second --side-by-side broker is sent (9-11: flexible)",
    )
    parser.add_argument("extra", nargs="*", help="after --: options for the second broker only")
    parser.add_argument(
        "--broker-option",
        action="append",
        default=[],
        help="an option for every broker (repeatable), e.g. --broker-option=--fsync=always",
    )
    parser.add_argument(
        "--metrics-compare",
        action="store_true",
        help="each run: metrics off, then on with /metrics scraped every second",
    )
    args = parser.parse_args()
    COMMON.extend(args.broker_option)
    if args.side_by_side:
        if len(args.root or ()) != 2:
            parser.error("--side-by-side takes exactly two --root")
        roots = [os.path.abspath(root) for root in args.root]
        versions = (8, args.second_version)
        side_by_side(roots, args.n, args.block, args.acks, args.extra, versions)
        return
    variants = ["off", "on"] if args.metrics_compare else [None]
    results = {}
    for number in range(args.runs):
        for root in args.root or [HERE]:
            for metrics in variants:
                cpu, wall = run(os.path.abspath(root), args.n, args.acks, metrics)
                results.setdefault((root, metrics), []).append(cpu)
                label = root if metrics is None else f"{root} metrics {metrics}"
                print(f"run {number + 1} {label}: broker CPU {cpu:.1f} us/request, ", end="")
                print(f"wall {wall:.0f} us/request", flush=True)
    for (root, metrics), cpus in results.items():
        label = root if metrics is None else f"{root} metrics {metrics}"
        print(f"median {label}: broker CPU {statistics.median(cpus):.1f} us/request")


if __name__ == "__main__":
    main()
