"""``pluglog dev-cluster``: its own ZooKeeper and N brokers, stopped cleanly on SIGTERM."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from kazoo.client import KazooClient

from tests.broker_process import ROOT

# its own ZooKeeper and brokers, started by the command, not by a fixture
pytestmark = pytest.mark.cluster


def _listening(address):
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.2):
            return True
    except OSError:
        return False


def test_dev_cluster_starts_registers_and_stops(tmp_path):
    cluster = Supervisor("--brokers", "2", "--dir", str(tmp_path))
    try:
        addresses = cluster.wait_line(r"^bootstrap: (\S+)", timeout=90).group(1).split(",")
        assert len(addresses) == 2 and all(_listening(a) for a in addresses)
        zk = KazooClient(hosts=cluster.wait_line(r"^ZooKeeper: (\S+)").group(1))
        zk.start(10)
        try:
            deadline = time.monotonic() + 20
            while sorted(zk.get_children("/brokers/ids")) != ["1", "2"]:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            ports = {json.loads(zk.get(f"/brokers/ids/{b}")[0])["port"] for b in ("1", "2")}
            assert ports == {int(a.rsplit(":", 1)[1]) for a in addresses}
        finally:
            zk.stop()
            zk.close()
        # stop N: a clean SIGTERM stop on request, not reported as a death.
        out = _cli("dev-cluster", "stop", "2", "--dir", str(tmp_path)).stdout
        assert out.startswith("broker 2 (pid ") and "stopped (SIGTERM" in out, out
        assert not _listening(addresses[1]) and _listening(addresses[0])
        err = _cli("dev-cluster", "stop", "2", "--dir", str(tmp_path), expect=1).stderr
        assert err == "pluglog: broker 2 is not running\n"
        status = _cli("dev-cluster", "status", "--dir", str(tmp_path)).stdout
        assert re.search(r"^broker 1: running\t", status, re.M), status
        assert re.search(r"^broker 2: stopped\t", status, re.M), status
        time.sleep(0.5)
        assert "exited" not in cluster.output()
    finally:
        code = cluster.stop()
    assert code == 0, cluster.output()
    assert cluster.output().endswith("cluster stopped")
    assert not any(_listening(a) for a in addresses)
    assert (tmp_path / "broker-1" / "meta.properties").exists()
    assert "stopped cleanly" in (tmp_path / "broker-1.log").read_text()
    err = _cli("dev-cluster", "start", "2", "--dir", str(tmp_path), expect=1).stderr
    assert err.startswith(f"pluglog: no dev cluster runs in {tmp_path} ("), err


def test_a_broker_that_cannot_start_is_named_with_its_log(tmp_path):
    cluster = Supervisor(
        "--brokers", "1", "--dir", str(tmp_path), "--set", "num.partitions=many"
    )  # fmt: skip
    try:
        cluster.proc.wait(90)  # it gives up on its own
    finally:
        code = cluster.stop()
    assert code == 1, cluster.output()
    line = cluster.wait_line(r"^pluglog: broker 1 \(pid \d+\) exited with code \d.*").group(0)
    assert "num.partitions" in line, line  # why: the broker's own one line
    logs = re.search(r"; see (\S+)(?: and (\S+))?$", line)
    assert logs, line
    assert logs.group(1) == str(tmp_path / "broker-1.log")
    assert all(os.path.exists(path) for path in logs.groups() if path)
    assert cluster.output().endswith("cluster stopped")


def test_dev_cluster_refuses_bad_count():
    result = subprocess.run(
        [sys.executable, "-m", "pluglog.cli.main", "dev-cluster", "--brokers", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT),
        timeout=60,
    )
    assert result.returncode == 2 and "positive integer" in result.stderr


class Supervisor:
    """A running ``pluglog dev-cluster`` process whose output (stdout and
    stderr) a thread collects line by line."""

    def __init__(self, *args, cwd=ROOT):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pluglog.cli.main", "dev-cluster", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(),
            cwd=cwd,
        )
        self.lines = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, pattern, timeout=60):
        """The first match of ``pattern`` in the output so far or to come."""
        deadline = time.monotonic() + timeout
        while True:
            for line in list(self.lines):
                found = re.search(pattern, line)
                if found:
                    return found
            assert self.proc.poll() is None or self._reader.is_alive(), self.output()
            assert time.monotonic() < deadline, f"no {pattern!r} in:\n{self.output()}"
            time.sleep(0.05)

    def output(self):
        return "\n".join(self.lines)

    def stop(self, timeout=90):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        return self.proc.returncode


def _env():
    return dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    )


def _cli(*args, expect=0):
    result = subprocess.run(
        [sys.executable, "-m", "pluglog.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
        timeout=120,
        check=False,
    )
    assert expect is None or result.returncode == expect, result.stdout + result.stderr
    return result


def _partitions(bootstrap, topic):
    """``[(leader, replicas, isr)]`` from ``pluglog topics describe``."""
    out = _cli("-b", bootstrap, "topics", "describe", topic).stdout
    rows = re.findall(r"Leader: (-?\d+)\tReplicas: \[([\d, ]*)\]\tIsr: \[([\d, ]*)\]", out)
    return [
        (int(leader), {int(r) for r in replicas.split(",")}, {int(i) for i in isr.split(",")})
        for leader, replicas, isr in rows
    ]


def _wait(predicate, timeout, what, detail=str):
    """Until ``predicate()``; a timeout fails with ``what`` and ``detail()``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}:\n{detail()}"
        time.sleep(0.3)


def test_failover_walkthrough(tmp_path):
    """docs/cluster.rst's walkthrough as a new user runs it: a 3-broker dev
    cluster, a topic with 3 replicas, acks=all produce, one broker killed
    (the others keep serving, its death reported), produce continues, the
    broker started again with ``dev-cluster start N``, the ISR restored."""
    import confluent_kafka

    root = tmp_path / "dev"
    cluster = Supervisor(
        "--brokers", "3", "--dir", str(root),
        "--set", "zookeeper.session.timeout.ms=3000",
        "--set", "default.replication.factor=2",
    )  # fmt: skip
    console = None
    try:
        bootstrap = cluster.wait_line(r"^bootstrap: (\S+)").group(1)
        first = bootstrap.split(",")[0]
        pids = {
            int(m[0]): int(m[1])
            for m in re.findall(r"^broker (\d): \S+, pid (\d+), log", cluster.output(), re.M)
        }
        assert sorted(pids) == [1, 2, 3], cluster.output()
        restart = cluster.wait_line(r"restart: (.* dev-cluster start 2 --dir \S+)$").group(1)
        assert restart.endswith(f"dev-cluster start 2 --dir {root}")

        _cli("-b", first, "topics", "create", "walk", "--partitions", "3",
             "--replication-factor", "3", "--config", "min.insync.replicas=2")  # fmt: skip
        assert [len(r) for _, r, _ in _partitions(first, "walk")] == [3, 3, 3]
        _cli("-b", first, "topics", "create", "default-rf")  # the broker's default: 2
        assert [len(r) for _, r, _ in _partitions(first, "default-rf")] == [2]

        acked, failed = [], []

        def report(err, msg):
            (failed if err else acked).append(err or msg.value().decode())

        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
             "linger.ms": 5, "message.timeout.ms": 60000}
        )  # fmt: skip

        def produce(start, count):
            for i in range(start, start + count):
                producer.produce("walk", f"v{i}".encode(), on_delivery=report)
                producer.poll(0)
            assert producer.flush(60) == 0, (failed, cluster.output())

        # The console producer too, fed a line at a time, sending each
        # within --linger-ms, through the kill and the restart.
        console = subprocess.Popen(
            [sys.executable, "-m", "pluglog.cli.main", "-b", bootstrap, "produce", "walk"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=_env(),
            cwd=ROOT,
        )
        lines = []

        def console_produce(count):
            for _ in range(count):
                lines.append(f"c{len(lines)}")
                console.stdin.write(lines[-1].encode() + b"\n")
                console.stdin.flush()
                time.sleep(0.005)

        produce(0, 300)
        console_produce(100)
        # kill -9 broker 1, the leader of a partition and the first -b address: a crash.
        victim = 1
        assert victim in {leader for leader, _, _ in _partitions(first, "walk")}
        survivor = bootstrap.split(",")[1]
        os.kill(pids[victim], signal.SIGKILL)
        dead = rf"broker {victim} \(pid {pids[victim]}\) exited.*"
        report_line = cluster.wait_line(dead).group(0)
        assert "code -9 (SIGKILL)" in report_line, report_line
        log = re.search(r"; see (\S+) ", report_line).group(1)
        assert os.path.exists(log) and log.endswith(f"broker-{victim}.log")

        produce(300, 300)  # acks=all keeps working on the other two
        console_produce(100)
        _wait(
            lambda: all(victim not in isr for _, _, isr in _partitions(survivor, "walk")),
            30,
            "the dead broker never left the ISR",
            lambda: _partitions(survivor, "walk"),
        )
        produce(600, 300)
        assert cluster.proc.poll() is None, cluster.output()

        started = _cli("dev-cluster", "start", str(victim), "--dir", str(root), expect=None)
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"broker {victim} started" in started.stdout
        _wait(
            lambda: all(isr == {1, 2, 3} for _, _, isr in _partitions(bootstrap, "walk")),
            30,
            "the ISR was not restored",
            lambda: f"{_partitions(bootstrap, 'walk')}\n{cluster.output()}",
        )
        produce(900, 100)
        console_produce(100)
        said = console.communicate(timeout=90)[0].decode()  # closes its stdin: EOF
        assert console.returncode == 0, said
        assert failed == [] and len(acked) == 1000
        out = _cli("-b", bootstrap, "consume", "walk", "--from-beginning", "--exit").stdout
        assert sorted(out.split()) == sorted(acked + lines)  # each record once
        status = _cli("dev-cluster", "status", "--dir", str(root)).stdout
        assert status.count(": running\t") == 3, status
    finally:
        if console is not None and console.poll() is None:
            console.kill()
            console.wait()
        code = cluster.stop()
    assert code == 0, cluster.output()
    assert cluster.output().endswith("cluster stopped")
    assert not (root / "dev-cluster.json").exists()
