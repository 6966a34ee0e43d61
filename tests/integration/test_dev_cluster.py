"""``pluglog dev-cluster``: its own ZooKeeper and N brokers, stopped cleanly on SIGTERM."""

import json
import os
import signal
import socket
import subprocess
import sys
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
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pluglog.cli.main",
            "dev-cluster",
            "--brokers",
            "2",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
    )
    lines = {}
    try:
        deadline = time.monotonic() + 90
        while "bootstrap" not in lines and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            key, _, value = line.partition(": ")
            lines[key.strip()] = value.strip()
        assert "bootstrap" in lines, lines
        addresses = lines["bootstrap"].split(",")
        assert len(addresses) == 2 and all(_listening(a) for a in addresses)
        zk = KazooClient(hosts=lines["ZooKeeper"])
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
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
        assert proc.returncode == 0, out
        assert "cluster stopped" in out
        assert not any(_listening(a) for a in addresses)
        assert (tmp_path / "broker-1" / "meta.properties").exists()
        assert "stopped cleanly" in (tmp_path / "broker-1.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


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
