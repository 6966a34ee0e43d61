"""The zookeeper coordinator against a real ZooKeeper: several brokers' coordinators
in this process (each its own kazoo session), on a private reactor thread."""

import dataclasses
import json
import os
import time

import pytest
from kazoo.client import KazooClient
from zope.interface.verify import verifyObject

from pluglog.coordination import zkdata as z
from pluglog.coordination.controller import ControllerMovedError
from pluglog.coordination.state import NO_LEADER, StaleStateError
from pluglog.errors import (
    ConfigError,
    ElectionNotNeededError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    TopicExistsError,
)
from pluglog.interfaces import ICoordinator
from tests.broker_process import free_port
from tests.tcp_gate import TcpGate
from tests.zk_cluster import CoordinatorNode, ReactorThread


@pytest.fixture(scope="module")
def rt():
    thread = ReactorThread()
    yield thread
    thread.stop()


@pytest.fixture
def cluster(rt, zk_connect, tmp_path):
    """``cluster(1, 2, 3, **settings)`` -> started nodes; all stopped afterwards."""
    made = []

    def make(*ids, start=True, connect=None, **settings):
        nodes = []
        for broker_id in ids:
            node = CoordinatorNode(rt, connect or zk_connect, broker_id, tmp_path, **settings)
            made.append(node)
            nodes.append(node.start() if start else node)
        return nodes

    yield make
    for node in made:
        try:
            node.stop()
        except Exception:
            pass


def controller_of(rt, nodes):
    rt.wait(lambda: all(n.co.controller_id() != -1 for n in nodes))
    ids = {n.co.controller_id() for n in nodes}
    assert len(ids) == 1
    (cid,) = ids
    return next(n for n in nodes if n.broker_id == cid)


def zget(zk, path):
    raw, stat = zk.get(path)
    return json.loads(raw), stat


def test_registration_layout_and_interface(rt, cluster, zk, tmp_path):
    (node,) = cluster(1, broker_rack="r1")
    assert verifyObject(ICoordinator, node.co)
    body, stat = zget(zk, "/brokers/ids/1")
    assert stat.ephemeralOwner != 0
    assert body["version"] == 5 and body["endpoints"] == ["PLAINTEXT://127.0.0.1:19001"]
    assert (body["host"], body["port"], body["rack"], body["jmx_port"]) == (
        "127.0.0.1",
        19001,
        "r1",
        -1,
    )
    assert body["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    cluster_id = zget(zk, "/cluster/id")[0]["id"]
    assert node.co.cluster_id() == cluster_id
    # The election runs on the controller's worker after start() returned.
    controller_of(rt, [node])
    controller, cstat = zget(zk, "/controller")
    assert controller["brokerid"] == 1 and controller["version"] == 1 and cstat.ephemeralOwner
    assert int(zk.get("/controller_epoch")[0]) >= 1
    props = z.parse_properties((tmp_path / "broker-1" / "meta.properties").read_text())
    assert props == {"cluster.id": cluster_id, "version": "0", "broker.id": "1"}
    assert node.co.brokers() == [(1, "127.0.0.1", 19001, "r1")]


def test_duplicate_broker_id_refused(cluster, zk, tmp_path):
    (first,) = cluster(1)
    (dup,) = cluster(1, start=False, data_dir=str(tmp_path / "dup"))
    with pytest.raises(ConfigError, match="broker.id=1 is already registered"):
        dup.start()
    # The first registration is untouched.
    assert zk.get("/brokers/ids/1")[1].ephemeralOwner == first.co.client.client_id[0]


def test_unreachable_zookeeper_gives_up(rt, tmp_path):
    node = CoordinatorNode(
        rt,
        f"127.0.0.1:{free_port()}",
        1,
        tmp_path,
        zookeeper_connection_timeout_ms=1500,
    )
    began = time.monotonic()
    with pytest.raises(ConfigError, match="could not connect to ZooKeeper.*within"):
        node.start()
    assert time.monotonic() - began < 6


def test_data_dir_of_another_cluster_refused(cluster, tmp_path):
    data = tmp_path / "broker-1"
    data.mkdir()
    (data / "meta.properties").write_text(z.meta_properties("someOtherCluster", 1))
    (node,) = cluster(1, start=False)
    with pytest.raises(ConfigError, match="belongs to cluster someOtherCluster"):
        node.start()


def test_controller_failover(rt, cluster, zk):
    nodes = cluster(1, 2, 3)
    first = controller_of(rt, nodes)
    epoch = int(zk.get("/controller_epoch")[0])
    first.stop()
    rest = [n for n in nodes if n is not first]
    rt.wait(lambda: rest[0].co.controller_id() not in (-1, first.broker_id))
    second = controller_of(rt, rest)
    assert int(zk.get("/controller_epoch")[0]) == epoch + 1
    assert zget(zk, "/controller")[0]["brokerid"] == second.broker_id
    rt.wait(lambda: [b[0] for b in rest[0].co.brokers()] == sorted(n.broker_id for n in rest))


def expire(zk_connect, node):
    """Kazoo's client_id trick: a second client on the same session, closed."""
    sid, pwd = node.co.client.client_id
    twin = KazooClient(hosts=zk_connect, client_id=(sid, pwd))
    twin.start(10)
    twin.stop()
    twin.close()


def test_controller_session_expiry_fences_stale_writes(rt, cluster, zk, zk_connect):
    nodes = cluster(1, 2, 3)
    nodes[0].call("create_topic", "fenced", 1, 3, {})
    old = controller_of(rt, nodes)
    stale_version = old.co.controller.epoch_version
    expire(zk_connect, old)
    others = [n for n in nodes if n is not old]
    rt.wait(lambda: others[0].co.controller_id() not in (-1, old.broker_id))
    new = controller_of(rt, others)
    rt.wait(lambda: ("session", "restored") in old.events)
    assert ("session", "lost") in old.events
    assert old.events.index(("session", "lost")) < old.events.index(("session", "restored"))
    rt.wait(lambda: old.broker_id in [b[0] for b in new.co.brokers()])
    # The expired broker is registered again, and is not the controller.
    assert zget(zk, "/controller")[0]["brokerid"] == new.broker_id
    before, stat = zk.get(z.state_path("fenced", 0))
    state = z.state_from_znode(before, stat)
    # The old controller's epoch-checked write, made with the epoch it won, is refused.
    ctl = old.co.controller
    ctl.epoch_version = stale_version
    forged = type(state)(old.broker_id, state.leader_epoch + 5, (old.broker_id,), ctl.epoch)
    with pytest.raises(ControllerMovedError):
        rt.call(lambda: ctl.worker.submit(ctl.write_state, "fenced", 0, forged, state.version))
    assert zk.get(z.state_path("fenced", 0))[0] == before
    assert not ctl.active


def test_a_racing_isr_write_does_not_unseat_the_controller(rt, cluster, zk):
    """A leader's ISR write landing between the controller's read and its
    fenced write fails the controller's multi with RolledBack on the epoch
    check: that is a conflict to retry, not a newer controller. (Taken for
    one, the controller stepped down while holding /controller, and a
    killed broker's partitions were never given new leaders.)"""
    nodes = cluster(1, 2, 3)
    nodes[0].call("create_topic", "race", 1, 3, {})
    ctl_node = controller_of(rt, nodes)
    ctl = ctl_node.co.controller
    raw, stat = zk.get(z.state_path("race", 0))
    seen = z.state_from_znode(raw, stat)
    # The leader's ISR shrink gets in first: the controller's version is old.
    zk.set(z.state_path("race", 0), raw, version=stat.version)
    wanted = type(seen)(seen.leader, seen.leader_epoch + 1, seen.isr, ctl.epoch)
    ok, _ = rt.call(lambda: ctl.worker.submit(ctl.write_state, "race", 0, wanted, seen.version))
    assert not ok  # refused as a conflict ...
    assert ctl.active  # ... and the controller is still the controller
    # update() retries with the state as it is now, and its write lands.
    final = rt.call(
        lambda: ctl.worker.submit(
            ctl.update,
            "race",
            0,
            seen.isr,
            seen,
            lambda _r, s: dataclasses.replace(s, leader_epoch=s.leader_epoch + 1),
        )
    )
    assert final.leader_epoch == seen.leader_epoch + 1
    raw, stat = zk.get(z.state_path("race", 0))
    assert z.state_from_znode(raw, stat).leader_epoch == seen.leader_epoch + 1
    assert zget(zk, "/controller")[0]["brokerid"] == ctl_node.broker_id


def test_topic_creation_states_and_errors(rt, cluster, zk):
    nodes = cluster(1, 2, 3)
    meta = nodes[1].call("create_topic", "t", 6, 3, {"retention.ms": "1000"})
    assert sorted(r[0] for r in meta.assignment.values()) == [1, 1, 2, 2, 3, 3]
    body, _ = zget(zk, "/brokers/topics/t")
    assert body["partitions"] == {str(p): r for p, r in meta.assignment.items()}
    assert zget(zk, "/config/topics/t")[0] == {"version": 1, "config": {"retention.ms": "1000"}}
    for p, replicas in meta.assignment.items():
        # create_topic waits for the creating broker's view; broker 1 hears of
        # the states through its own watches, a moment later under load.
        state = rt.wait(lambda p=p: nodes[0].co.partition_state("t", p))
        assert (state.leader, state.leader_epoch, state.isr) == (replicas[0], 0, tuple(replicas))
        assert zget(zk, z.state_path("t", p))[0]["leader"] == replicas[0]
    # Every broker hears "created" and a "partition" event per replica it holds.
    for node in nodes:
        rt.wait(lambda node=node: len([e for e, _ in node.events if e == "partition"]) == 6)
        assert [m.name for m in node.events_of("created")] == ["t"]
    with pytest.raises(TopicExistsError):
        nodes[2].call("create_topic", "t", 1, 1, {})
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 3"):
        nodes[0].call("create_topic", "big", 1, 4, {})
    explicit = nodes[0].call("create_topic", "ex", 2, -1, {}, assignments={0: [3, 1], 1: [1, 3]})
    assert explicit.assignment == {0: [3, 1], 1: [1, 3]}
    assert nodes[0].state("ex", 0).leader == 3
    internal = nodes[0].call("create_topic", "__consumer_offsets", 3, 1, {}, internal=True)
    assert internal.internal and all(len(r) == 3 for r in internal.assignment.values())
    assert zget(zk, "/brokers/topics/__consumer_offsets")[0]["pluglog"] == {"internal": True}


def test_rack_aware_creation(rt, cluster):
    nodes = cluster(1, 2, 3, 4, broker_rack="x")
    rt.wait(lambda: len(nodes[0].co.brokers()) == 4)
    # Give the brokers two racks: restart 3 and 4 on rack "y".
    for node in nodes[2:]:
        node.stop()
    racked = cluster(3, 4, broker_rack="y")
    rt.wait(lambda: {b[3] for b in nodes[0].co.brokers()} == {"x", "y"})
    meta = racked[0].call("create_topic", "racks", 8, 2, {})
    racks = {1: "x", 2: "x", 3: "y", 4: "y"}
    for replicas in meta.assignment.values():
        assert {racks[b] for b in replicas} == {"x", "y"}


def test_leader_election_on_broker_loss(rt, cluster):
    nodes = cluster(1, 2, 3)
    by_id = {n.broker_id: n for n in nodes}
    nodes[0].call("create_topic", "clean", 1, 3, {}, assignments={0: [2, 3, 1]})
    nodes[0].call(
        "create_topic",
        "dirty",
        1,
        -1,
        {"unclean.leader.election.enable": "true"},
        assignments={0: [2, 3]},
    )
    nodes[0].call("create_topic", "strict", 1, -1, {}, assignments={0: [2, 3]})
    watcher = by_id[1] if controller_of(rt, nodes).broker_id != 1 else by_id[3]
    # Shrink the ISRs of "dirty" and "strict" to their leader 2 (as a leader would).
    for topic in ("dirty", "strict"):
        # create_topic answers once the *calling* broker (1) has seen the
        # states; broker 2 learns them through its own watch, maybe later.
        state = rt.wait(lambda t=topic: by_id[2].co.partition_state(t, 0))
        by_id[2].call("alter_isr", topic, 0, state, (2,))
    by_id[2].stop()
    # Clean: the next replica in assignment order that is in the ISR and alive.
    rt.wait(lambda: watcher.co.partition_state("clean", 0).leader == 3)
    state = watcher.state("clean", 0)
    assert (state.leader_epoch, state.isr) == (1, (3, 1))
    # No ISR member alive: unclean only where the topic allows it.
    rt.wait(lambda: watcher.co.partition_state("dirty", 0).leader == 3)
    assert watcher.state("dirty", 0).isr == (3,)
    rt.wait(lambda: watcher.co.partition_state("strict", 0).leader == NO_LEADER)
    assert watcher.state("strict", 0).isr == (2,)


def test_alter_isr_success_and_conflict(rt, cluster):
    nodes = cluster(1, 2)
    nodes[0].call("create_topic", "isr", 1, 2, {}, assignments={0: [1, 2]})
    # create_topic waits (bounded) for the controller's state; under load it
    # may answer first, so wait for the state itself.
    state = rt.wait(lambda: nodes[0].co.partition_state("isr", 0))
    new = nodes[0].call("alter_isr", "isr", 0, state, (1,))
    assert new.isr == (1,) and new.version == state.version + 1
    rt.wait(lambda: nodes[1].co.partition_state("isr", 0).isr == (1,))
    with pytest.raises(StaleStateError):
        nodes[0].call("alter_isr", "isr", 0, state, (1, 2))
    assert nodes[0].state("isr", 0).isr == (1,)


def test_preferred_election_and_auto_rebalance(rt, cluster):
    nodes = cluster(1, 2, 3, leader_imbalance_check_interval_seconds=1)
    nodes[0].call("create_topic", "pref", 1, 3, {}, assignments={0: [1, 2, 3]})
    watcher = next(n for n in nodes if n.broker_id != 1)
    nodes[0].stop()
    rt.wait(lambda: watcher.co.partition_state("pref", 0).leader == 2)
    (back,) = cluster(1, leader_imbalance_check_interval_seconds=1)
    # Not yet in sync: the preferred leader is not available.
    result = watcher.call("elect_leaders", [("pref", 0)], preferred=True)
    assert result[("pref", 0)].name == "PREFERRED_LEADER_NOT_AVAILABLE"
    # The leader adds it back to the ISR once it caught up; then it can lead again.
    state = watcher.state("pref", 0)
    leader = next(n for n in nodes if n.broker_id == state.leader)
    leader.call("alter_isr", "pref", 0, state, (2, 3, 1))
    rt.wait(lambda: back.co.partition_state("pref", 0).leader == 1, timeout=20)
    result = back.call("elect_leaders", [("pref", 0)], preferred=True)
    assert isinstance(result[("pref", 0)], ElectionNotNeededError)


def test_admin_rereads_brokers_its_watch_has_not_delivered(rt, cluster):
    """A broker that registered a moment ago may not be in another broker's
    watch-fed list yet (the flake of the test above under load: "names unknown
    broker(s) [3]"). Creation checks ZooKeeper's list before refusing."""
    nodes = cluster(1, 2, 3)
    rt.wait(lambda: [b[0] for b in nodes[0].co.brokers()] == [1, 2, 3])

    def lag():  # as if broker 3's watch event were still on its way
        nodes[0].co._brokers.pop(3)

    rt.call(lag)
    meta = nodes[0].call("create_topic", "late", 1, -1, {}, assignments={0: [1, 2, 3]})
    assert meta.assignment == {0: [1, 2, 3]}
    assert [b[0] for b in nodes[0].co.brokers()] == [1, 2, 3]
    rt.call(lag)
    meta = nodes[0].call("create_topic", "late-rf3", 2, 3, {})
    assert all(sorted(r) == [1, 2, 3] for r in meta.assignment.values())
    rt.call(lag)
    meta = nodes[0].call("create_partitions", "late", 2, assignments=[[3, 2, 1]])
    assert meta.assignment[1] == [3, 2, 1]
    # A broker that is really not registered is still refused, after the re-read.
    with pytest.raises(InvalidReplicaAssignmentError, match=r"unknown broker\(s\) \[9\]"):
        nodes[0].call("create_topic", "nine", 1, -1, {}, assignments={0: [1, 9]})
    with pytest.raises(InvalidReplicationFactorError):
        nodes[0].call("create_topic", "rf4", 1, 4, {})


def test_explicit_preferred_election(rt, cluster):
    nodes = cluster(1, 2, auto_leader_rebalance_enable=False)
    nodes[0].call("create_topic", "e", 1, 2, {}, assignments={0: [1, 2]})
    nodes[0].stop()
    rt.wait(lambda: nodes[1].co.partition_state("e", 0).leader == 2)
    (back,) = cluster(1, auto_leader_rebalance_enable=False)
    # The leader (2) takes broker 1 back into the ISR; no automatic move.
    state = nodes[1].state("e", 0)
    nodes[1].call("alter_isr", "e", 0, state, (2, 1))
    rt.wait(lambda: back.co.partition_state("e", 0).isr == (2, 1))
    assert back.state("e", 0).leader == 2
    result = back.call("elect_leaders", [("e", 0), ("nope", 0)], preferred=True)
    assert result[("e", 0)] is None
    assert result[("nope", 0)].name == "UNKNOWN_TOPIC_OR_PARTITION"
    rt.wait(lambda: nodes[1].co.partition_state("e", 0).leader == 1)
    assert back.state("e", 0).leader_epoch == state.leader_epoch + 1


def test_controlled_shutdown_moves_leadership(rt, cluster):
    nodes = cluster(
        1, 2, 3, auto_leader_rebalance_enable=False, controlled_shutdown_timeout_ms=3000
    )
    meta = nodes[0].call("create_topic", "cs", 6, 2, {})
    ctl = controller_of(rt, nodes)
    follower = next(n for n in nodes if n is not ctl)
    # A non-controller: every partition it led has another live ISR member.
    follower.call("controlled_shutdown")
    for p, replicas in meta.assignment.items():
        state = follower.state("cs", p)
        assert state.leader != follower.broker_id and state.leader in replicas
        assert follower.broker_id not in state.isr
    follower.stop()
    # The controller: partitions whose other replica is gone cannot move, so
    # it gives up after controlled.shutdown.timeout.ms; it resigns the role.
    began = time.monotonic()
    ctl.call("controlled_shutdown")
    assert time.monotonic() - began < 8
    survivor = next(n for n in nodes if n not in (ctl, follower))
    rt.wait(lambda: survivor.co.controller_id() == survivor.broker_id)
    for p, replicas in meta.assignment.items():
        state = survivor.state("cs", p)
        if survivor.broker_id in replicas and ctl.broker_id in replicas:
            assert state.leader == survivor.broker_id
            assert ctl.broker_id not in state.isr


def test_a_controlled_shutdown_of_an_earlier_registration_is_refused(rt, cluster, zk):
    # Kafka's STALE_BROKER_EPOCH: a request left behind by a broker that has
    # registered again since must not take its leadership and ISR places.
    nodes = cluster(1, 2, 3, auto_leader_rebalance_enable=False)
    by_id = {n.broker_id: n for n in nodes}
    order = {p: [2, 1, 3] for p in range(3)}
    by_id[1].call("create_topic", "epochs", 3, -1, {}, assignments=order)
    rt.wait(lambda: all(by_id[2].co.partition_state("epochs", p) for p in range(3)))
    _, stat = zk.get("/brokers/ids/2")
    assert by_id[2].co.broker_epoch == stat.czxid
    stale = {"type": "controlled_shutdown", "broker": 2, "broker_epoch": stat.czxid - 1}
    result = rt.call(by_id[3].co._request, stale, 20)
    assert result == {"error": "STALE_BROKER_EPOCH"}

    def stored(p):  # ZooKeeper's own copy, not a broker's cache
        return z.state_from_znode(*zk.get(z.state_path("epochs", p)))

    for p in range(3):
        assert (stored(p).leader, sorted(stored(p).isr)) == (2, [1, 2, 3])
    # The broker's own request carries its current epoch and is served.
    by_id[2].call("controlled_shutdown")
    for p in range(3):
        assert stored(p).leader != 2 and 2 not in stored(p).isr


def test_reassignment(rt, cluster, zk):
    nodes = cluster(1, 2, 3)
    by_id = {n.broker_id: n for n in nodes}
    nodes[0].call("create_topic", "move", 1, -1, {}, assignments={0: [1]})
    first = rt.wait(lambda: by_id[1].co.partition_state("move", 0))
    result = nodes[2].call("reassign_partitions", {("move", 0): [2, 3]})
    assert result == {("move", 0): None}
    rt.wait(lambda: nodes[2].co.topics()["move"].replicas(0) == [2, 3, 1])
    assert nodes[2].call("list_reassignments") == {
        ("move", 0): {"replicas": [2, 3, 1], "adding_replicas": [2, 3], "removing_replicas": [1]}
    }
    assert by_id[2].events_of("changed")[-1].replicas(0) == [2, 3, 1]
    # The leader (1) sees the new replicas catch up and adds them to the ISR,
    # writing over the state in which the controller bumped its epoch for
    # the new replicas (the topic znode above is written before that state).
    state = rt.wait(
        lambda: (
            (s := by_id[1].co.partition_state("move", 0)).leader_epoch > first.leader_epoch and s
        )
    )
    by_id[1].call("alter_isr", "move", 0, state, (1, 2, 3))
    rt.wait(lambda: nodes[2].co.topics()["move"].replicas(0) == [2, 3])
    state = nodes[2].state("move", 0)
    assert state.leader == 2 and state.isr == (2, 3)
    assert nodes[2].call("list_reassignments") == {}
    assert not zk.exists("/admin/reassign_partitions")
    body = zget(zk, "/brokers/topics/move")[0]
    assert body["partitions"] == {"0": [2, 3]} and body["adding_replicas"] == {}


def test_deletion_partitions_and_config_events(rt, cluster, zk):
    nodes = cluster(1, 2)
    nodes[0].call("create_topic", "ev", 2, 2, {})
    grown = nodes[1].call("create_partitions", "ev", 4)
    assert grown.num_partitions == 4
    # create_partitions waits a bounded time for the new states; on a loaded
    # machine they may arrive after it answered.
    rt.wait(lambda: nodes[1].co.partition_state("ev", 3))
    rt.wait(lambda: nodes[0].co.topics()["ev"].num_partitions == 4)
    assert nodes[0].events_of("changed")[-1].num_partitions == 4
    nodes[1].call("alter_topic_config", "ev", {"retention.ms": "5"})
    rt.wait(lambda: nodes[0].co.topics()["ev"].configs == {"retention.ms": "5"})
    assert nodes[0].events_of("changed")[-1].configs == {"retention.ms": "5"}
    nodes[0].call("delete_topic", "ev")
    rt.wait(lambda: "ev" not in nodes[1].co.topics())
    assert [m.name for m in nodes[1].events_of("deleted")] == ["ev"]
    assert not zk.exists("/brokers/topics/ev") and not zk.exists("/config/topics/ev")
    assert zk.get_children("/admin/delete_topics") == []
    assert nodes[0].state("ev", 0) is None
    # The name can be used again; every broker sees the new topic and its state.
    again = nodes[1].call("create_topic", "ev", 1, 1, {})
    rt.wait(lambda: getattr(nodes[0].co.topics().get("ev"), "topic_id", "") == again.topic_id)
    rt.wait(lambda: nodes[0].co.partition_state("ev", 0) is not None)
    assert nodes[0].state("ev", 0).leader_epoch == 0


def test_zookeeper_restart_loses_nothing(rt, cluster, zookeeper):
    nodes = cluster(1, 2)
    nodes[0].call("create_topic", "durable", 3, 2, {"retention.ms": "77"})

    def states(node):
        found = {p: node.co.partition_state("durable", p) for p in range(3)}
        return {p: (s.leader, s.isr) for p, s in found.items()} if all(found.values()) else None

    # create_topic may answer before the controller wrote every state (it waits
    # a bounded time): read them once they are all there.
    before = rt.wait(lambda: states(nodes[0]))
    zookeeper.restart()
    # Both brokers come back registered (same or new session) and see the same data.
    rt.wait(lambda: len(nodes[1].co.brokers()) == 2, timeout=30)
    rt.wait(lambda: nodes[0].co.controller_id() != -1, timeout=30)
    rt.wait(lambda: states(nodes[1]) == before, timeout=30)
    assert nodes[1].co.topics()["durable"].configs == {"retention.ms": "77"}
    nodes[1].call("create_topic", "after", 1, 2, {})
    rt.wait(lambda: nodes[0].co.partition_state("after", 0) is not None)
    assert os.path.isdir(zookeeper.data_dir)


@pytest.mark.parametrize("stop", ["kill", "stop"])
def test_watches_follow_changes_after_a_zookeeper_restart(
    rt, cluster, zk, zk_connect, zookeeper, stop
):
    """kazoo drops every watch when its connection is lost and does not set
    them again when the same session reconnects: the brokers must, or they
    follow a dead leader forever (issue 21, defect 1)."""
    # The brokers reach ZooKeeper through a gate kept shut until the restarted
    # server serves. ZooKeeper 3.8.0 can leave a connection accepted in the
    # first instants after it binds its port neither answered nor closed (a
    # probe connecting every 20 ms through restarts at load ~8 saw 0-5 such
    # connections per restart, all within 0.1 s of the first "not running"
    # close), and kazoo waits the whole session timeout for that handshake's
    # answer (session_timeout / number of hosts), so the session expired
    # (in CI): the expiry path, which other tests cover, instead of the
    # reconnect this test is about. The zk fixture only makes the chroot.
    gate = TcpGate(zookeeper.port)
    chroot = zk_connect[len(zookeeper.hosts) :]
    try:
        # A session that outlives a slow JVM restart on a loaded machine.
        nodes = cluster(
            1, 2, connect=f"127.0.0.1:{gate.port}{chroot}", zookeeper_session_timeout_ms=45000
        )
        nodes[0].call("create_topic", "watched", 2, 2, {})
        rt.wait(lambda: all(n.co.partition_state("watched", p) for n in nodes for p in (0, 1)))
        sessions = [n.co.client.client_id[0] for n in nodes]
        getattr(zookeeper, stop)()  # SIGKILL or SIGTERM
        gate.close()
        zookeeper.start()
        gate.open()
        rt.wait(lambda: all(n.co.client.connected for n in nodes), timeout=30)
    finally:
        gate.open()
    # The sessions survived the restart: this is the reconnect path, not a restore.
    assert [n.co.client.client_id[0] for n in nodes] == sessions
    assert not [e for n in nodes for e in n.events if e == ("session", "lost")]
    # Someone else's writes, on a client that connects once the server serves
    # (the zk fixture's connection to the restarting server may be the one
    # left unanswered).
    writer = KazooClient(hosts=zk_connect)
    writer.start(30)
    try:
        # A change made by someone else after the restart reaches every broker.
        raw, stat = writer.get(z.state_path("watched", 1))
        moved = z.state_from_znode(raw, stat)
        moved = type(moved)(
            moved.leader, moved.leader_epoch + 1, moved.isr[:1], moved.controller_epoch, -1
        )
        writer.set(z.state_path("watched", 1), z.state_bytes(moved), version=stat.version)
        writer.set(
            z.config_path("watched"),
            json.dumps({"version": 1, "config": {"retention.ms": "9"}}).encode(),
        )
        for node in nodes:
            rt.wait(
                lambda n=node: (
                    n.co.partition_state("watched", 1).leader_epoch == moved.leader_epoch
                )
            )
            rt.wait(lambda n=node: n.co.topics()["watched"].configs == {"retention.ms": "9"})
            assert node.state("watched", 1).isr == moved.isr
    finally:
        writer.stop()
        writer.close()


def test_unclean_election_on_request_and_kafka_admin_znode(rt, cluster, zk):
    nodes = cluster(1, 2, 3, auto_leader_rebalance_enable=False)
    by_id = {n.broker_id: n for n in nodes}
    by_id[1].call("create_topic", "u", 1, -1, {}, assignments={0: [2, 3]})
    by_id[1].call("create_topic", "k", 1, -1, {}, assignments={0: [1, 3]})
    state = by_id[2].state("u", 0)
    by_id[2].call("alter_isr", "u", 0, state, (2,))
    by_id[2].stop()
    rt.wait(lambda: by_id[1].co.partition_state("u", 0).leader == NO_LEADER)
    # Brokers hear about the loss.
    rt.wait(lambda: [b[0] for b in by_id[1].co.brokers()] == [1, 3])
    assert [b[0] for b in by_id[1].events_of("brokers")[-1]] == [1, 3]
    # A preferred election cannot help; an unclean one elects the live replica.
    result = by_id[1].call("elect_leaders", [("u", 0)], preferred=True)
    assert result[("u", 0)].name == "PREFERRED_LEADER_NOT_AVAILABLE"
    result = by_id[1].call("elect_leaders", [("u", 0)], preferred=False)
    assert result[("u", 0)] is None
    state = by_id[1].state("u", 0)
    assert (state.leader, state.isr) == (3, (3,))
    result = by_id[1].call("elect_leaders", [("u", 0)], preferred=False)
    assert isinstance(result[("u", 0)], ElectionNotNeededError)
    # Kafka tooling's /admin/preferred_replica_election works too.
    by_id[1].call("controlled_shutdown")
    rt.wait(lambda: by_id[3].co.partition_state("k", 0).leader == 3)
    by_id[1].stop()
    (back,) = cluster(1, auto_leader_rebalance_enable=False)
    state = by_id[3].state("k", 0)
    assert state.isr == (3,)
    by_id[3].call("alter_isr", "k", 0, state, (3, 1))
    rt.wait(lambda: back.co.partition_state("k", 0).isr == (3, 1))
    assert back.state("k", 0).leader == 3
    zk.create(
        "/admin/preferred_replica_election",
        json.dumps({"version": 1, "partitions": [{"topic": "k", "partition": 0}]}).encode(),
    )
    rt.wait(lambda: back.co.partition_state("k", 0).leader == 1)
    rt.wait(lambda: not zk.exists("/admin/preferred_replica_election"))


def test_reassignment_cancel(rt, cluster):
    nodes = cluster(1, 2, 3)
    nodes[0].call("create_topic", "c", 1, -1, {}, assignments={0: [1, 2]})
    nodes[0].call("reassign_partitions", {("c", 0): [3, 2]})
    rt.wait(lambda: ("c", 0) in nodes[1].co.list_reassignments())
    assert nodes[1].call("list_reassignments")[("c", 0)]["adding_replicas"] == [3]
    # 3 never catches up; cancel: back to the original replicas.
    result = nodes[1].call("reassign_partitions", {("c", 0): None, ("c", 5): [1]})
    assert result[("c", 0)] is None
    assert result[("c", 5)].name == "UNKNOWN_TOPIC_OR_PARTITION"
    # Like Kafka, the original set is RS minus adding_replicas, in RS order.
    rt.wait(lambda: nodes[2].co.topics()["c"].replicas(0) == [2, 1])
    assert nodes[2].call("list_reassignments") == {}
    result = nodes[1].call("reassign_partitions", {("c", 0): None})
    assert result[("c", 0)].name == "NO_REASSIGNMENT_IN_PROGRESS"
    result = nodes[1].call("reassign_partitions", {("c", 0): [1, 9]})
    assert result[("c", 0)].name == "INVALID_REPLICA_ASSIGNMENT"


def test_writes_ride_out_an_expired_session(rt, cluster, zk, zk_connect):
    nodes = cluster(1, 2)
    expire(zk_connect, nodes[0])
    # Issued while the session is expired or being replaced: kazoo's command
    # retry redoes the write on the new session instead of failing it.
    meta = nodes[0].call("create_topic", "survivor", 1, 2, {})
    assert meta.num_partitions == 1
    assert zget(zk, "/brokers/topics/survivor")[0]["partitions"] == {"0": meta.assignment[0]}
    rt.wait(lambda: ("session", "restored") in nodes[0].events, timeout=30)
    rt.wait(lambda: sorted(b[0] for b in nodes[1].co.brokers()) == [1, 2], timeout=30)
