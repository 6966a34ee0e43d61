"""A leader's ISR writes against a real ZooKeeper (in-process coordinators).

* An ISR write that loses to the controller brings the winning state with it:
  the leader follows the new epoch before the failure fires, not when the
  watch's refresh gets its turn on a ZooKeeper worker busy with other writes.
* A broker whose registration is gone is not added to an ISR (KIP-841: fenced
  replicas are not eligible), and is once it registers again.
"""

import threading
import types

from twisted.internet import defer

from pluglog.broker.partition import Partition
from pluglog.config import TopicConfig
from pluglog.coordination import zkdata as z
from pluglog.coordination.state import StaleStateError
from pluglog.replication.manager import ReplicaManager
from pluglog.storage.memory import MemoryLogStorage
from tests.integration.test_zk_coordinator import cluster, rt, zk  # noqa: F401


def test_a_lost_isr_write_brings_the_winning_state_first(rt, cluster, zk):  # noqa: F811
    leader, _ = cluster(1, 2)
    leader.call("create_topic", "race", 1, 2, {}, assignments={0: [1, 2]})
    state = rt.wait(lambda: leader.co.partition_state("race", 0))
    gate = threading.Event()
    seen = []
    try:
        # Hold the leader's ZooKeeper worker: its ISR write queues first, the
        # refresh the controller's write triggers queues behind it.
        rt.call(leader.co.io.post, gate.wait, 20)

        def write():
            def failed(failure):
                failure.trap(StaleStateError)
                seen.append(leader.co.partition_state("race", 0))

            leader.co.alter_isr("race", 0, state, (1,)).addCallbacks(seen.append, failed)

        rt.call(write)
        bumped = type(state)(1, state.leader_epoch + 1, (1,), state.controller_epoch)
        zk.set(z.state_path("race", 0), z.state_bytes(bumped), version=state.version)
    finally:
        gate.set()
    rt.wait(lambda: seen)
    (current,) = seen
    assert (current.leader_epoch, current.isr) == (state.leader_epoch + 1, (1,))


def test_only_a_registered_broker_joins_the_isr(rt, cluster, tmp_path):  # noqa: F811
    leader, follower = cluster(1, 2)
    leader.call("create_topic", "fenced", 1, 2, {}, assignments={0: [1, 2]})
    state = rt.wait(lambda: leader.co.partition_state("fenced", 0))
    config = TopicConfig()
    part = Partition(
        "fenced", 0, MemoryLogStorage().open_log("fenced", 0, config), config, node_id=1
    )
    broker = types.SimpleNamespace(
        coordinator=leader.co,
        reactor=rt.reactor,
        config=leader.config,
        node_id=1,
        partitions={("fenced", 0): part},
        now_ms=lambda: int(rt.reactor.seconds() * 1000),
        leadership_changed=lambda part: None,
    )
    manager = ReplicaManager(broker)
    rt.call(manager.start)
    try:
        rt.wait(lambda: part.is_leader and part.isr == (1, 2))
        rt.call(leader.co.alter_isr, "fenced", 0, state, (1,))
        rt.wait(lambda: part.isr == (1,))
        follower.stop()
        rt.wait(lambda: [b[0] for b in leader.co.brokers()] == [1])

        # A late fetch of the stopped follower, caught up: not added back.
        rt.call(part.update_follower, 2, 0, broker.now_ms())
        assert not rt.call(lambda: part.isr_change_pending)
        rt.call(leader.co.io.submit, lambda: None)  # its ZooKeeper queue is empty
        assert leader.state("fenced", 0).isr == (1,)

        cluster(2)  # registered again
        rt.wait(lambda: [b[0] for b in leader.co.brokers()] == [1, 2])
        rt.call(part.update_follower, 2, 0, broker.now_ms())
        rt.wait(lambda: part.isr == (1, 2))
        assert leader.state("fenced", 0).isr == (1, 2)
    finally:
        rt.call(lambda: defer.succeed(manager.stop()))
