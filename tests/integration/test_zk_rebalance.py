"""The controller's periodic leader-imbalance check against a real ZooKeeper
(in-process coordinators).

The check looks at the coordinator's cached partition states, as Kafka's
controller checks its context: reading every state znode each time cost
~23 % of a core at 10,000 partitions and a 5 s interval. The controller
reads ZooKeeper, and decides on what it reads, only when the cache shows a
live preferred leader in the ISR of a partition it is led away from.
"""

import time

from pluglog.coordination import election
from pluglog.coordination import zkdata as z
from tests.integration.test_zk_coordinator import cluster, controller_of, rt  # noqa: F401


def test_the_imbalance_check_reads_zookeeper_only_to_move_a_leader_back(
    rt,  # noqa: F811
    cluster,  # noqa: F811
    zk,  # noqa: F811
    monkeypatch,
):
    nodes = cluster(1, 2, leader_imbalance_check_interval_seconds=1)
    nodes[0].call("create_topic", "bal", 1, 2, {}, assignments={0: [1, 2]})
    rt.wait(lambda: all(n.co.partition_state("bal", 0) for n in nodes))
    controller = controller_of(rt, nodes).co.controller
    checks, loads = [], []
    imbalanced, load = election.imbalanced, controller.load

    def counted_check(*args):
        checks.append(1)
        return imbalanced(*args)

    def counted_load():
        loads.append(1)
        return load()

    monkeypatch.setattr(election, "imbalanced", counted_check)
    monkeypatch.setattr(controller, "load", counted_load)

    def state_now():
        return z.state_from_znode(*zk.get(z.state_path("bal", 0)))

    def write(leader, epoch, isr, version):
        new = type(state_now())(leader, epoch, isr, 1)
        zk.set(z.state_path("bal", 0), z.state_bytes(new), version=version)
        rt.wait(lambda: all(n.co.partition_state("bal", 0).isr == isr for n in nodes))

    time.sleep(2.5)  # balanced: checks, no reads
    assert len(checks) >= 2 and loads == []
    # Led away from its preferred leader 1, which is out of the ISR: no
    # preferred election could move it back yet.
    state = state_now()
    write(2, state.leader_epoch + 1, (2,), state.version)
    checks.clear()
    time.sleep(2.5)
    assert len(checks) >= 2 and loads == []
    assert nodes[0].state("bal", 0).leader == 2
    # Broker 1 back in the ISR: the controller reads ZooKeeper and moves it back.
    state = state_now()
    write(2, state.leader_epoch, (2, 1), state.version)
    rt.wait(lambda: all(n.co.partition_state("bal", 0).leader == 1 for n in nodes))
    assert loads
    assert state_now().leader_epoch == state.leader_epoch + 1
