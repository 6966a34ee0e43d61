"""ZooKeeper faults under acks=all load, with broker processes on a real ZooKeeper.

Each test runs its own ZooKeeper (standalone, or a 3-node ensemble) so it can
kill it; three brokers with a 4 s session (tests.cluster.FAST_SETTINGS)
serve a topic with replication factor 3 and min.insync.replicas=2 while an
idempotent acks=all producer (tests.chaos.ProducerThread) writes to it.

- ZooKeeper restarted (SIGKILL or SIGTERM), then the controller and then a
  partition leader SIGKILLed: within 2 x the session timeout of each kill
  every live broker's Metadata agrees with ZooKeeper's znodes, writes resume
  on every partition, and every acknowledged record is read back once.
- ZooKeeper down for longer than the session timeout: leaders keep serving
  fetches and acks=all writes; a write the ISR cannot confirm (a follower
  frozen meanwhile) is answered with the retriable REQUEST_TIMED_OUT within
  the request's timeout, not left hanging. Once ZooKeeper is back the
  frozen broker's session expires and its partitions move; thawed, it
  registers again and the cluster converges without a restart (Metadata
  agrees with ZooKeeper, ISR full again).
- One node of a 3-node ensemble (its leader) SIGKILLed and restarted:
  acknowledgements keep coming, nothing acknowledged is lost.
"""

import os
import signal
import time

import pytest

from pluglog.client.blocking import BlockingClient
from pluglog.errors import NONE, REQUEST_TIMED_OUT
from tests.chaos import ProducerThread, check_read_back, create_topic
from tests.cluster import FAST_SETTINGS, Cluster
from tests.zk_faults import (
    ZooKeeperView,
    disagreements,
    produce_once,
    wait_agreement,
    wait_reconnected,
    wait_writes_resume,
)
from tests.zookeeper import ZooKeeperEnsemble, ZooKeeperProcess

SESSION_S = int(FAST_SETTINGS["zookeeper.session.timeout.ms"]) / 1000.0
TOPIC = "zkfaults"
PARTITIONS = 3


@pytest.fixture
def zk_cluster(tmp_path):
    """``start(zk)``: three brokers on ``zk`` (a private ZooKeeper or ensemble)
    with the topic created; everything is stopped afterwards."""
    made = []

    def start(zk):
        made.append(zk)
        cluster = Cluster(tmp_path, zk.connect_string("/pluglog"))
        made.append(cluster)
        cluster.start()
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS)
        cluster.wait_for_isr(TOPIC, PARTITIONS, 3)
        view = ZooKeeperView(zk.connect_string("/pluglog"))
        made.append(view)
        return cluster, view

    yield start
    for thing in reversed(made):
        try:
            thing.close() if isinstance(thing, ZooKeeperView) else thing.stop()
        except Exception:  # noqa: BLE001 - best-effort cleanup
            pass


def finish(cluster, producer):
    """Stop the producer; assert every acknowledged record is read back once."""
    producer.stop()
    assert not producer.is_alive(), "the producer did not flush"
    assert len(producer.acked) > 500, (len(producer.acked), producer.errors)
    lost, duplicated = check_read_back(cluster.bootstrap, TOPIC, PARTITIONS, producer.acked)
    assert lost == [], f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    assert duplicated == [], f"{len(duplicated)} records stored twice, e.g. {duplicated[:5]}"


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_zookeeper_restart_then_controller_and_leader_killed(tmp_path, zk_cluster, how):
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    cluster, view = zk_cluster(zk)
    producer = ProducerThread(cluster.bootstrap, TOPIC, PARTITIONS, rate=300, idempotent=True)
    producer.start()
    time.sleep(1)

    zk.kill() if how == "SIGKILL" else zk.stop()
    time.sleep(1)
    zk.start()
    # Every broker (and the view) back on the same sessions: nothing expired.
    wait_reconnected(zk.port, 4)
    assert view.brokers() == [1, 2, 3]
    wait_writes_resume(producer, PARTITIONS)

    # The controller dies: a survivor must see the new controller's decisions.
    controller = cluster.controller()
    killed = time.monotonic()
    cluster.kill(controller)
    wait_agreement(cluster, view, TOPIC, PARTITIONS, killed, 2 * SESSION_S)
    wait_writes_resume(producer, PARTITIONS)
    cluster.restart(controller)
    cluster.wait_for_isr(TOPIC, PARTITIONS, 3)

    # Then a partition leader (not the new controller, if it can be avoided).
    leaders = {cluster.leader(TOPIC, p) for p in range(PARTITIONS)}
    victim = min(leaders - {cluster.controller()} or leaders)
    killed = time.monotonic()
    cluster.kill(victim)
    wait_agreement(cluster, view, TOPIC, PARTITIONS, killed, 2 * SESSION_S)
    wait_writes_resume(producer, PARTITIONS)
    finish(cluster, producer)


def test_zookeeper_down_longer_than_the_session(tmp_path, zk_cluster):
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    cluster, view = zk_cluster(zk)
    producer = ProducerThread(cluster.bootstrap, TOPIC, PARTITIONS, rate=300, idempotent=True)
    producer.start()
    wait_writes_resume(producer, PARTITIONS)
    leaders = {p: cluster.leader(TOPIC, p) for p in range(PARTITIONS)}

    zk.stop()
    time.sleep(SESSION_S + 1)
    # The leaders they had keep serving reads and acks=all writes (the ISR
    # needs no change, so nothing needs ZooKeeper).
    wait_writes_resume(producer, PARTITIONS)
    for p, leader in leaders.items():
        assert cluster.leader(TOPIC, p) == leader
        fetched = cluster.brokers[leader]
        with BlockingClient("127.0.0.1", fetched.port, timeout=10) as client:
            answer = client.fetch(TOPIC, {p: 0})[0]
        assert answer["error_code"] == NONE and answer["high_watermark"] > 0, answer

    # A follower stops answering: its leaders cannot shrink the ISR without
    # ZooKeeper, so an acks=all write cannot be confirmed. The broker answers
    # REQUEST_TIMED_OUT (retriable) at the request's timeout.
    frozen = leaders[0]
    pid = cluster.brokers[frozen].proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(float(FAST_SETTINGS["replica.lag.time.max.ms"]) / 1000.0)
        for p, leader in leaders.items():
            if leader == frozen:
                continue
            code, took = produce_once(cluster.brokers[leader].port, TOPIC, p, 1500)
            assert code == REQUEST_TIMED_OUT, (p, code)
            assert took < 1500 / 1000.0 + 2.0, took

        # ZooKeeper returns (sessions get a fresh timeout); the frozen
        # broker's expires, and the others take its partitions over.
        back = time.monotonic()
        zk.start()
        others = sorted(set(cluster.brokers) - {frozen})
        while view.brokers() != others:
            assert time.monotonic() - back < 2 * SESSION_S, view.brokers()
            time.sleep(0.1)
    finally:
        os.kill(pid, signal.SIGCONT)

    # Without a restart: it finds its session expired, registers again and
    # catches up; every broker's Metadata agrees with ZooKeeper, ISR full.
    thawed = time.monotonic()
    wait_agreement(cluster, view, TOPIC, PARTITIONS, thawed, 2 * SESSION_S)
    assert view.brokers() == [1, 2, 3]
    cluster.wait_for_isr(TOPIC, PARTITIONS, 3, timeout=2 * SESSION_S)
    wait_agreement(cluster, view, TOPIC, PARTITIONS, time.monotonic(), SESSION_S)
    wait_writes_resume(producer, PARTITIONS)
    finish(cluster, producer)


def test_ensemble_leader_killed_and_restarted_under_load(tmp_path, zk_cluster):
    ensemble = ZooKeeperEnsemble(tmp_path / "ensemble").start()
    cluster, view = zk_cluster(ensemble)
    producer = ProducerThread(cluster.bootstrap, TOPIC, PARTITIONS, rate=300, idempotent=True)
    producer.start()
    wait_writes_resume(producer, PARTITIONS)
    epochs = {p: cluster.partition(TOPIC, p)["leader_epoch"] for p in range(PARTITIONS)}
    time.sleep(1)
    producer.longest_gap = [0.0] * PARTITIONS

    leader = ensemble.leader()
    ensemble.kill(leader)
    time.sleep(SESSION_S / 2)
    wait_writes_resume(producer, PARTITIONS, timeout=3)
    ensemble.start_node(leader)
    # A session timeout later: every broker's session survived.
    time.sleep(SESSION_S)
    wait_writes_resume(producer, PARTITIONS, timeout=3)

    # Nothing stalled: no partition went 3 s without an acknowledgement, no
    # broker lost its session (no leader moved), nothing was lost.
    assert max(producer.longest_gap) < 3.0, producer.longest_gap
    assert view.brokers() == [1, 2, 3]
    assert {p: cluster.partition(TOPIC, p)["leader_epoch"] for p in range(PARTITIONS)} == epochs
    assert disagreements(cluster, view, TOPIC, PARTITIONS) == []
    finish(cluster, producer)
