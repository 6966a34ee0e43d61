"""The controller's first partition states, created pipelined, against a real
ZooKeeper (in-process coordinators).

* Many partitions created at once (more than one round of
  :data:`pluglog.coordination.statecreation.BATCH`) each get one state
  znode, written once, with the leader, ISR and epochs the controller
  decides; every broker's cache gets them through its pipelined reads.
* A ZooKeeper crash in the middle of a creation still ends with every
  state written exactly once, and the topic usable: the creates cut off are
  redone through kazoo's retry once ZooKeeper is back. The cut is made
  certain, not raced: the ZooKeeper server is frozen (SIGSTOP, every thread
  of it seen stopped) from inside the controller's round, so the creates
  sent after that point cannot have been answered when it is killed.
* A creation whose partitions have no leader by the request's timeout fails
  with RequestTimedOutError (Kafka's REQUEST_TIMED_OUT), the topic kept.
"""

import os
import signal
import threading
import time

import pytest
from kazoo.exceptions import NodeExistsError
from twisted.python.failure import Failure

from pluglog.coordination import statecreation
from pluglog.coordination import zkdata as z
from pluglog.errors import RequestTimedOutError
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


def stopped_threads(pid):
    """Whether every thread of process ``pid`` is stopped (state T/t)."""
    states = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat", encoding="ascii", errors="replace") as f:
                states.append(f.read().rpartition(")")[2].split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return bool(states) and all(state in "Tt" for state in states)


def freeze(server, timeout=10):
    """SIGSTOP ``server``; return once none of its threads can run (no answer
    can leave it after this)."""
    server.proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while not stopped_threads(server.proc.pid):
        assert time.monotonic() < deadline, "ZooKeeper did not stop on SIGSTOP"
        time.sleep(0.001)


def until(predicate, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.002)


class KeptAnswer:
    """A round's fenced transaction whose answer (kazoo's AsyncResult) the
    test keeps, to know which were answered before the cut."""

    def __init__(self, tx, partition, answers):
        self.tx, self.partition, self.answers = tx, partition, answers

    def commit_async(self):
        self.answers[self.partition] = answer = self.tx.commit_async()
        return answer


def test_a_zookeeper_crash_mid_creation_writes_every_state_once(  # noqa: F811
    rt,  # noqa: F811
    cluster,  # noqa: F811
    zk,
    zookeeper,
    monkeypatch,
):
    # Sessions that outlive the restart, as in test_zk_isr's restart test.
    leader, follower = cluster(1, 2, zookeeper_session_timeout_ms=45000)
    rt.wait(lambda: leader.co.controller_id() == 1)
    controller = leader.co.controller
    epoch = controller.epoch
    # Two rounds: the first is cut, the second sent while ZooKeeper is away.
    monkeypatch.setattr(statecreation, "BATCH", 200)
    n, answered_first, cut_at = 300, 40, 80
    made, answers, redone, landed, redoing = [], {}, [], [], []
    frozen = threading.Event()
    fenced_create, create_again = controller._fenced_create, controller._create_again

    def fenced_create_then_freeze(topic, partition, state):
        # On the controller's thread, in the round's sending loop: each
        # transaction is sent (commit_async) right after this returns.
        tx = fenced_create(topic, partition, state)
        if topic != "cut" or redoing:
            return tx
        made.append(partition)
        if len(made) == cut_at:
            # The first ones answered, then the server frozen: partition
            # made[cut_at - 1] and all after it go out to a server that can
            # no longer answer.
            until(
                lambda: all(answers[p].ready() for p in made[:answered_first]),
                "the first creates were not answered",
            )
            freeze(zookeeper)
            frozen.set()
        return KeptAnswer(tx, partition, answers)

    def counted_again(topic, partition, state):
        # (Called again by kazoo's retry when an attempt is cut off too.)
        redone.append(partition)
        if not landed:
            # As if this cut-off create had landed just before the crash,
            # its answer lost: the redo must meet it and leave it.
            landed.append(partition)
            try:
                zk.retry(
                    zk.create, z.state_path(topic, partition), z.state_bytes(state), makepath=True
                )
            except NodeExistsError:
                pass  # landed already (this client's create, its answer cut off)
        redoing.append(partition)
        try:
            return create_again(topic, partition, state)
        finally:
            redoing.pop()

    controller._fenced_create = fenced_create_then_freeze
    controller._create_again = counted_again
    answers_of_create = []
    try:

        def create():
            # The answer waits for the leaders; bounded well past a reconnect
            # (up to kazoo's 30 s read timeout, see test_zk_coordinator).
            d = leader.co.create_topic(
                "cut", n, 2, {}, assignments={p: [1, 2] for p in range(n)}, timeout=120
            )
            d.addBoth(answers_of_create.append)

        rt.call(create)
        assert frozen.wait(30), "the controller never got to the cut"
        # The whole first round sent: the (k+1)-th call of the wrapper means
        # the k-th transaction's commit_async was made.
        until(lambda: len(made) >= statecreation.BATCH, f"the round stopped at {len(made)}")
        answered = [
            p for p in made[: cut_at - 1] if answers[p].ready() and answers[p].successful()
        ]
        unanswered = made[cut_at - 1 : statecreation.BATCH - 1]
        zookeeper.kill()  # frozen: nothing sent since the freeze was answered
        zookeeper.start()
        rt.wait(lambda: answers_of_create, timeout=120)
        assert not isinstance(answers_of_create[0], Failure), answers_of_create[0]
        for node in (leader, follower):
            rt.wait(
                lambda node=node: all(node.co.partition_state("cut", p) for p in range(n)),
                timeout=60,
            )
    finally:
        if zookeeper.alive() and stopped_threads(zookeeper.proc.pid):
            zookeeper.kill()
        if not zookeeper.alive():
            zookeeper.start()
    # Each partition sent once in the rounds (none left for a later
    # reconcile to find missing); those answered before the cut not again;
    # every one sent after the freeze cut off and redone (its state written
    # once all the same: checked below).
    assert sorted(made) == list(range(n))
    assert set(made[:answered_first]) <= set(answered)
    assert not set(answered) & set(redone), sorted(set(answered) & set(redone))
    assert set(unanswered) <= set(redone), sorted(set(unanswered) - set(redone))
    assert landed == redone[:1]
    for p in range(n):
        state, once = written_once(zk, "cut", p)
        assert once, p
        assert (state.leader, state.isr, state.leader_epoch, state.controller_epoch) == (
            1,
            (1, 2),
            0,
            epoch,
        ), p
    # Usable: the leader's ISR write goes through on a redone state.
    p = unanswered[-1]
    changed = leader.call("alter_isr", "cut", p, leader.state("cut", p), (1,))
    assert (changed.isr, changed.version) == ((1,), 1)
    rt.wait(lambda: follower.co.partition_state("cut", p).isr == (1,))


def test_a_creation_past_its_timeout_is_request_timed_out_and_the_topic_stays(  # noqa: F811
    rt,  # noqa: F811
    cluster,  # noqa: F811
    zk,
):
    # Kafka's DelayedCreatePartitions: past the request's timeout, the answer
    # is REQUEST_TIMED_OUT for a topic whose partitions have no leader yet;
    # the topic is created all the same. The controller is held (its worker
    # busy), so no state can be written before the timeout.
    nodes = cluster(1, 2)
    controller = controller_of(rt, nodes)
    gate = threading.Event()
    try:
        controller.co.controller.worker.post(gate.wait, 60)
        with pytest.raises(RequestTimedOutError, match="2 of its partitions had no leader"):
            rt.call(lambda: nodes[1].co.create_topic("late", 2, 2, {}, timeout=0.5))
        assert zk.exists(z.topic_path("late"))
        assert not zk.exists(z.state_path("late", 0))
    finally:
        gate.set()
    # Its leaders come once the controller gets to it.
    for node in nodes:
        rt.wait(lambda node=node: all(node.co.partition_state("late", p) for p in range(2)))
    # With time enough, the same call answers the topic.
    meta = rt.call(lambda: nodes[1].co.create_topic("soon", 2, 2, {}, timeout=30))
    assert meta.name == "soon"
    assert all(nodes[1].state("soon", p).leader in (1, 2) for p in range(2))
