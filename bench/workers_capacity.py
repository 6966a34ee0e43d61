"""Broker capacity of ``twistd pluglog --workers 2`` against ``--workers 1`` on one host.

    python3 bench/workers_capacity.py [--runs 3] [--seconds 10] [--batch 50]
                                      [--depth 64] [--clients-per-partition 1]

A real ZooKeeper (tests/zookeeper.py) and, per run and set-up, alternating
the order: ``twistd -n pluglog --coordinator zookeeper --workers N`` (N = 1,
then 2; with 1 it is one broker process, with 2 a supervisor and two worker
processes, pluglog/supervisor.py), a fresh 2-partition topic created with an
explicit assignment so that with two workers partition 0 is led by worker 0
and partition 1 by worker 1 (with one, both by the one broker), checked
through Metadata.

The clients cost as little as a client can: a raw socket per partition leader
sending the same pre-encoded Produce v8 request (one batch of ``--batch`` x
200-byte records, acks=1) over and over, ``--depth`` requests in flight,
answers counted, not decoded (one in 1000 has its error code checked), as
bench/produce_latency.py does. ``--clients-per-partition`` processes per
partition, the same for both set-ups. After ``--warmup`` seconds the
measured window of ``--seconds`` starts; over it this script reads from
/proc the CPU of every broker process, the supervisor, every client process
and the whole machine (/proc/stat), so the table shows whether the brokers
were saturated (about 100 % of a core each) or something else (the clients,
other work on the machine) was the limit.

Capacity is the records acknowledged per second in the window. Printed per
run and as medians: msgs/s, each broker's share of a core and µs of broker
CPU per message, the clients' share, the rest of the machine, and the ratio
two workers / one (the issue's target: at least 1.6). On a 2-core machine
two saturated workers leave nothing for the clients, so read the ratio with
the CPU columns: two workers at 2 x 100 % is not possible while the clients
run there too.
"""

import argparse
import os
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

TOPIC = "cap"
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def machine_busy():
    """CPU seconds the whole machine was busy (all cores; /proc/stat)."""
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / TICK


def _string(text):
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


#: ``--compression`` names and the batch attribute codes Kafka gives them
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def produce_request(partition, batch, correlation_id=0, compression="none", topic=TOPIC):
    """A framed Produce v8 request: one batch of ``batch`` x 200 B for ``partition``
    of ``topic``."""
    from pluglog.protocol.records import Record, build_batch

    records = build_batch(
        [Record(None, b"x" * 200) for _ in range(batch)], compression=CODECS[compression]
    )
    body = struct.pack(">hhi", -1, 1, 5000) + struct.pack(">i", 1) + _string(topic)
    body += struct.pack(">iii", 1, partition, len(records)) + records
    message = struct.pack(">hhi", 0, 8, correlation_id) + _string("cap") + body
    return struct.pack(">i", len(message)) + message


def split_answers(buf):
    """The complete answers at the start of ``buf`` (removed from it): count, last."""
    count, last, at = 0, None, 0
    while len(buf) - at >= 4:
        (size,) = struct.unpack_from(">i", buf, at)
        if len(buf) - at - 4 < size:
            break
        last = bytes(buf[at + 4 : at + 4 + size])
        at += 4 + size
        count += 1
    del buf[:at]
    return count, last


def check(answer):
    """SystemExit if a Produce v8 answer's partition error code is set."""
    # The partition's error code: 36 bytes from the end of a v8 answer.
    error = struct.unpack_from(">h", answer, len(answer) - 36)[0]
    if error:
        raise SystemExit(f"Produce answered error {error}")


def open_window(clients, warmup, seconds):
    """Once every client process printed "ready", tell them the measured
    window (``warmup`` seconds from now, ``seconds`` long) and sleep until it
    opens; returns its (start, end) on the monotonic clock."""
    for proc in clients:
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit("a client did not start")
    t0 = time.monotonic() + warmup
    t1 = t0 + seconds
    for proc in clients:
        proc.stdin.write(f"{t0} {t1}\n")
        proc.stdin.flush()
    time.sleep(max(0.0, t0 - time.monotonic()))
    return t0, t1


def client(args):
    """One pipelined raw-socket producer; prints the answers counted in the window."""
    sock = socket.create_connection(("127.0.0.1", args.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    request = produce_request(args.partition, args.batch, compression=args.compression)
    buf = bytearray()

    def answers():
        return split_answers(buf)

    # warm-up: one stop-and-wait round trip proves the partition is served here
    sock.sendall(request)
    while not answers()[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit("the broker closed the connection")
        buf.extend(chunk)
    print("ready", flush=True)
    t0, t1 = (float(x) for x in sys.stdin.readline().split())
    sock.sendall(request * args.depth)
    counted = seen = 0
    while True:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise SystemExit("the broker closed the connection")
        buf.extend(chunk)
        count, last = answers()
        if not count:
            continue
        now = time.monotonic()
        if t0 <= now < t1:
            counted += count
        seen += count
        if seen % 1000 < count:
            check(last)
        if now >= t1:
            break
        sock.sendall(request * count)
    print(counted, flush=True)
    return 0


def start_unit(root, zk, workers):
    """``(process, broker pids, supervisor pid or None, ports)`` of a running unit."""
    from pluglog.client.blocking import BlockingClient
    from tests.broker_process import BrokerProcess, free_port
    from tests.zookeeper import new_chroot

    port = free_port()
    while True:  # worker i takes port + i
        try:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port + 1))
            break
        except OSError:
            port = free_port()
    unit = BrokerProcess(
        root / f"data-{workers}",
        port=port,
        settings={"zookeeper.connect": zk.connect_string(new_chroot())},
        extra_args=["--coordinator", "zookeeper", "--workers", str(workers)],
    ).start(timeout=60)
    ports = [port + i for i in range(workers)]
    deadline = time.monotonic() + 60
    while True:
        with BlockingClient("127.0.0.1", port, timeout=10) as conn:
            meta = conn.request(3, 4, {"topics": [], "allow_auto_topic_creation": False})
        if len(meta["brokers"]) == workers:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(meta['brokers'])} of {workers} workers registered")
        time.sleep(0.2)
    if workers == 1:
        return unit, [unit.proc.pid], None, ports
    pids = []
    for number in range(workers):
        found = re.findall(rf"worker {number} started \(pid (\d+)\)", unit.log())
        pids.append(int(found[-1]))
    return unit, pids, unit.proc.pid, ports


def create_topic(port, workers):
    """The 2-partition topic, partition i led by worker i % workers; checked."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from pluglog.client.blocking import BlockingClient

    assignment = [[0], [1 % workers]]
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    admin.create_topics([NewTopic(TOPIC, 2, replica_assignment=assignment)])[TOPIC].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with BlockingClient("127.0.0.1", port, timeout=10) as conn:
            body = {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False}
            meta = conn.request(3, 4, body)
        parts = meta["topics"][0]["partitions"]
        leaders = {p["partition_index"]: p["leader_id"] for p in parts}
        if leaders == {0: 0, 1: 1 % workers}:
            return
        time.sleep(0.2)
    raise SystemExit(f"partition leaders {leaders}, expected {{0: 0, 1: {1 % workers}}}")


def measure(root, zk, workers, args):
    unit, pids, supervisor, ports = start_unit(root, zk, workers)
    try:
        create_topic(ports[0], workers)
        clients = []
        for partition in (0, 1):
            for _ in range(args.clients_per_partition):
                cmd = [
                    sys.executable,
                    __file__,
                    "client",
                    "--port",
                    str(ports[partition % workers]),
                ]
                cmd += ["--partition", str(partition), "--batch", str(args.batch)]
                cmd += ["--depth", str(args.depth), "--compression", args.compression]
                clients.append(
                    subprocess.Popen(
                        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=HERE
                    )
                )
        t0, t1 = open_window(clients, args.warmup, args.seconds)
        watched = pids + ([supervisor] if supervisor else []) + [c.pid for c in clients]
        before = {pid: proc_cpu(pid) for pid in watched}
        busy0, w0 = machine_busy(), time.monotonic()
        time.sleep(max(0.0, t1 - time.monotonic()))
        after = {pid: proc_cpu(pid) for pid in watched}
        busy1, w1 = machine_busy(), time.monotonic()
        answers = 0
        for proc in clients:
            out, _ = proc.communicate(timeout=60)
            if proc.returncode:
                raise SystemExit(f"a client failed (exit {proc.returncode})")
            answers += int(out.strip().splitlines()[-1])
    finally:
        unit.stop(timeout=90)
    wall = w1 - w0
    used = {pid: (after[pid] - before[pid]) / wall for pid in watched}
    rate = answers * args.batch / args.seconds
    brokers = [used[pid] for pid in pids]
    client_share = sum(used[c.pid] for c in clients)
    supervisor_share = used[supervisor] if supervisor else 0.0
    machine = (busy1 - busy0) / wall
    return {
        "rate": rate,
        "brokers": brokers,
        "broker_us": 1e6 * sum(brokers) * wall / max(1, rate * wall),
        "client_us": 1e6 * client_share / max(1, rate),
        "supervisor": supervisor_share,
        "clients": client_share,
        "others": max(0.0, machine - sum(brokers) - client_share - supervisor_share),
        "machine": machine,
    }


def show(label, result):
    shares = " + ".join(f"{100 * b:3.0f}" for b in result["brokers"])
    text = (
        f"{label:9} {result['rate']:10,.0f} msgs/s  brokers {shares} % of a core "
        f"({result['broker_us']:.2f} µs/msg)  supervisor {100 * result['supervisor']:2.0f} %  "
        f"clients {100 * result['clients']:3.0f} % ({result['client_us']:.2f} µs/msg)  "
        f"other processes {100 * result['others']:3.0f} %"
    )
    if min(result["brokers"]) < 0.9:
        text += "  [a broker below 90 %: not saturated]"
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode")
    c = sub.add_parser("client", help="internal: one raw-socket producer")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--partition", type=int, required=True)
    c.add_argument("--batch", type=int, required=True)
    c.add_argument("--depth", type=int, required=True)
    c.add_argument("--compression", choices=sorted(CODECS), default="none")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10, help="measured window per set-up")
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--batch", type=int, default=50, help="records per Produce request")
    parser.add_argument("--depth", type=int, default=64, help="requests in flight per client")
    parser.add_argument("--clients-per-partition", type=int, default=1)
    parser.add_argument(
        "--compression",
        choices=sorted(CODECS),
        default="none",
        help="the batch's codec: the broker decompresses it to validate every record",
    )
    args = parser.parse_args()
    if args.mode == "client":
        return client(args)
    from tests.zookeeper import ZooKeeperProcess

    results = {1: [], 2: []}
    print(
        f"2 partitions, {args.clients_per_partition} raw-socket client(s) per partition, "
        f"Produce v8 of {args.batch} x 200 B ({args.compression}, "
        f"{len(produce_request(0, args.batch, compression=args.compression))} B a request), "
        f"{args.depth} in flight, acks=1; "
        f"{args.seconds:g} s windows; CPU as % of one core ({os.cpu_count()} cores)",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="pluglog-workers-") as tmp:
        root = Path(tmp)
        zk = ZooKeeperProcess(root / "zk").start()
        try:
            for number in range(args.runs):
                for workers in (1, 2) if number % 2 == 0 else (2, 1):
                    result = measure(root / f"run{number}", zk, workers, args)
                    results[workers].append(result)
                    print(f"run {number + 1} " + show(f"workers {workers}", result), flush=True)
        finally:
            zk.stop()
    print(f"\nmedians of {args.runs} run(s)")
    medians = {}
    for workers, rows in results.items():
        medians[workers] = {
            key: statistics.median(r[key] for r in rows)
            for key in (
                "rate",
                "broker_us",
                "client_us",
                "supervisor",
                "clients",
                "others",
                "machine",
            )
        }
        medians[workers]["brokers"] = [
            statistics.median(r["brokers"][i] for r in rows) for i in range(workers)
        ]
        print(show(f"workers {workers}", medians[workers]))
    ratio = medians[2]["rate"] / medians[1]["rate"]
    print(f"two workers / one: {ratio:.2f} x the capacity (target >= 1.6)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
