"""A follower replicating 1 against 10,000 partitions, live, on 2 brokers (issue 24).

    python3 bench/replication_partitions_bench.py [--n 1000000] [--partitions 1,10000]
        [--runs 3] [--phases catch-up,live] [--profile DIR] [--restart]
        [--compare DIR | --code DIR | --fetchers N[,N...]] [--py-spy DIR]

One real ZooKeeper (tests/zookeeper.py) and, per topic size, a cluster of two
``twistd pluglog`` brokers (tests/cluster.py) with a topic of RF=2 whose
every partition is led by broker 1 and followed by broker 2 (an explicit
replica assignment). Both clusters stay up for the whole run, so the sizes
can be measured in turn within each run (the order alternates); the idle
cluster's CPU over a measurement is printed too.

Per run and size, two phases, each ``--n`` records of 200 B produced to the
leader by confluent-kafka (acks=1, the random partitioner):

* ``catch-up``: the follower is SIGSTOPped while the records are produced,
  then SIGCONTed; timed from SIGCONT until the follower's log of every
  partition is as long as the leader's. This is the follower's replication
  rate with nothing else running: msgs/s = n / that time.
* ``live``: the follower runs while the records are produced; timed from
  the first produce until every follower log has caught up (so it is capped
  by the producer's rate; the producer's own rate is printed beside it).

"Caught up" compares the partitions' segment file sizes on disk (the
follower appends the leader's batches unchanged, so equal sizes are equal
logs); the ZooKeeper session and ``replica.lag.time.max.ms`` are long
enough that the pause shrinks no ISR. CPU per replicated message of each
broker comes from /proc (utime + stime over the phase), and this
process's own share of a core over the phase is printed beside it: each
poll looks only at the partitions from the first one still behind on (a
poll of every partition's directory took 0.2 s of CPU at 10,000, which
kept one of the machine's two cores busy through the whole catch-up and
saw its end up to a poll late, session 15).

``--compare DIR`` runs a second cluster per size with the code of DIR (a
checkout with its C extensions built, e.g. main as "before") next to this
checkout's ("after"); each run measures both, the order alternating
between runs, and the medians are printed per code. An idle cluster of
10,000 partitions is not idle (its checkpoints every 60 s took up to 3.8 s
of CPU within one phase of the other, session 15), so at that size
separate runs with ``--code DIR`` (brokers running DIR's code only) in
alternating order are the cleaner comparison. ``--py-spy DIR``
records both brokers with py-spy over each catch-up (raw format, one file
per broker, size, code and run), without cProfile's cost per call.

``--fetchers 2`` runs the follower with ``num.replica.fetchers=2`` (two
connections and fetch sessions to the leader, so the leader answers one
while the follower stores the other); ``--fetchers 1,2`` runs a cluster of
each per size and measures them in turn, as ``--compare`` does.

``--restart`` finally stops the 10,000-partition cluster's follower
(SIGTERM) and starts it again: time until it listens, until Metadata shows
it back in every partition's ISR, and both brokers' RSS and open fds.

``--profile DIR`` runs the brokers under a bench-only cProfile hook
(bench/profiled_twistd.py): each phase is profiled in both brokers
and the stats written to DIR (``p<size>-broker<n>-<phase><run>.prof``).
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [HERE, os.path.join(HERE, "bench")]

import partitions_bench  # noqa: E402
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.cluster import Cluster  # noqa: E402
from tests.zookeeper import ZooKeeperProcess  # noqa: E402

SIZE = 200
CREATE_STEP = 500
TOPIC = "rep"
SETTINGS = {
    # A SIGSTOPped follower must keep its ZooKeeper session and its ISR
    # membership, or the pause would add 10,000 ISR changes to the figure.
    "zookeeper.session.timeout.ms": "30000",
    "replica.lag.time.max.ms": "600000",
    "replica.socket.timeout.ms": "60000",
    # Kafka's default: tests/cluster.py's 5 s has the controller read every
    # partition state from ZooKeeper every 5 s, which at 10,000 partitions
    # was most of the leader's CPU in this bench (it is also the controller).
    "leader.imbalance.check.interval.seconds": "300",
}
PROFILED = os.path.join(HERE, "bench", "profiled_twistd.py")


def load_average():
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status(pid):
    """(VmRSS MiB, VmHWM MiB, open fds) of ``pid``."""
    values = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"], len(os.listdir(f"/proc/{pid}/fd"))


class ProfiledBroker(BrokerProcess):
    """The same broker command, run by bench/profiled_twistd.py (SIGUSR1 starts
    a cProfile, SIGUSR2 writes it to the path in PLUGLOG_BENCH_PROFILE)."""

    def command(self):
        cmd = super().command()
        return [cmd[0], PROFILED, *cmd[3:]]


class BenchCluster(Cluster):
    profiled = False
    #: the checkout whose code the brokers run (None: this one)
    code = None

    def _process(self, node, port):
        broker = super()._process(node, port)
        if self.profiled:
            broker.__class__ = ProfiledBroker
        if self.code is not None:
            broker.root = self.code
        return broker


def create(bootstrap, partitions):
    """The topic, led by broker 1 and followed by broker 2, created in steps
    (one CreateTopics of 10,000 partitions outlasts the request timeout)."""
    # A step of 500 partitions outlasted librdkafka's 60 s socket timeout on
    # a loaded machine (the broker answers once every leader is in place).
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 300000})
    first = min(partitions, CREATE_STEP)
    topic = NewTopic(
        TOPIC,
        num_partitions=first,
        replica_assignment=[[1, 2]] * first,
        config={"min.insync.replicas": "1"},
    )
    admin.create_topics([topic], request_timeout=300)[TOPIC].result()
    count = first
    while count < partitions:
        step = min(partitions, count + CREATE_STEP) - count
        grown = NewPartitions(TOPIC, count + step, replica_assignment=[[1, 2]] * step)
        admin.create_partitions([grown], request_timeout=300)[TOPIC].result()
        count += step


class Logs:
    """The active segment files of every partition on both brokers."""

    def __init__(self, cluster, partitions):
        self.paths = {
            node: [
                Path(cluster.brokers[node].data_dir) / f"{TOPIC}-{p}" for p in range(partitions)
            ]
            for node in (1, 2)
        }

    @staticmethod
    def _size(directory):
        out = 0
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.name.endswith(".log"):
                        out += entry.stat().st_size
        except FileNotFoundError:
            pass
        return out

    def sizes(self, node):
        """Each partition's log size on ``node``."""
        return [self._size(directory) for directory in self.paths[node]]

    def with_data(self, node):
        """How many partitions hold any record."""
        count = 0
        for directory in self.paths[node]:
            with os.scandir(directory) as entries:
                count += any(e.name.endswith(".log") and e.stat().st_size for e in entries)
        return count

    def wait_equal(self, lead=None, timeout=600):
        """Wait until the follower's log of every partition is as long as the
        leader's (``lead``: the leader's sizes, taken now when None); returns
        the monotonic time it saw that.

        A follower's log only grows, so a partition seen caught up stays so:
        each poll goes on from the first partition still behind and stops at
        the next one behind, and the whole wait looks at each partition about
        once (a poll of all 10,000 directories took 0.2 s of CPU)."""
        deadline = time.monotonic() + timeout
        follower = self.paths[2]
        if lead is None:
            lead = self.sizes(1)
        while True:
            behind = 0
            while time.monotonic() < deadline:
                while behind < len(lead) and self._size(follower[behind]) >= lead[behind]:
                    behind += 1
                if behind == len(lead):
                    break
                time.sleep(0.005)
            else:
                raise SystemExit(
                    f"follower did not catch up in {timeout} s: partition {behind} at "
                    f"{self._size(follower[behind])} of {lead[behind]} bytes"
                )
            now = time.monotonic()
            again = self.sizes(1)
            if again == lead:
                return now
            lead = again  # the leader grew meanwhile: wait for that too


def produce(bootstrap, n):
    """``(start, elapsed)`` of producing ``n`` records to TOPIC, spread over
    every partition (partitions_bench's producer with ``--spread``)."""
    start = time.monotonic()
    elapsed = partitions_bench.produce(bootstrap, TOPIC, n, spread=True)
    return start, elapsed


class Setup:
    """One size's cluster."""

    def __init__(
        self, root, zk, partitions, profile_dir, code=None, label="", spy_dir=None, settings=None
    ):
        self.partitions = partitions
        self.profile_dir = profile_dir
        self.spy_dir = spy_dir
        self.label = label
        BenchCluster.profiled = profile_dir is not None
        name = f"p{partitions}{label}"
        settings = {**SETTINGS, **(settings or {})}
        self.cluster = BenchCluster(root / name, zk.connect_string(f"/{name}"), 2, settings)
        self.cluster.code = code
        self.cluster.start()
        try:
            started = time.monotonic()
            create(self.cluster.brokers[1].bootstrap, partitions)
            print(f"{partitions} partitions created in {time.monotonic() - started:.1f} s")
            self.logs = Logs(self.cluster, partitions)
            self.logs.wait_equal()
        except BaseException:
            for broker in self.cluster.brokers.values():
                broker.kill()
            raise

    def wait_leaders(self):
        """Every partition led by broker 1 in its own Metadata (the producer's view)."""

        def led():
            parts = self.cluster.metadata([TOPIC], node=1)["topics"][0]["partitions"]
            return len(parts) == self.partitions and all(p["leader_id"] == 1 for p in parts)

        self.cluster.wait_for(led, timeout=600, interval=1.0, what="leaders on broker 1")

    def pid(self, node):
        return self.cluster.brokers[node].proc.pid

    def cpu(self):
        """CPU seconds of the leader, the follower and this process."""
        return proc_cpu(self.pid(1)), proc_cpu(self.pid(2)), proc_cpu(os.getpid())

    def profile(self, on, tag):
        if self.profile_dir is None:
            return
        for node in (1, 2):
            if on:
                os.kill(self.pid(node), signal.SIGUSR1)
            else:
                name = f"p{self.partitions}{self.label}-broker{node}-{tag}.prof"
                path = Path(self.profile_dir) / name
                Path(self.profile_dir, "target").write_text(str(path))
                os.kill(self.pid(node), signal.SIGUSR2)
                deadline = time.monotonic() + 30
                while not path.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)

    def catch_up(self, n, run):
        bootstrap = self.cluster.brokers[1].bootstrap
        os.kill(self.pid(2), signal.SIGSTOP)
        try:
            produce(bootstrap, n)
        except BaseException:
            os.kill(self.pid(2), signal.SIGCONT)
            raise
        lead = self.logs.sizes(1)  # before the clock starts: 0.2 s at 10,000
        self.profile(True, f"catch-up{run}")
        spies = []
        if self.spy_dir is not None:
            for node in (1, 2):
                name = f"p{self.partitions}{self.label}-broker{node}-catch-up{run}.txt"
                path = os.path.join(self.spy_dir, name)
                # --nonblocking: the follower is stopped (SIGSTOP) when it attaches.
                command = ["py-spy", "record", "--nonblocking", "--format", "raw", "-r", "200"]
                spies.append(
                    subprocess.Popen(
                        [*command, "--pid", str(self.pid(node)), "-o", path],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            time.sleep(1)  # py-spy attaches
        cpu0 = self.cpu()
        start = time.monotonic()
        os.kill(self.pid(2), signal.SIGCONT)
        done = self.logs.wait_equal(lead)
        cpu1 = self.cpu()
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        self.profile(False, f"catch-up{run}")
        return n / (done - start), cpu0, cpu1, None, done - start

    def live(self, n, run):
        self.profile(True, f"live{run}")
        cpu0 = self.cpu()
        start, elapsed = produce(self.cluster.brokers[1].bootstrap, n)
        done = self.logs.wait_equal()
        cpu1 = self.cpu()
        self.profile(False, f"live{run}")
        return n / (done - start), cpu0, cpu1, n / elapsed, done - start

    def restart_follower(self):
        """Stop broker 2 cleanly and start it again with every partition on disk."""
        old = self.cluster.brokers[2]
        old.stop(timeout=300)
        started = time.monotonic()
        new = self.cluster._process(2, old.port)
        self.cluster.brokers[2] = new
        new.start(timeout=600)
        listening = time.monotonic() - started

        def in_isr():
            meta = self.cluster.metadata([TOPIC], node=1)
            parts = meta["topics"][0]["partitions"]
            return len(parts) == self.partitions and all(2 in p["isr_nodes"] for p in parts)

        self.cluster.wait_for(in_isr, timeout=600, interval=0.5, what="follower back in ISR")
        rejoined = time.monotonic() - started
        return listening, rejoined, proc_status(self.pid(2)), proc_status(self.pid(1))


def report(args, sizes, phases, results, codes):
    print(
        f"\nmedians of {args.runs} run(s), {args.n:,} records of {SIZE} B, load {load_average()}"
    )
    for code in codes:
        for phase in phases:
            base = None
            for partitions in sizes:
                runs = results[(code, partitions, phase)]
                rate = statistics.median(r[0] for r in runs)
                lead = statistics.median(r[1] for r in runs)
                follow = statistics.median(r[2] for r in runs)
                base = base or rate
                print(
                    f"{code:6} {partitions:>6} partitions {phase:8} {rate:>10,.0f} msgs/s "
                    f"({rate / base:.2f}x one partition); µs/msg leader {lead:.2f}, "
                    f"follower {follow:.2f}"
                )


def measure(args, setups, code, partitions, phases, run, results):
    """One run's phases on one cluster; the others idle meanwhile."""
    setup = setups[(code, partitions)]
    others = [s for key, s in setups.items() if key != (code, partitions)]
    for phase in phases:
        idle0 = sum(sum(s.cpu()[:2]) for s in others)
        if phase == "catch-up":
            rate, cpu0, cpu1, produced, took = setup.catch_up(args.n, run + 1)
        else:
            rate, cpu0, cpu1, produced, took = setup.live(args.n, run + 1)
        idle = sum(sum(s.cpu()[:2]) for s in others) - idle0
        filled = setup.logs.with_data(1)
        lead = 1e6 * (cpu1[0] - cpu0[0]) / args.n
        follow = 1e6 * (cpu1[1] - cpu0[1]) / args.n
        mine = (cpu1[2] - cpu0[2]) / took
        results.setdefault((code, partitions, phase), []).append((rate, lead, follow))
        extra = f", producer {produced:,.0f} msgs/s" if produced else ""
        print(
            f"run {run + 1} {code:6} {partitions:>6} partitions {phase:8} "
            f"{rate:>10,.0f} msgs/s replicated{extra}; µs/msg leader "
            f"{lead:.2f}, follower {follow:.2f}; leader {(cpu1[0] - cpu0[0]) / took:.0%}, "
            f"follower {(cpu1[1] - cpu0[1]) / took:.0%}, this process {mine:.0%} of a core; "
            f"{filled} partitions hold records; other clusters {idle:.2f} s CPU; "
            f"load {load_average()}",
            flush=True,
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--partitions", default="1,10000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--phases", default="catch-up,live")
    parser.add_argument("--profile", metavar="DIR", default=None)
    parser.add_argument("--restart", action="store_true")
    parser.add_argument(
        "--compare", metavar="DIR", default=None, help="also run DIR's code (before)"
    )
    parser.add_argument(
        "--code", metavar="DIR", default=None, help="run the brokers with DIR's code only"
    )
    parser.add_argument("--py-spy", metavar="DIR", default=None)
    parser.add_argument(
        "--fetchers",
        metavar="N[,N...]",
        default=None,
        help="the follower's num.replica.fetchers; several: a cluster each, compared",
    )
    args = parser.parse_args()
    if args.fetchers and (args.compare or args.code):
        parser.error("--fetchers takes this checkout's code only")
    sizes = [int(p) for p in args.partitions.split(",")]
    phases = args.phases.split(",")
    if args.py_spy:
        os.makedirs(args.py_spy, exist_ok=True)
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        os.environ["PLUGLOG_BENCH_PROFILE"] = str(Path(args.profile, "target").resolve())
    results = {}
    # code label -> the checkout its brokers run (None: this one)
    codes = {"": None}
    if args.code:
        codes = {"": os.path.abspath(args.code)}
    if args.compare:
        codes = {"after": None, "before": os.path.abspath(args.compare)}
    # code label -> broker settings beside SETTINGS
    variants = {}
    if args.fetchers:
        counts = args.fetchers.split(",")
        codes = {(f"f{c}" if len(counts) > 1 else ""): None for c in counts}
        variants = {label: {"num.replica.fetchers": c} for label, c in zip(codes, counts)}
    print(f"load average at start: {load_average()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="pluglog-rep-partitions-") as tmp:
        root = Path(tmp)
        zk = ZooKeeperProcess(root / "zk").start()
        setups = {}
        try:
            for partitions in sizes:
                for code, where in codes.items():
                    spec = (args.profile, where, code, args.py_spy, variants.get(code))
                    setups[(code, partitions)] = Setup(root, zk, partitions, *spec)
            for setup in setups.values():
                setup.wait_leaders()
            for run in range(args.runs):
                order = sizes if run % 2 == 0 else list(reversed(sizes))
                labels = list(codes) if run % 2 == 0 else list(reversed(codes))
                for partitions in order:
                    for code in labels:
                        measure(args, setups, code, partitions, phases, run, results)
            report(args, sizes, phases, results, codes)
            if args.restart:
                biggest = setups[(next(iter(codes)), max(sizes))]
                try:
                    listening, rejoined, follower, leader = biggest.restart_follower()
                except AssertionError as exc:
                    print(f"restart of the follower: {str(exc).splitlines()[0]}")
                    return
                print(
                    f"\nrestart of the follower of {max(sizes)} partitions: listening after "
                    f"{listening:.2f} s, back in every ISR after {rejoined:.2f} s; follower "
                    f"RSS {follower[0]:.0f} MiB (peak {follower[1]:.0f}), {follower[2]} fds; "
                    f"leader RSS {leader[0]:.0f} MiB (peak {leader[1]:.0f}), {leader[2]} fds"
                )
        finally:
            for setup in setups.values():
                # A clean stop of 10,000 partitions outlasts Cluster.stop's 30 s.
                for broker in setup.cluster.brokers.values():
                    if broker.alive():
                        broker.stop(timeout=600)
            zk.stop()


if __name__ == "__main__":
    main()
