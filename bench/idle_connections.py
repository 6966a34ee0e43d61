"""What 10,000 idle client connections cost a broker: memory, and the active clients' produce.

    python3 bench/idle_connections.py [--idle 10000] [--rounds 3] [--n 200000]

One broker (``twistd -n pluglog``, fresh data dir). Each idle connection
does what a client does before it goes quiet: connect, ApiVersions and
Metadata, answered, then nothing (they are held open by this process on
plain sockets). The active client is confluent-kafka producing ``--n``
records of 200 B with librdkafka's own batching (linger.ms=1, acks=1).

Per round, in one broker: the active produce alone, then with ``--idle``
connections open, then they are closed; rounds interleave so a change in
the machine's load falls on both. Reported: the broker's RSS (VmRSS from
/proc) before and with the idle connections, its open fds, and the
produce's msgs/s and broker CPU per message (utime+stime from /proc) alone
and beside the idle connections, medians over the rounds.
"""

import argparse
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import confluent_kafka  # noqa: E402

from pluglog import protocol as codec  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402


def proc_status(pid, field):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def cpu_times(pid):
    """(utime, stime) of ``pid`` in seconds, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def start_broker(work):
    broker = BrokerProcess(os.path.join(work, "data")).start(timeout=60)
    return broker, broker.port


def _request(api, version, correlation_id, body):
    return codec.encode_request(api, version, correlation_id, "idle-bench", body)


def _read_frame(sock):
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise OSError("closed")
        head += chunk
    (size,) = struct.unpack(">i", head)
    left = size
    while left:
        chunk = sock.recv(min(left, 65536))
        if not chunk:
            raise OSError("closed")
        left -= len(chunk)


def open_idle(port, count):
    """``count`` connections that did ApiVersions and Metadata, then idle."""
    versions = _request(codec.API_VERSIONS, 0, 1, {})
    metadata = _request(codec.METADATA, 1, 2, {"topics": []})
    held = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(versions)
        _read_frame(sock)
        sock.sendall(metadata)
        _read_frame(sock)
        held.append(sock)
    return held


def produce(port, n):
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": f"127.0.0.1:{port}", "linger.ms": 1, "acks": 1}
    )
    value = b"x" * 200
    delivered = [0]

    def done(err, _msg):
        if err is None:
            delivered[0] += 1

    started = time.monotonic()
    for _ in range(n):
        while True:
            try:
                producer.produce("active", value, callback=done)
                break
            except BufferError:
                producer.poll(0.001)
    producer.flush(120)
    elapsed = time.monotonic() - started
    if delivered[0] != n:
        raise SystemExit(f"only {delivered[0]} of {n} delivered")
    return n / elapsed


def measure(proc, port, n):
    """(msgs/s, broker CPU s/msg, user part, system part)."""
    user, system = cpu_times(proc.pid)
    rate = produce(port, n)
    user2, system2 = cpu_times(proc.pid)
    return rate, (user2 - user + system2 - system) / n, (user2 - user) / n, (system2 - system) / n


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=200000)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="idle-conns-")
    broker, port = start_broker(work)
    proc = broker.proc
    alone, beside, rss_base, rss_idle, fds_idle = [], [], [], [], []
    try:
        measure(proc, port, args.n // 4)  # warm-up: topic auto-created, caches
        for round_no in range(1, args.rounds + 1):
            rss_base.append(proc_status(proc.pid, "VmRSS"))
            alone.append(measure(proc, port, args.n))
            started = time.monotonic()
            held = open_idle(port, args.idle)
            opened_s = time.monotonic() - started
            time.sleep(1)
            rss_idle.append(proc_status(proc.pid, "VmRSS"))
            fds_idle.append(open_fds(proc.pid))
            beside.append(measure(proc, port, args.n))
            for sock in held:
                sock.close()
            print(
                f"round {round_no}: alone {alone[-1][0]:,.0f} msgs/s "
                f"{alone[-1][1] * 1e6:.2f} µs/msg (user {alone[-1][2] * 1e6:.2f}, "
                f"system {alone[-1][3] * 1e6:.2f}); with {args.idle} idle (opened in "
                f"{opened_s:.1f} s) {beside[-1][0]:,.0f} msgs/s {beside[-1][1] * 1e6:.2f} µs/msg "
                f"(user {beside[-1][2] * 1e6:.2f}, system {beside[-1][3] * 1e6:.2f}); "
                f"RSS {rss_base[-1] / 1024:.0f} -> {rss_idle[-1] / 1024:.0f} MiB, "
                f"fds {fds_idle[-1]}",
                flush=True,
            )
            time.sleep(2)  # the broker notices the closes
    finally:
        broker.stop(60)
        shutil.rmtree(work, ignore_errors=True)
    med = statistics.median
    added = (med(rss_idle) - med(rss_base)) / 1024
    print(
        f"\nRSS: {med(rss_base) / 1024:.0f} MiB without, {med(rss_idle) / 1024:.0f} MiB with "
        f"{args.idle} idle connections (+{added:.0f} MiB, "
        f"{added * 1024 * 1024 / args.idle / 1024:.1f} KiB each); fds {med(fds_idle)}"
    )
    rate_a, cpu_a = med(m[0] for m in alone), med(m[1] for m in alone)
    rate_b, cpu_b = med(m[0] for m in beside), med(m[1] for m in beside)
    print(
        f"active produce: {rate_a:,.0f} msgs/s, {cpu_a * 1e6:.2f} µs/msg alone; "
        f"{rate_b:,.0f} msgs/s ({100 * (rate_b / rate_a - 1):+.1f} %), "
        f"{cpu_b * 1e6:.2f} µs/msg ({100 * (cpu_b / cpu_a - 1):+.1f} %) beside the idle ones"
    )


if __name__ == "__main__":
    main()
