"""The controller's first partition states, created pipelined, against a real
ZooKeeper (in-process coordinators).

* Many partitions created at once (more than one round of
  :data:`pluglog.coordination.statecreation.BATCH`) each get one state
  znode, written once, with the leader, ISR and epochs the controller
  decides; every broker's cache gets them through its pipelined reads.
* A ZooKeeper restart in the middle of a big creation (some creates
  answered, some in flight, the rest sent while it is down) still ends with
  every state written exactly once, and the topic usable: the creates cut
  off are redone through kazoo's retry once ZooKeeper is back.
"""

import threading

from twisted.python.failure import Failure

from pluglog.coordination import statecreation
from pluglog.coordination import zkdata as z
from tests.integration.test_zk_coordinator import cluster, controller_of, rt  # noqa: F401


def written_once(zk, topic, partition):
    """The state znode and whether it was never set after its create."""
    raw, stat = zk.retry(zk.get, z.state_path(topic, partition))
    return z.state_from_znode(raw, stat), stat.version == 0 and stat.czxid == stat.mzxid


def test_many_partitions_created_at_once_all_get_their_states(rt, cluster, zk):  # noqa: F811
    nodes = cluster(1, 2, 3)
    controller = controller_of(rt, nodes)
    n = statecreation.BATCH + 300
    assignments = {p: [p % 3 + 1, (p + 1) % 3 + 1] for p in range(n)}
    controller.call("create_topic", "many", n, 2, {}, assignments=assignments)
    for node in nodes:
        rt.wait(lambda node=node: all(node.co.partition_state("many", p) for p in range(n)))
    epoch = controller.co.controller.epoch
    for p in range(n):
        state, once = written_once(zk, "many", p)
        assert once, p
        leader, follower = assignments[p]
        assert (state.leader, state.isr, state.leader_epoch, state.controller_epoch) == (
            leader,
            (leader, follower),
            0,
            epoch,
        ), p
        for node in nodes:
            cached = node.state("many", p)
            assert (cached.leader, cached.isr, cached.version) == (leader, (leader, follower), 0)


def test_a_zookeeper_restart_mid_creation_writes_every_state_once(  # noqa: F811
    rt,  # noqa: F811
    cluster,  # noqa: F811
    zk,
    zookeeper,
):
    # Sessions that outlive the restart, as in test_zk_isr's restart test.
    leader, follower = cluster(1, 2, zookeeper_session_timeout_ms=45000)
    rt.wait(lambda: leader.co.controller_id() == 1)
    controller = leader.co.controller
    n = statecreation.BATCH + 500
    cut_at = 400  # of the first round's transactions
    made, redone, stopped = [], [], threading.Event()
    fenced_create, create_again = controller._fenced_create, controller._create_again

    def fenced_create_then_cut(topic, partition, state):
        # On the controller's thread, between two of the round's sends: the
        # creates before are answered or in flight, those after go out to
        # a ZooKeeper that is down.
        made.append(partition)
        if topic == "cut" and len(made) == cut_at:
            zookeeper.stop()
            stopped.set()
        return fenced_create(topic, partition, state)

    def counted_again(topic, partition, state):
        redone.append(partition)
        return create_again(topic, partition, state)

    controller._fenced_create = fenced_create_then_cut
    controller._create_again = counted_again
    try:
        answers = []

        def create():
            d = leader.co.create_topic("cut", n, 2, {}, assignments={p: [1, 2] for p in range(n)})
            d.addBoth(answers.append)

        rt.call(create)  # its answer waits for the states
        assert stopped.wait(30)
        zookeeper.start()
        rt.wait(lambda: answers, timeout=60)
        assert not isinstance(answers[0], Failure), answers[0]
        for node in (leader, follower):
            rt.wait(
                lambda node=node: all(node.co.partition_state("cut", p) for p in range(n)),
                timeout=60,
            )
    finally:
        if not zookeeper.alive():
            zookeeper.start()
    assert redone, "no create was cut off: the restart came too late"
    for p in range(n):
        state, once = written_once(zk, "cut", p)
        assert once, p
        assert (state.leader, state.isr, state.leader_epoch) == (1, (1, 2), 0), p
    # Usable: the leader's ISR write goes through on the created state.
    state = leader.state("cut", n - 1)
    changed = leader.call("alter_isr", "cut", n - 1, state, (1,))
    assert (changed.isr, changed.version) == ((1,), 1)
    rt.wait(lambda: follower.co.partition_state("cut", n - 1).isr == (1,))
