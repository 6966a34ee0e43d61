"""``twistd pluglog --coordinator zookeeper`` broker processes on a real ZooKeeper."""

import json
import subprocess
import sys

import pytest

from pluglog.datadir import meta_properties
from tests.broker_process import ROOT, TWISTD, BrokerProcess, assert_refused, free_port


def zk_broker(tmp_path, zk_connect, broker_id, **settings):
    return BrokerProcess(
        tmp_path / f"data-{broker_id}",
        settings={
            "zookeeper.connect": zk_connect,
            "zookeeper.session.timeout.ms": "4000",
            "offsets.topic.replication.factor": "2",
            **settings,
        },
        extra_args=["--coordinator", "zookeeper", "--broker-id", str(broker_id)],
    )


def test_brokers_register_and_leave(tmp_path, zk, zk_connect):
    brokers = [zk_broker(tmp_path, zk_connect, i) for i in (1, 2)]
    try:
        for broker in brokers:
            broker.start()
        assert sorted(zk.get_children("/brokers/ids")) == ["1", "2"]
        for broker, broker_id in zip(brokers, (1, 2)):
            body = json.loads(zk.get(f"/brokers/ids/{broker_id}")[0])
            assert body["endpoints"] == [f"PLAINTEXT://127.0.0.1:{broker.port}"]
            assert body["port"] == broker.port
        assert json.loads(zk.get("/controller")[0])["brokerid"] in (1, 2)
        cluster_id = json.loads(zk.get("/cluster/id")[0])["id"]
        meta = (tmp_path / "data-1" / "meta.properties").read_text()
        assert f"cluster.id={cluster_id}" in meta and "broker.id=1" in meta
        # A third broker with a taken id exits non-zero with a clear line.
        dup = zk_broker(tmp_path / "dup", zk_connect, 2)  # its own dir: not the lock
        with pytest.raises(RuntimeError, match="broker.id=2 is already registered"):
            dup.start()
        assert dup.proc.returncode != 0
        # SIGTERM: the broker deregisters (its session closes).
        assert brokers[0].stop() in (0, -15)
        assert zk.get_children("/brokers/ids") == ["2"]
    finally:
        for broker in brokers:
            broker.stop()


def test_restart_right_after_sigkill_waits_for_its_own_old_session(tmp_path, zk, zk_connect):
    """The killed broker's ephemeral registration lives until its session
    expires; the same data dir's next start waits for that, not exits
    (issue 21, defect 2). Another data dir's broker with the id still fails."""
    # The restart must reach ZooKeeper before the killed broker's session
    # expires: 8 s leaves room for a slow start on a loaded machine (4 s did not).
    settings = {"zookeeper.session.timeout.ms": "8000"}
    broker = zk_broker(tmp_path, zk_connect, 1, **settings)
    broker.start()
    old_session = zk.exists("/brokers/ids/1").ephemeralOwner
    assert (tmp_path / "data-1" / "zookeeper.session").read_text().strip() == f"{old_session:x}"
    broker.kill()
    assert zk.exists("/brokers/ids/1").ephemeralOwner == old_session
    again = zk_broker(tmp_path, zk_connect, 1, **settings)
    try:
        again.start(timeout=30)
        assert f"previous ZooKeeper session 0x{old_session:x}; waiting up to 13s" in again.log()
        assert zk.exists("/brokers/ids/1").ephemeralOwner not in (0, old_session)
    finally:
        again.stop()


def test_unreachable_zookeeper_is_one_line(tmp_path):
    connect = f"127.0.0.1:{free_port()}"
    broker = zk_broker(tmp_path, connect, 1, **{"zookeeper.connection.timeout.ms": "1500"})
    exited = broker.run_until_exit(timeout=30)
    assert_refused(
        exited,
        f"could not connect to ZooKeeper at zookeeper.connect={connect} "
        "within zookeeper.connection.timeout.ms=1500",
    )
    assert "not reachable yet (attempt 1" in exited.log


def test_data_dirs_of_other_clusters_refused(tmp_path, zk, zk_connect):
    """A single-node (local) broker's dir, and a dir of another ZooKeeper
    cluster: one line saying how to proceed; the broker never registers."""
    local = BrokerProcess(tmp_path / "data-1").start()
    local.stop()
    exited = zk_broker(tmp_path, zk_connect, 1).run_until_exit()
    last = assert_refused(
        exited, f"data dir {tmp_path / 'data-1'} belongs to the single-node cluster"
    )
    assert "start it with --coordinator local" in last and "remove " in last
    other = tmp_path / "data-2"
    other.mkdir()
    (other / "meta.properties").write_text(meta_properties("someOtherCluster", 2))
    exited = zk_broker(tmp_path, zk_connect, 2).run_until_exit()
    last = assert_refused(exited, f"data dir {other} belongs to cluster someOtherCluster")
    assert "use another --data-dir" in last
    assert zk.get_children("/brokers/ids") == []


def test_usage_errors_on_the_command_line(tmp_path):
    def run(*args):
        return subprocess.run(
            [sys.executable, "-c", TWISTD, "-n", "pluglog", "--data-dir", str(tmp_path), *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )

    result = run("--coordinator", "zookeeper", "--broker-id", "1")
    assert result.returncode != 0
    assert "zookeeper.connect" in result.stdout + result.stderr
    result = run("--coordinator", "zookeeper", "--set", "zookeeper.connect=host-without-port")
    assert result.returncode != 0
    assert "not HOST:PORT" in result.stdout + result.stderr
