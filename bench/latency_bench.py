"""Tail latency at 10 %, 50 % and 90 % of peak: pluglog (three set-ups) and Redis streams.

    python3 bench/latency_bench.py [--runs 3] [--seconds 20] [--loads 10,50,90]
        [--systems pluglog,pluglog-fsync,pluglog-rf3,redis] [--probe] [--rates R,R]

For each system, in each run, from the same client machine (this one) with
the same client program (bench/latency_client.py, in the peers harness's
venv that bench/paper_bench.py's ``prepare()`` builds: redis-py + hiredis and
confluent-kafka in one interpreter): first the peak, one unpaced producer
sending as fast as ``--window`` unanswered records allow, for
``--peak-seconds``; then an open-loop producer paced at each ``--loads``
percentage of that peak for ``--seconds``, with one consumer reading along.
Records are 200 bytes and carry the CLOCK_MONOTONIC time of their produce
call. Per level it prints the acknowledgement latency (produce call to
delivery report / XADD reply), the end-to-end latency (produce call to the
record in the consumer's hands), p50 / p99 / p99.9 / max in ms, how far the
producer fell behind its schedule (``late p99``), and the broker's CPU per
message (/proc utime+stime of every broker process, from the consumer's
start to its end, over the records sent). The first ``--warmup`` seconds of
each level are not counted. Runs alternate the order of the systems. The
last lines compare the medians at 50 % with the issue's targets (pluglog's
p99 at most Redis's, p99.9 under 10 ms). ``--rates 5000,20000`` paces every
system at the same absolute rates instead, for a comparison at equal load.

Systems:

* ``pluglog``: one broker, default settings (``--fsync interval``);
* ``pluglog-fsync``: one broker with ``--fsync always`` (fsync before the
  answer to every Produce);
* ``pluglog-rf3``: three brokers and a real ZooKeeper (tests/zookeeper.py,
  tests/cluster.py), a topic with replication factor 3 and
  min.insync.replicas=2, producer acks=all;
* ``redis``: ``redis-server`` with the harness's conf/redis.conf (AOF,
  appendfsync everysec, the peer figures' set-up), one stream, XADD / XREAD
  BLOCK.

Every producer uses acks=all (with one broker the same as acks=1) and
``--linger-ms`` 0 (librdkafka's default, 5 ms, would add up to 5 ms to
every latency where Redis's client writes at once); the Kafka consumer sets
``fetch.queue.backoff.ms=1`` (bench/README.rst explains librdkafka's 1 s
pause). With linger 0 and librdkafka's unbounded requests in flight a paced
producer sends about one record per Produce request, which under
``--fsync always`` means three fsyncs per record; ``--linger-ms 5`` measures
the batched case. On 2 cores the producer, the consumer and the broker share
the machine; the ``client CPU`` column shows what the clients took.

``--probe`` starts every pluglog broker through bench/broker_probe.py and
prints, per level, its GC pauses by generation and its reactor-turn lengths
(the work between two epoll waits): where the time goes when p99.9 is high.
pluglog has no setting of its own for either.
"""

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]

import broker_probe  # noqa: E402
import paper_bench  # noqa: E402

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.chaos import create_topic  # noqa: E402
from tests.cluster import Cluster  # noqa: E402
from tests.zookeeper import ZooKeeperProcess, new_chroot  # noqa: E402

CLIENT = os.path.join(HERE, "latency_client.py")
SYSTEMS = ("pluglog", "pluglog-fsync", "pluglog-rf3", "redis")
FIGURES = ("p50", "p99", "p999", "max")


def proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Pluglog:
    """One broker, or three and a ZooKeeper (``rf=3``)."""

    def __init__(self, work, extra=(), rf=1, zk=None):
        self.rf = rf
        if rf == 1:
            self.brokers = [BrokerProcess(work / "data", extra_args=list(extra)).start()]
            self.cluster = None
        else:
            self.cluster = Cluster(work, zk.connect_string(new_chroot())).start()
            self.brokers = list(self.cluster.brokers.values())
        self.target = self.brokers[0].bootstrap
        self.system = "kafka"

    def pids(self):
        return [b.proc.pid for b in self.brokers]

    def new_topic(self, name):
        if self.rf == 1:
            create_topic(self.target, name, 1, rf=1, min_isr=1)
        else:
            create_topic(self.cluster.bootstrap, name, 1, rf=3, min_isr=2)
            self.cluster.wait_for_isr(name, 1, 3)

    def stop(self):
        if self.cluster is not None:
            self.cluster.stop()
        else:
            self.brokers[0].stop()


class Redis:
    def __init__(self, work, peers):
        port = free_port()
        (work / "redis").mkdir(parents=True)
        conf = os.path.join(peers, "conf", "redis.conf")
        log = work / "redis" / "server.log"
        cmd = ["redis-server", conf, "--port", str(port), "--dir", str(work / "redis")]
        self.proc = subprocess.Popen([*cmd, "--logfile", str(log)])
        deadline = time.monotonic() + 30
        while "Ready to accept connections" not in (log.read_text() if log.exists() else ""):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"redis-server did not start; see {log}")
            time.sleep(0.05)
        self.target = f"127.0.0.1:{port}"
        self.system = "redis"

    def pids(self):
        return [self.proc.pid]

    def new_topic(self, name):
        pass  # XADD creates the stream

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


def level(server, python, topic, rate, seconds, args, probe_path):
    """One paced (or, ``rate`` 0, unpaced) phase: producer and consumer JSON + CPU."""
    server.new_topic(topic)
    common = ["--system", server.system, "--target", server.target, "--topic", topic]
    consumer = subprocess.Popen(
        [python, CLIENT, "consume", *common],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    if consumer.stdout.readline().strip() != "ready":
        raise SystemExit("the consumer did not start")
    probing = probe_path and server.system == "kafka"
    if probing:
        for pid in server.pids():
            os.kill(pid, signal.SIGUSR2)  # start counting from here
            broker_probe.read(probe_path, pid)
    cpu0 = sum(proc_cpu(pid) for pid in server.pids())
    produce = [python, CLIENT, "produce", *common, "--rate", str(rate)]
    produce += ["--seconds", str(seconds), "--warmup", str(args.warmup)]
    produce += ["--window", str(args.window), "--linger-ms", str(args.linger_ms)]
    done = subprocess.run(
        produce, capture_output=True, text=True, timeout=seconds + args.warmup + 300
    )
    if done.returncode:
        consumer.kill()
        raise SystemExit(f"producer failed: {done.stderr[-2000:]}")
    prod = json.loads(done.stdout.strip().splitlines()[-1])
    out, _ = consumer.communicate(f"{prod['sent']} {prod['first_counted']}\n", timeout=120)
    cons = json.loads(out.strip().splitlines()[-1])
    cpu = sum(proc_cpu(pid) for pid in server.pids()) - cpu0
    row = {"prod": prod, "cons": cons, "broker_us": 1e6 * cpu / max(1, prod["sent"])}
    row["lost"] = prod["sent"] - cons["received"]
    if probing:
        row["probe"] = []
        for pid in server.pids():
            os.kill(pid, signal.SIGUSR2)
            row["probe"].append(broker_probe.read(probe_path, pid))
    return row


def start(system, work, peers, zk):
    if system == "redis":
        return Redis(work, peers)
    if system == "pluglog-fsync":
        return Pluglog(work, extra=["--fsync", "always"])
    if system == "pluglog-rf3":
        return Pluglog(work, rf=3, zk=zk)
    return Pluglog(work)


def fmt(summary):
    if not summary:
        return "    -/    -/    -/    -"
    return "/".join(
        f"{summary[f]:5.1f}" if summary[f] < 1000 else f"{summary[f]:5.0f}" for f in FIGURES
    )


HEADER = (
    f"{'system':14} {'load':>8} {'target':>9} {'msgs/s':>9} {'ack ms p50/p99/p99.9/max':>25} "
    f"{'e2e ms p50/p99/p99.9/max':>25} {'late p99':>8} {'broker':>9} {'client CPU':>10}"
)


def line(system, load, row):
    prod, cons = row["prod"], row["cons"]
    late = prod["late"]["p99"] if prod.get("late") else 0.0
    client = prod["client_cpu_s"] + cons["client_cpu_s"]
    target = f"{prod['rate_target']:,.0f}" if prod["rate_target"] else "unpaced"
    text = (
        f"{system:14} {load:>8} {target:>9} {prod['rate']:9,.0f} "
        f"{fmt(prod['ack']):>25} {fmt(cons['e2e']):>25} {late:8.2f} "
        f"{row['broker_us']:6.2f} µs {client:8.1f} s"
    )
    if row["lost"]:
        text += f"  ({row['lost']} records not consumed)"
    return text


def probe_lines(row):
    for number, probe in enumerate(row.get("probe") or []):
        if not probe:
            continue
        turns, syncs = probe["turns"], probe["fsync"]
        threads = probe.get("fsync_threads") or {}
        gcs = ", ".join(
            f"gen{gen} {s['count']}x max {s.get('max', 0):.1f} ms"
            for gen, s in probe["gc"].items()
        )
        yield (
            f"    broker {number + 1}: turns {turns.get('count', 0)}, "
            f"p99 {turns.get('p99', 0):.2f} "
            f"p99.9 {turns.get('p999', 0):.2f} max {turns.get('max', 0):.1f} ms, "
            f"{turns.get('over_10ms', 0)} over 10 ms; fsyncs in the loop {syncs.get('count', 0)}, "
            f"p99 {syncs.get('p99', 0):.2f} max {syncs.get('max', 0):.1f} ms, "
            f"in threads {threads.get('count', 0)}, max {threads.get('max', 0):.1f} ms; GC {gcs} "
            f"(interpreter's count {probe.get('collections')})"
        )


def median_row(rows):
    """Per figure, the median over runs."""

    def med(get):
        values = [v for v in (get(r) for r in rows) if v is not None]
        return statistics.median(values) if values else None

    def summ(key, side):
        if not all(r[side].get(key) for r in rows):
            return None
        return {f: med(lambda r, f=f: r[side][key][f]) for f in FIGURES}

    late = [r["prod"]["late"]["p99"] for r in rows if r["prod"].get("late")]
    return {
        "prod": {
            "rate": med(lambda r: r["prod"]["rate"]),
            "rate_target": med(lambda r: r["prod"]["rate_target"]),
            "ack": summ("ack", "prod"),
            "late": {"p99": statistics.median(late)} if late else None,
            "client_cpu_s": med(lambda r: r["prod"]["client_cpu_s"]),
        },
        "cons": {
            "e2e": summ("e2e", "cons"),
            "client_cpu_s": med(lambda r: r["cons"]["client_cpu_s"]),
        },
        "broker_us": med(lambda r: r["broker_us"]),
        "lost": max(r["lost"] for r in rows),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20, help="counted seconds per level")
    parser.add_argument("--peak-seconds", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--loads", default="10,50,90", help="percentages of the peak")
    parser.add_argument(
        "--rates", help="msgs/s levels instead of --loads, the same for every system"
    )
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--window", type=int, default=5000, help="max unanswered records")
    parser.add_argument("--linger-ms", type=float, default=0)
    parser.add_argument("--work", default="/tmp/pluglog-bench")
    parser.add_argument("--probe", action="store_true", help="GC pauses and reactor turns")
    args = parser.parse_args()
    systems = args.systems.split(",")
    for system in systems:
        if system not in SYSTEMS:
            parser.error(f"--systems: {system!r} is not one of {', '.join(SYSTEMS)}")
    if args.rates:
        levels = [(f"{int(r):,}/s", None, float(r)) for r in args.rates.split(",")]
    else:
        levels = [(f"{int(x)}%", int(x), None) for x in args.loads.split(",")]
    peers, venv = paper_bench.prepare(args.work)
    python = os.path.join(venv, "bin", "python")
    probe_path = None
    if args.probe:
        probe_path = os.path.join(args.work, "probe-%(pid)s.json")
        broker_probe.probe_brokers(probe_path)
    results = {}
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="pluglog-latency-", dir=args.work) as tmp:
        zk = None
        if "pluglog-rf3" in systems:
            zk = ZooKeeperProcess(Path(tmp) / "zk").start()
        try:
            for run in range(args.runs):
                for system in systems if run % 2 == 0 else systems[::-1]:
                    work = Path(tmp) / f"{system}-{run}"
                    work.mkdir()
                    server = start(system, work, peers, zk)
                    try:
                        one_system(server, system, run, levels, python, args, probe_path, results)
                    finally:
                        server.stop()
        finally:
            if zk is not None:
                zk.stop()
    print(f"\nmedians of {args.runs} run(s), {args.seconds:g} s per level, 200 B records")
    print(HEADER)
    medians = {}
    for system in systems:
        for label in ["peak"] + [lv[0] for lv in levels]:
            medians[(system, label)] = median_row(results[(system, label)])
            print(line(system, label, medians[(system, label)]))
    targets(medians, systems)
    out = os.path.join(args.work, f"latency-{time.strftime('%Y%m%dT%H%M%S')}.json")
    with open(out, "w") as handle:
        json.dump({f"{s} {lv}": rows for (s, lv), rows in results.items()}, handle)
    print(f"raw results: {out}")
    return 0


def one_system(server, system, run, levels, python, args, probe_path, results):
    """The peak, then each level, on one running ``server``."""
    peak = level(server, python, f"peak{run}", 0, args.peak_seconds, args, probe_path)
    results.setdefault((system, "peak"), []).append(peak)
    print(line(system, "peak", peak), flush=True)
    for number, (label, load, rate) in enumerate(levels):
        if rate is None:
            rate = peak["prod"]["rate"] * load / 100
        row = level(server, python, f"l{number}r{run}", rate, args.seconds, args, probe_path)
        results.setdefault((system, label), []).append(row)
        print(line(system, label, row), flush=True)
        for text in probe_lines(row):
            print(text, flush=True)


def targets(medians, systems):
    """The issue's targets at 50 % load, where the run has the figures."""
    pluglog, redis = medians.get(("pluglog", "50%")), medians.get(("redis", "50%"))
    if pluglog is None:
        return
    for kind, side in (("ack", "prod"), ("e2e", "cons")):
        ours = pluglog[side][kind]
        if not ours:
            continue
        text = f"50 % load, {kind}: pluglog p99 {ours['p99']:.1f} ms"
        if redis and redis[side][kind]:
            theirs = redis[side][kind]["p99"]
            verdict = "met" if ours["p99"] <= theirs else "missed"
            text += f", Redis p99 {theirs:.1f} ms (target p99 <= Redis's: {verdict})"
        verdict = "met" if ours["p999"] < 10 else "missed"
        text += f"; p99.9 {ours['p999']:.1f} ms (target < 10 ms: {verdict})"
        print(text)


if __name__ == "__main__":
    sys.exit(main())
