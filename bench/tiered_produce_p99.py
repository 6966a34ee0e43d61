"""Produce latency with tiered-storage uploads running against without them, ABBA blocks.

    python3 bench/tiered_produce_p99.py [--mb 512] [--cycles 3] [--block-s 1.5]
        [--provider s3|filesystem] [--copy-rate BYTES_PER_S]
        [--switch-interval S] [--gil-probe] [--checksum when_required]
        [--uploader broker|external] [--copy-processes N]

One broker (``--http`` for /metrics) with tiered storage on ``moto_server``
(``s3``) or a local directory (``filesystem``). ``--mb`` MB are produced to
a tiered topic (``--segment-mb`` segments, local retention of four) while
uploads are held back, so a backlog waits. Then, in ``--cycles`` cycles of
A B B A (``--block-s`` seconds each), a stop-and-wait producer probes
Produce latency on an untiered topic (one 200-byte record, awaited, again):

* **A, no uploads**: ``s3``: moto_server is SIGSTOPped, so an upload in
  flight waits in a socket call (no CPU, no GIL) and none starts;
  ``filesystem``: the root is moved aside and a file put in its place, so
  uploads fail at once (one failed attempt per task interval);
* **B, uploads running**: moto_server SIGCONTinued / the root put back.

Per mode it prints p50/p99/p99.9 over all its blocks, the broker's,
moto_server's and this process's CPU per second of block, and the MB/s
uploaded in B blocks (the broker's ``pluglog_remote_copied_bytes``, read
between blocks). A B block that uploaded nothing is flagged (the backlog ran
out: give more ``--mb``). Block order alternates, so drift in the machine's
load lands on both modes alike.

Diagnostics:

* ``--copy-rate N`` sets ``remote.log.manager.copy.max.bytes.per.second``
  (an upload quota); a broker that does not know the key refuses to start,
  and the bench says so and runs without it;
* ``--copy-processes N`` sets ``remote.log.copy.processes`` (``0``: the
  copies run in the broker's upload threads, as before that key existed);
* ``--switch-interval S`` starts the broker with ``sys.setswitchinterval(S)``
  (Python's default 0.005): how long another thread may keep the GIL when
  the reactor wants it;
* ``--gil-probe``: a thread in the broker and a separate process each sleep
  2 ms in a loop and log how late they wake. The separate process is late
  only when it waits for a CPU; the broker's thread also waits for the GIL.
  Both are reported per mode (p50/p99 lateness);
* ``--checksum when_required`` sets the broker's
  ``AWS_REQUEST_CHECKSUM_CALCULATION``: no CRC32 of each part (botocore
  computes it with ``binascii.crc32``, which keeps the GIL, ~1.2 ms per
  5 MiB part);
* ``--uploader external``: the broker uploads nothing; a separate process
  runs the broker's s3 provider code (the same multipart upload of a
  segment-sized file, again and again) against moto_server in B blocks, and
  is SIGSTOPped with it in A blocks. The produce latency then shows the CPU
  the upload and the store take from the broker, without the GIL;
* ``--store-nice N`` renices moto_server (and the external uploader): if
  the tail follows the store's CPU, a store that yields the CPU moves it less.
* ``--local-retention-mb N``: the tiered topic's ``local.retention.bytes``.
  By default four segments, so the backlog waits beyond local retention and
  the broker uploads it at catch-up priority (a store back after an
  outage); above ``--mb`` the backlog is within local retention, as uploads
  that keep up are, and they run at idle priority (``SCHED_IDLE``);
* ``--store-idle``: moto_server (and the external uploader) at
  ``SCHED_IDLE``. S3 runs on other hosts; on this machine the store's CPU
  (0.3-0.5 s per s while uploads run) otherwise delays the wake-ups of the
  probe and the broker, nice 19 or not (the scheduler lets a running task
  finish a slice), and the figure measures the test rig;
* ``--store-memory``: moto_server keeps objects in memory
  (``MOTO_S3_DEFAULT_KEY_BUFFER_SIZE``). By default it spools every object
  over ~5 MiB to a temporary file, on this machine the broker's own file
  system: uploads then write twice their bytes to the disk the broker
  appends to, and the broker's segment writes wait on that file system's
  journal and writeback (``pwritev2`` up to 29 ms against 6 ms without
  uploads, ``perf trace``). S3 writes to its own disks;
* ``--pin``: the broker and its upload child on CPU 0, moto_server, the
  external uploader and this probe on the others (``sched_setaffinity``,
  every thread, re-applied at each block so a child started later is
  caught): the store and the client as on other hosts, which S3 and a
  producer are, while the broker still shares its core with its own
  uploads.
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [HERE, os.path.join(HERE, "bench")]

import confluent_kafka  # noqa: E402
from tiered_bench import cpu_seconds, load  # noqa: E402

from tests.broker_process import BrokerProcess, free_port  # noqa: E402
from tests.integration.clients import create_topic  # noqa: E402
from tests.moto_s3 import DUMMY_CREDENTIALS, MotoServer  # noqa: E402

QUOTA_KEY = "remote.log.manager.copy.max.bytes.per.second"

# Runs in the broker process before twistd (bench/ only: the broker is not
# changed). The lateness probe writes "monotonic_start lateness_us" lines.
LAUNCHER = """\
import os, sys, threading, time
interval = os.environ.get("BENCH_SWITCH_INTERVAL")
if interval:
    sys.setswitchinterval(float(interval))
path = os.environ.get("BENCH_LATENESS_LOG")
if path:
    def lateness():
        with open(path, "w", buffering=1) as out:
            while True:
                t = time.monotonic()
                time.sleep(0.002)
                out.write(f"{t:.6f} {(time.monotonic() - t - 0.002) * 1e6:.0f}\\n")
    threading.Thread(target=lateness, daemon=True, name="bench-lateness").start()
from twisted.scripts.twistd import run
run()
"""


# ``--uploader external``: the broker's own s3 provider code, uploading one
# segment-sized file again and again from a process of its own.
EXTERNAL = """\
import os, sys
sys.path.insert(0, sys.argv[1])
from pluglog.storage.remote.s3 import S3RemoteStorage
storage = S3RemoteStorage("bench", sys.argv[2], "us-east-1", "", 5 << 20)
path, count = sys.argv[3], sys.argv[4]
size, total, n = os.path.getsize(path), 0, 0
while True:
    storage._multipart(f"external/{n % 8}", path)
    n, total = n + 1, total + size
    with open(count + ".tmp", "w") as out:
        out.write(str(total))
    os.replace(count + ".tmp", count)
"""


class ProbedBroker(BrokerProcess):
    """The test suite's broker process, started through :data:`LAUNCHER`."""

    def command(self):
        cmd = super().command()
        return [cmd[0], "-c", LAUNCHER, *cmd[3:]]


def copied_bytes(url, metric="pluglog_remote_copied_bytes"):
    """The broker's uploaded bytes (its /metrics), or the external uploader's file."""
    if not url.startswith("http"):
        try:
            with open(url) as handle:
                return float(handle.read() or 0)
        except FileNotFoundError:
            return 0.0
    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(f"{metric}_total ") or line.startswith(f"{metric} "):
                return float(line.split()[1])
    return 0.0


def percentile(ordered, q):
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


class Uploads:
    """Hold uploads back (A) or let them run (B)."""

    def __init__(self, provider, moto, root, external=None):
        self.provider, self.moto, self.root = provider, moto, root
        self.external = external
        self.held = False

    def _signal(self, signum):
        os.kill(self.moto.proc.pid, signum)
        if self.external is not None:
            os.kill(self.external.pid, signum)

    def hold(self):
        if self.held:
            return
        self.held = True
        if self.provider == "s3":
            self._signal(signal.SIGSTOP)
        else:
            if os.path.isdir(self.root):
                os.rename(self.root, self.root + ".aside")
            open(self.root, "w").close()

    def release(self):
        if not self.held:
            return
        self.held = False
        if self.provider == "s3":
            self._signal(signal.SIGCONT)
        else:
            os.unlink(self.root)
            if os.path.isdir(self.root + ".aside"):
                os.rename(self.root + ".aside", self.root)


def pin_tree(pid, cpus):
    """Set the CPU affinity of every thread of ``pid`` and its descendants."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                os.sched_setaffinity(int(task), cpus)
        except OSError:
            continue  # gone meanwhile
        todo.extend(children.get(current, ()))


def start_broker(work, settings, http_port):
    extra = ["--http", f"tcp:{http_port}:interface=127.0.0.1"]
    broker = ProbedBroker(os.path.join(work, "data"), settings=settings, extra_args=extra)
    return broker.start()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=512)
    parser.add_argument("--segment-mb", type=int, default=8)
    parser.add_argument(
        "--local-retention-mb",
        type=int,
        help="local.retention.bytes of the tiered topic (default: 4 segments, so the "
        "backlog waits beyond it and uploads run at catch-up priority; above --mb, "
        "uploads keep within it and run at idle priority)",
    )
    parser.add_argument("--cycles", type=int, default=3, help="A B B A cycles")
    parser.add_argument("--block-s", type=float, default=1.5)
    parser.add_argument("--provider", choices=("s3", "filesystem"), default="s3")
    parser.add_argument(
        "--uploader",
        choices=("broker", "external"),
        default="broker",
        help="external: the broker uploads nothing; a separate process runs the same s3 "
        "upload code against moto_server in B blocks (CPU contention without the GIL)",
    )
    parser.add_argument(
        "--store-nice",
        type=int,
        help="renice moto_server (and the external uploader) to this: does the produce "
        "tail follow the store's CPU?",
    )
    parser.add_argument(
        "--store-idle",
        action="store_true",
        help="run moto_server (and the external uploader) at SCHED_IDLE: it takes only "
        "CPU nothing else wants, as a store on other hosts takes none of this machine's",
    )
    parser.add_argument(
        "--store-memory",
        action="store_true",
        help="moto_server keeps objects in memory, not in temporary files on the broker's "
        "file system (S3 writes to its own disks)",
    )
    parser.add_argument("--copy-rate", type=int, help=f"{QUOTA_KEY}, bytes per second")
    parser.add_argument(
        "--copy-processes",
        type=int,
        help="remote.log.copy.processes (0: uploads in the broker's threads; default 1)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the broker (and its upload child) on CPU 0, the store and this probe on the others",
    )
    parser.add_argument("--switch-interval", type=float, help="the broker's sys.setswitchinterval")
    parser.add_argument("--gil-probe", action="store_true", help="log wake-up lateness")
    parser.add_argument(
        "--checksum",
        choices=("when_supported", "when_required"),
        help="the broker's AWS_REQUEST_CHECKSUM_CALCULATION (botocore >= 1.36 adds a CRC32 "
        "of every part by default, computed holding the GIL)",
    )
    args = parser.parse_args()
    if args.uploader == "external" and args.provider != "s3":
        parser.error("--uploader external needs --provider s3")
    os.environ.update(DUMMY_CREDENTIALS)
    work = tempfile.mkdtemp(prefix="tiered-p99-")
    if args.checksum:
        os.environ["AWS_REQUEST_CHECKSUM_CALCULATION"] = args.checksum
    if args.switch_interval:
        os.environ["BENCH_SWITCH_INTERVAL"] = str(args.switch_interval)
    lateness_log = os.path.join(work, "broker-lateness.txt")
    machine_log = os.path.join(work, "machine-lateness.txt")
    if args.gil_probe:
        os.environ["BENCH_LATENESS_LOG"] = lateness_log
    # ExitStack: whatever started is stopped (last first), also when a later
    # start fails; the uploads are released before the store is stopped.
    with ExitStack() as stack:
        blocks = run(args, work, stack, machine_log)
    report(args, blocks, lateness_log, machine_log)
    shutil.rmtree(work, ignore_errors=True)


def reap(proc):
    proc.kill()
    proc.wait()


def run(args, work, stack, machine_log):
    moto = None
    root = os.path.join(work, "remote")
    settings = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": args.provider,
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "1000",
    }
    if args.provider == "s3":
        if args.store_memory:
            os.environ["MOTO_S3_DEFAULT_KEY_BUFFER_SIZE"] = str(1 << 30)
        moto = MotoServer(work).start()
        stack.callback(moto.stop)
        moto.client().create_bucket(Bucket="bench")
        settings["rsm.config.s3.bucket"] = "bench"
        settings["rsm.config.s3.endpoint.url"] = moto.url
        settings["rsm.config.s3.multipart.threshold.bytes"] = str(5 << 20)
    else:
        settings["rsm.config.filesystem.root"] = root
    http_port = free_port()
    if args.copy_rate:
        settings[QUOTA_KEY] = str(args.copy_rate)
    if args.copy_processes is not None:
        settings["remote.log.copy.processes"] = str(args.copy_processes)
    try:
        broker = start_broker(work, settings, http_port)
    except RuntimeError as exc:
        if not args.copy_rate or QUOTA_KEY not in str(exc):
            raise
        print(f"note: this broker refuses {QUOTA_KEY} (not merged yet); running without it")
        del settings[QUOTA_KEY]
        broker = start_broker(work, settings, http_port)
    stack.callback(broker.stop)
    url = f"http://127.0.0.1:{http_port}"
    external = None
    if args.uploader == "external":
        count_path = os.path.join(work, "external-bytes")
        segment_file = os.path.join(work, "segment.bin")
        with open(segment_file, "wb") as out:
            out.write(os.urandom(args.segment_mb << 20))
        external = subprocess.Popen(
            [sys.executable, "-c", EXTERNAL, HERE, moto.url, segment_file, count_path]
        )
        stack.callback(reap, external)
        url = count_path
    if args.store_nice is not None:
        for proc in (moto.proc if moto is not None else None, external):
            if proc is not None:
                os.setpriority(os.PRIO_PROCESS, proc.pid, args.store_nice)
    if args.store_idle:
        for proc in (moto.proc if moto is not None else None, external):
            if proc is not None:
                for task in os.listdir(f"/proc/{proc.pid}/task"):  # threads inherit it
                    os.sched_setscheduler(int(task), os.SCHED_IDLE, os.sched_param(0))
    if args.pin:
        others = set(range(1, os.cpu_count()))
        os.sched_setaffinity(0, others)
        for proc in (moto.proc if moto is not None else None, external):
            if proc is not None:
                pin_tree(proc.pid, others)
    uploads = Uploads(args.provider, moto, root, external)
    stack.callback(uploads.release)
    create_topic(broker.bootstrap, "lat", 1)
    segment = args.segment_mb << 20
    create_topic(
        broker.bootstrap,
        "hist",
        1,
        {
            "remote.storage.enable": "true",
            "segment.bytes": str(segment),
            "local.retention.bytes": str(
                4 * segment if args.local_retention_mb is None else args.local_retention_mb << 20
            ),
        },
    )
    time.sleep(2)  # __remote_log_metadata is made and loaded
    if args.gil_probe:
        machine = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER.split("from twisted")[0] + "time.sleep(1e9)"],
            env={**os.environ, "BENCH_LATENESS_LOG": machine_log},
        )
        stack.callback(reap, machine)
    uploads.hold()
    if external is None:
        t = time.monotonic()
        load(broker.bootstrap, "hist", args.mb)
        print(f"backlog of {args.mb} MB produced in {time.monotonic() - t:.1f} s", flush=True)
    return run_blocks(args, broker, moto, uploads, url, external)


def probe_block(producer, seconds):
    out = []
    failed = []
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        start = time.perf_counter()
        producer.produce(
            "lat",
            value=b"p" * 200,
            key=str(i).encode(),
            on_delivery=lambda err, _msg: err is not None and failed.append(err),
        )
        producer.flush(30)
        out.append((time.perf_counter() - start) * 1000)
        i += 1
    if failed:
        raise SystemExit(f"{len(failed)} probe produce(s) failed: {failed[0]}")
    return out


def cpu_split(pids):
    """CPU seconds so far per process; the broker's own apart from its
    children's (the upload processes), so the reactor's share shows."""
    out = {k: cpu_seconds(p) for k, p in pids.items()}
    out["broker children"] = cpu_seconds(pids["broker"], children=True) - out["broker"]
    return out


def run_blocks(args, broker, moto, uploads, url, external):
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    probe_block(producer, 0.5)  # connected, metadata known
    order = "ABBA" * args.cycles
    pids = {"broker": broker.proc.pid, "bench": os.getpid()}
    if moto is not None:
        pids["moto"] = moto.proc.pid
    if external is not None:
        pids["uploader"] = external.pid
    blocks = []
    for mode in order:
        if args.pin:
            pin_tree(broker.proc.pid, {0})
        if mode == "B":
            uploads.release()
        else:
            uploads.hold()
        before = copied_bytes(url)
        cpu0 = cpu_split(pids)
        t0 = time.monotonic()
        samples = probe_block(producer, args.block_s)
        t1 = time.monotonic()
        cpu = {k: (v - cpu0[k]) / (t1 - t0) for k, v in cpu_split(pids).items()}
        uploads.hold()  # between blocks nothing uploads: the /metrics read is outside
        copied = copied_bytes(url) - before
        blocks.append(
            {"mode": mode, "t0": t0, "t1": t1, "ms": samples, "cpu": cpu, "copied": copied}
        )
        print(
            f"block {mode}: {len(samples)} probes p99 {percentile(sorted(samples), 0.99):.2f} ms,"
            f" uploaded {copied / 1e6:.1f} MB, CPU/s "
            + " ".join(f"{k} {v:.2f}" for k, v in cpu.items()),
            flush=True,
        )
    uploads.release()
    if url.startswith("http"):
        catch_up = copied_bytes(url, "pluglog_remote_catch_up_copies")
        print(f"uploads at catch-up priority (beyond local retention): {catch_up:.0f}")
    return blocks


def lateness(path, blocks):
    """Wake-up lateness samples (us) that started inside ``blocks``."""
    if not os.path.exists(path):
        return []
    spans = [(b["t0"], b["t1"]) for b in blocks]
    out = []
    with open(path) as handle:
        for line in handle:
            parts = line.split()
            if len(parts) != 2:
                continue
            t = float(parts[0])
            if any(a <= t < b for a, b in spans):
                out.append(int(parts[1]))
    return sorted(out)


def report(args, blocks, lateness_log, machine_log):
    print(
        f"\nprovider {args.provider}, uploader {args.uploader}, store nice {args.store_nice}"
        f"{' (SCHED_IDLE)' if args.store_idle else ''}"
        f"{', in memory' if args.store_memory else ''}, "
        f"{'pinned (broker CPU 0), ' if args.pin else ''}"
        f"{args.cycles} x ABBA blocks of {args.block_s} s:"
    )
    figures = {}
    for mode, label in (("A", "no uploads"), ("B", "uploads running")):
        mine = [b for b in blocks if b["mode"] == mode]
        ms = sorted(x for b in mine for x in b["ms"])
        seconds = sum(b["t1"] - b["t0"] for b in mine)
        cpu = {k: statistics.mean(b["cpu"][k] for b in mine) for k in mine[0]["cpu"]}
        rate = sum(b["copied"] for b in mine) / seconds / 1e6
        figures[mode] = [percentile(ms, q) for q in (0.5, 0.99, 0.999)]
        p50, p99, p999 = figures[mode]
        print(
            f"  {label:16} n={len(ms)} p50 {p50:.3f} ms p99 {p99:.3f} ms p99.9 {p999:.3f} ms; "
            f"uploaded {rate:.1f} MB/s; CPU s per s: "
            + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
        )
        if args.gil_probe:
            broker_late = lateness(lateness_log, mine)
            machine_late = lateness(machine_log, mine)
            for who, got in (("broker thread", broker_late), ("separate process", machine_late)):
                if got:
                    print(
                        f"    2 ms sleep lateness, {who}: p50 {percentile(got, 0.5)} us "
                        f"p99 {percentile(got, 0.99)} us p99.9 {percentile(got, 0.999)} us "
                        f"(n={len(got)})"
                    )
    empty = [i for i, b in enumerate(blocks) if b["mode"] == "B" and b["copied"] == 0]
    if empty:
        print(f"  WARNING: B blocks {empty} uploaded nothing (backlog gone: raise --mb)")
    a, b = figures["A"], figures["B"]
    print(
        f"  ratio uploads/no uploads: p50 {b[0] / a[0]:.2f}x p99 {b[1] / a[1]:.2f}x "
        f"p99.9 {b[2] / a[2]:.2f}x"
    )


if __name__ == "__main__":
    main()
