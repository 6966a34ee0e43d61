"""A leader's ISR writes against a real ZooKeeper (in-process coordinators).

* An ISR write that loses to the controller brings the winning state with it:
  the leader follows the new epoch before the failure fires, not when the
  watch's refresh gets its turn on a ZooKeeper worker busy with other writes.
* Many ISR writes at once go to ZooKeeper pipelined, each still conditional
  on its own partition's version: all land but the one that lost, which
  fails alone; a partition's writes land in the order they were made; and
  writes cut off by a ZooKeeper restart land once it is back.
* A broker whose registration is gone is not added to an ISR (KIP-841: fenced
  replicas are not eligible), and is once it registers again.
* A broker in controlled shutdown fetches a partition only while it is in its
  ISR: fetching in the epoch of the shrink would have its leader add it back.
* A new ``num.replica.fetchers`` (a dynamic config) moves each followed
  partition to the fetcher Kafka's fetcher id gives it, and a fetcher left
  with none goes away.
"""

import threading
import types

from twisted.internet import defer
from twisted.python.failure import Failure

from pluglog.broker.partition import Partition
from pluglog.config import TopicConfig
from pluglog.coordination import zkdata as z
from pluglog.coordination.state import StaleStateError
from pluglog.replication.manager import ReplicaManager, fetcher_id
from pluglog.storage.memory import MemoryLogStorage
from tests.integration.test_zk_coordinator import cluster, rt  # noqa: F401


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


def test_many_isr_writes_at_once_land_each_on_its_own_version(rt, cluster, zk):  # noqa: F811
    leader, follower = cluster(1, 2)
    n, lost, twice = 300, 7, 11
    leader.call("create_topic", "many", n, 2, {}, assignments={p: [1, 2] for p in range(n)})
    states = [rt.wait(lambda p=p: leader.co.partition_state("many", p)) for p in range(n)]
    outcomes = {}
    gate = threading.Event()
    try:
        # Hold the leader's ZooKeeper worker: every write below queues, and
        # they go out together once it is released.
        rt.call(leader.co.io.post, gate.wait, 20)

        def write(p, isr, name):
            def record(result):
                # What the leader knows when its callback runs.
                outcomes[(p, name)] = (result, leader.co.partition_state("many", p))

            leader.co.alter_isr("many", p, states[p], isr).addBoth(record)

        def write_all():
            for p in range(n):
                write(p, (1,), "first")
            # Made after the first, on the same version: it must lose, and
            # would win were it sent first.
            write(twice, (2, 1), "second")

        rt.call(write_all)
        # The controller gets to one partition first (a new leader epoch).
        moved = type(states[lost])(1, states[lost].leader_epoch + 1, (1, 2), 1)
        zk.set(z.state_path("many", lost), z.state_bytes(moved), version=states[lost].version)
    finally:
        gate.set()
    rt.wait(lambda: len(outcomes) == n + 1)

    for p in range(n):
        result, _ = outcomes[(p, "first")]
        if p == lost:
            continue
        assert not isinstance(result, Failure), (p, result)
        assert (result.isr, result.version) == ((1,), states[p].version + 1)
        state = z.state_from_znode(*zk.get(z.state_path("many", p)))
        assert (state.isr, state.version, state.leader_epoch) == (
            (1,),
            states[p].version + 1,
            states[p].leader_epoch,
        )
    # The lost one failed alone, the winner already known when it did.
    result, known = outcomes[(lost, "first")]
    assert isinstance(result, Failure) and result.check(StaleStateError)
    assert (known.leader_epoch, known.isr) == (moved.leader_epoch, (1, 2))
    # The second write of a partition lost to its first.
    result, known = outcomes[(twice, "second")]
    assert isinstance(result, Failure) and result.check(StaleStateError)
    assert (known.isr, known.version) == ((1,), states[twice].version + 1)
    # The follower's watches saw every write (their reads are pipelined too).
    rt.wait(
        lambda: all(
            follower.co.partition_state("many", p).isr == ((1, 2) if p == lost else (1,))
            for p in range(n)
        )
    )


def test_isr_writes_cut_off_by_a_zookeeper_restart_land_once_it_is_back(
    rt,  # noqa: F811
    cluster,  # noqa: F811
    zk,  # noqa: F811
    zookeeper,
):
    # Sessions that outlive the restart, as in test_zk_coordinator's
    # test_watches_follow_changes_after_a_zookeeper_restart.
    leader, _ = cluster(1, 2, zookeeper_session_timeout_ms=45000)
    n = 50
    leader.call("create_topic", "cut", n, 2, {}, assignments={p: [1, 2] for p in range(n)})
    states = [rt.wait(lambda p=p: leader.co.partition_state("cut", p)) for p in range(n)]
    results = []
    gate = threading.Event()
    try:
        rt.call(leader.co.io.post, gate.wait, 30)

        def write_all():
            for p in range(n):
                leader.co.alter_isr("cut", p, states[p], (1,)).addBoth(results.append)

        rt.call(write_all)
        zookeeper.stop()
    finally:
        gate.set()  # the writes go out while ZooKeeper is down
    zookeeper.start()
    # Up to the session timeout, as in test_zk_coordinator's restart test: a
    # client whose connection the restarting server accepted before it
    # served waits kazoo's read timeout (2/3 of the session, 30 s here) for
    # the handshake's answer before it tries again (CI under load: 40 s was
    # not enough once).
    rt.wait(lambda: len(results) == n, timeout=60)
    assert not [r for r in results if isinstance(r, Failure)]
    for p in range(n):
        state = z.state_from_znode(*zk.retry(zk.get, z.state_path("cut", p)))
        assert (state.isr, state.version) == ((1,), states[p].version + 1)


def replica_manager(rt, node, topic, partitions):  # noqa: F811
    """A ReplicaManager of ``node``'s broker hosting ``partitions`` of ``topic``
    (in-memory logs), started on the test reactor; ``(manager, parts)``."""
    config = TopicConfig()
    storage = MemoryLogStorage()
    parts = {
        (topic, p): Partition(
            topic, p, storage.open_log(topic, p, config), config, node_id=node.broker_id
        )
        for p in partitions
    }
    broker = types.SimpleNamespace(
        coordinator=node.co,
        reactor=rt.reactor,
        config=node.config,
        node_id=node.broker_id,
        partitions=parts,
        now_ms=lambda: int(rt.reactor.seconds() * 1000),
        leadership_changed=lambda part: None,
    )
    manager = ReplicaManager(broker)
    rt.call(manager.start)
    return manager, [parts[(topic, p)] for p in partitions]


def test_only_a_registered_broker_joins_the_isr(rt, cluster):  # noqa: F811
    leader, follower = cluster(1, 2)
    leader.call("create_topic", "fenced", 1, 2, {}, assignments={0: [1, 2]})
    state = rt.wait(lambda: leader.co.partition_state("fenced", 0))
    manager, (part,) = replica_manager(rt, leader, "fenced", [0])
    broker = manager.broker
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


def test_in_controlled_shutdown_a_follower_fetches_only_in_sync_partitions(rt, cluster, zk):  # noqa: F811
    leader, follower = cluster(1, 2)
    leader.call("create_topic", "cs", 3, 2, {}, assignments={p: [1, 2] for p in range(3)})
    states = [rt.wait(lambda p=p: follower.co.partition_state("cs", p)) for p in range(3)]
    # Partition 2: the follower is out of sync (the leader shrank it out).
    rt.call(leader.co.alter_isr, "cs", 2, states[2], (1,))
    rt.wait(lambda: follower.co.partition_state("cs", 2).isr == (1,))
    manager, parts = replica_manager(rt, follower, "cs", [0, 1, 2])

    def followed():
        fetcher = manager.fetchers.get((1, 0))
        return set() if fetcher is None else {key[1] for key in fetcher.partitions}

    try:
        rt.wait(lambda: followed() == {0, 1, 2})  # out of sync, it still catches up
        rt.call(manager.shutting_down)
        assert rt.call(followed) == {0, 1}
        # The controller's shrink of partition 1 (leader epoch + 1): it is not
        # fetched in the new epoch (its leader would add it back); partition
        # 0, still in sync, replicates until its own shrink.
        state = states[1]
        bumped = type(state)(1, state.leader_epoch + 1, (1,), state.controller_epoch)
        zk.set(z.state_path("cs", 1), z.state_bytes(bumped), version=state.version)
        rt.wait(lambda: parts[1].leader_epoch == bumped.leader_epoch)
        assert rt.call(followed) == {0}
    finally:
        rt.call(lambda: defer.succeed(manager.stop()))


def test_a_new_fetcher_count_moves_partitions_to_their_fetchers(rt, cluster):  # noqa: F811
    leader, follower = cluster(1, 2)
    leader.call("create_topic", "fx", 6, 2, {}, assignments={p: [1, 2] for p in range(6)})
    for p in range(6):
        rt.wait(lambda p=p: follower.co.partition_state("fx", p))
    manager, _parts = replica_manager(rt, follower, "fx", list(range(6)))

    def layout():
        return {
            slot: sorted(key[1] for key in fetcher.partitions)
            for slot, fetcher in manager.fetchers.items()
            if fetcher.partitions
        }

    try:
        rt.wait(lambda: layout() == {(1, 0): [0, 1, 2, 3, 4, 5]})
        rt.call(manager.reconfigure, manager.config.replace(num_replica_fetchers=2))
        expected = {}
        for p in range(6):
            expected.setdefault((1, fetcher_id("fx", p, 2)), []).append(p)
        assert len(expected) == 2  # the topic's partitions use both fetchers
        assert rt.call(layout) == expected
        assert all(
            manager.fetchers[slot].key == slot and manager.fetchers[slot].running
            for slot in expected
        )
        rt.call(manager.reconfigure, manager.config.replace(num_replica_fetchers=1))
        assert rt.call(layout) == {(1, 0): [0, 1, 2, 3, 4, 5]}
        # The emptied fetcher leaves once its loop comes round.
        rt.wait(lambda: list(manager.fetchers) == [(1, 0)], timeout=30)
    finally:
        rt.call(lambda: defer.succeed(manager.stop()))
