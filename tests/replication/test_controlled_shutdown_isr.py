"""A follower's controlled shutdown and restart against a real ZooKeeper and two
broker processes: ZooKeeper's partition states and the leader's view agree.

Found at 10,000 partitions: the stopping follower kept fetching while the
controller took it out of each ISR, so the leader added it straight back
(a second ZooKeeper write per partition), and once the broker was gone the
controller shrank those ISRs again with one more leader epoch. The leader,
its ZooKeeper work queued behind thousands of its own ISR writes, kept the
old epoch long after the restarted follower had the new one, which it
answered with UNKNOWN_LEADER_EPOCH. Kafka's controller stops the follower's
fetch of each partition (StopReplica) with its shrink, so each partition
sees one write; after the restart ZooKeeper and the leader's Metadata agree.
"""

import json

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.cluster

TOPIC = "cs"
PARTITIONS = 200


def zk_states(zk):
    """``{partition: (leader_epoch, isr, znode version)}`` as ZooKeeper has them."""
    base = f"/brokers/topics/{TOPIC}/partitions"
    pending = {p: zk.get_async(f"{base}/{p}/state") for p in range(PARTITIONS)}
    out = {}
    for p, result in pending.items():
        raw, stat = result.get(10)
        data = json.loads(raw)
        out[p] = (data["leader_epoch"], tuple(sorted(data["isr"])), stat.version)
    return out


def leader_view(c):
    """``{partition: (leader_epoch, isr)}`` in the leader's (broker 1's) Metadata."""
    parts = c.metadata([TOPIC], node=1)["topics"][0]["partitions"]
    return {
        p["partition_index"]: (p["leader_epoch"], tuple(sorted(p["isr_nodes"]))) for p in parts
    }


def agree(c, zk, isr):
    """Every partition's ISR is ``isr`` in ZooKeeper and the leader shows ZooKeeper's state."""
    stored = zk_states(zk)
    if any(isr_ != isr for _, isr_, _ in stored.values()):
        return False
    return leader_view(c) == {p: (epoch, isr_) for p, (epoch, isr_, _) in stored.items()}


def test_a_stopping_follower_is_not_added_back_and_rejoins_after_restart(cluster, zk):
    # No lag shrinks: every ISR change here is the shutdown's or the restart's.
    c = cluster(2, settings={"replica.lag.time.max.ms": "120000"})
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    topic = NewTopic(TOPIC, num_partitions=PARTITIONS, replica_assignment=[[1, 2]] * PARTITIONS)
    admin.create_topics([topic], request_timeout=60)[TOPIC].result(60)
    c.wait_for(lambda: agree(c, zk, (1, 2)), timeout=60, what="ISR [1, 2] everywhere")
    before = zk_states(zk)
    mark = len(c.brokers[1].log())

    c.brokers[2].stop()
    c.wait_for(lambda: agree(c, zk, (1,)), timeout=60, what="ISR [1] after the shutdown")
    # One write per partition: the controlled shutdown's shrink (leader
    # epoch + 1). No re-add of the stopping follower, and so no second
    # shrink (another epoch) once it was gone.
    expected = {p: (epoch + 1, (1,), version + 1) for p, (epoch, _, version) in before.items()}
    stored = zk_states(zk)
    assert {p: s for p, s in stored.items() if s != expected[p]} == {}
    assert "ISR [1] -> [1, 2]" not in c.brokers[1].log()[mark:]

    c.brokers[2] = c._process(2, c.brokers[2].port).start()
    c.wait_for(lambda: agree(c, zk, (1, 2)), timeout=60, what="the follower back in every ISR")
