"""``twistd pluglog --coordinator zookeeper`` broker processes on a real ZooKeeper."""

import json
import signal
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


def test_create_topics_past_its_timeout_answers_request_timed_out(tmp_path, zk, zk_connect):
    """Kafka's DelayedCreatePartitions: CreateTopics (and CreatePartitions)
    answers once the new partitions have leaders, or at its timeout_ms with
    REQUEST_TIMED_OUT for a topic still without them (created all the same). The controller's
    broker is frozen (SIGSTOP), so no leader can come before the timeout."""
    from kafka.admin import KafkaAdminClient

    from tests.integration.test_zk_create_states import freeze

    # Sessions far longer than the freeze: the controller stays the controller.
    settings = {"zookeeper.session.timeout.ms": "30000"}
    brokers = {i: zk_broker(tmp_path, zk_connect, i, **settings) for i in (1, 2)}
    admin = None
    try:
        for broker in brokers.values():
            broker.start()
        controller = json.loads(zk.get("/controller")[0])["brokerid"]
        other = 3 - controller
        admin = KafkaAdminClient(bootstrap_servers=brokers[other].bootstrap)
        admin.describe_cluster()  # metadata in hand before the freeze
        # Any pluglog broker takes CreateTopics: send it to the one not frozen.
        admin._controller_id = other
        grown = admin.create_topics(
            {"grown": {"num_partitions": 1, "replication_factor": 1}},
            timeout_ms=30000,
            raise_errors=False,
        )
        assert [(t["name"], t["error_code"]) for t in grown["topics"]] == [("grown", 0)]
        freeze(brokers[controller])
        try:
            # CreatePartitions takes the same wait (Kafka's createPartitions).
            more = admin.create_partitions({"grown": 3}, timeout_ms=1500, raise_errors=False)
            (result,) = more.results
            assert (result.name, result.error_code) == ("grown", 7)
            assert "2 of its partitions had no leader" in result.error_message
            assert not zk.exists("/brokers/topics/grown/partitions/2/state")
            late = admin.create_topics(
                {"late": {"num_partitions": 2, "replication_factor": 1}},
                timeout_ms=1500,
                raise_errors=False,
            )
            assert [(t["name"], t["error_code"]) for t in late["topics"]] == [("late", 7)]
            assert "2 of its partitions had no leader" in late["topics"][0]["error_message"]
            assert zk.exists("/brokers/topics/late")
            assert not zk.exists("/brokers/topics/late/partitions/0/state")
        finally:
            brokers[controller].proc.send_signal(signal.SIGCONT)
        # The controller back, the topic gets its leaders; and a creation
        # with time enough answers NONE with its leaders there.
        soon = admin.create_topics(
            {"soon": {"num_partitions": 2, "replication_factor": 1}},
            timeout_ms=30000,
            raise_errors=False,
        )
        assert [(t["name"], t["error_code"]) for t in soon["topics"]] == [("soon", 0)]
        for topic, count in (("soon", 2), ("late", 2), ("grown", 3)):
            for p in range(count):
                state = json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0])
                assert state["leader"] in (1, 2)
    finally:
        if admin is not None:
            admin.close()
        for broker in brokers.values():
            if broker.alive():
                broker.proc.send_signal(signal.SIGCONT)
            broker.stop()
