"""Replication against a real ZooKeeper and three broker processes.

The guarantee under test: a record acknowledged with acks=all while at least
min.insync.replicas replicas were in sync survives the loss of a broker, and
the replicas' logs end up identical."""

import json
import subprocess
import time

import confluent_kafka
from kafka import KafkaConsumer, TopicPartition

from tests.chaos import ProducerThread, compare_replicas, create_topic, read_all


def _ends(acked, partitions):
    ends = {p: 0 for p in range(partitions)}
    for p, o in acked.values():
        ends[p] = max(ends[p], o + 1)
    return ends


def test_acks_all_survives_leader_then_follower_loss(cluster):
    c = cluster(3)
    topic = "failover"
    create_topic(c.bootstrap, topic, partitions=1)
    c.wait_for_isr(topic, 1, 3)
    producer = ProducerThread(c.bootstrap, topic, partitions=1, rate=1500)
    producer.start()
    try:
        c.wait_for(lambda: len(producer.acked) > 1000, what="first acks")
        first = c.partition(topic, 0)
        leader = first["leader"]
        killed = time.monotonic()
        c.kill(leader)
        c.wait_for(lambda: c.leader(topic, 0) not in (leader, -1), what="a new leader")
        new = c.partition(topic, 0)
        assert new["leader_epoch"] > first["leader_epoch"]
        acked_then = len(producer.acked)
        c.wait_for(lambda: len(producer.acked) > acked_then + 500, what="acks after failover")
        # Failover (a new leader serving acks=all writes) within 2 x the session timeout.
        assert time.monotonic() - killed < 2 * 4.0 + 2.0
        follower = next(r for r in new["isr"] if r != new["leader"])
        c.kill(follower)
        # min.insync.replicas=2 with one replica left: writes wait (or fail) until
        # the follower returns; both victims come back and catch up.
        time.sleep(1.0)
        c.restart(leader)
        c.restart(follower)
        c.wait_for_isr(topic, 1, 3, timeout=60)
        acked_then = len(producer.acked)
        c.wait_for(lambda: len(producer.acked) > acked_then + 500, what="acks after recovery")
    finally:
        producer.stop()
    c.wait_for_isr(topic, 1, 3, timeout=60)
    acked = dict(producer.acked)
    stored = read_all(c.bootstrap, topic, 1, _ends(acked, 1))
    lost = [v for v, where in acked.items() if stored.get(where) != v]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}"
    offsets = sorted(o for (_p, o) in stored)
    assert offsets == list(range(len(offsets))), "offsets must be dense and read once"
    assert compare_replicas(c, topic, 1) == []


def test_two_brokers_down_refuses_acks_all_and_appends_nothing(cluster):
    c = cluster(3)
    topic = "minisr"
    create_topic(c.bootstrap, topic, partitions=1)
    c.wait_for_isr(topic, 1, 3)
    leader = c.leader(topic, 0)
    others = [n for n in c.brokers if n != leader]
    for node in others:
        c.kill(node)
    # The leader shrinks its ISR to itself after replica.lag.time.max.ms.
    c.wait_for(lambda: c.partition(topic, 0)["isr"] == [leader], timeout=30, what="ISR of 1")
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": c.brokers[leader].bootstrap,
            "acks": "all",
            "message.timeout.ms": 3000,
            "retries": 0,
        }
    )
    errors = []
    producer.produce(topic, b"refused", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
    assert errors[0].code() == confluent_kafka.KafkaError.NOT_ENOUGH_REPLICAS, errors[0]
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": c.brokers[leader].bootstrap, "group.id": "g"}
    )
    low, high = consumer.get_watermark_offsets(
        confluent_kafka.TopicPartition(topic, 0), timeout=10
    )
    consumer.close()
    assert (low, high) == (0, 0)
    # acks=1 is not held to min.insync.replicas (Kafka's rule).
    ones = []
    p1 = confluent_kafka.Producer({"bootstrap.servers": c.brokers[leader].bootstrap, "acks": 1})
    p1.produce(topic, b"accepted", on_delivery=lambda err, msg: ones.append(err))
    p1.flush(10)
    assert ones == [None]


def test_clients_see_every_broker_and_the_leaders(cluster):
    c = cluster(3)
    topic = "spread"
    create_topic(c.bootstrap, topic, partitions=6)
    c.wait_for_isr(topic, 6, 3)
    leaders = {c.leader(topic, p) for p in range(6)}
    assert leaders == {1, 2, 3}, "round-robin assignment spreads preferred leaders"
    md = confluent_kafka.admin.AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(
        timeout=10
    )
    assert sorted(md.brokers) == [1, 2, 3]
    for p, pm in md.topics[topic].partitions.items():
        assert pm.leader == c.leader(topic, p)
        assert sorted(pm.replicas) == [1, 2, 3]
        assert sorted(pm.isrs) == [1, 2, 3]
    consumer = KafkaConsumer(bootstrap_servers=c.bootstrap)
    try:
        assert consumer.partitions_for_topic(topic) == set(range(6))
        cluster_md = consumer._client.cluster
        assert {b.node_id for b in cluster_md.brokers()} == {1, 2, 3}
        for p in range(6):
            assert cluster_md.leader_for_partition(TopicPartition(topic, p)) == c.leader(topic, p)
    finally:
        consumer.close()
    listing = json.loads(
        subprocess.run(
            ["kcat", "-b", c.bootstrap, "-L", "-J", "-t", topic],
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
    )
    assert sorted(b["id"] for b in listing["brokers"]) == [1, 2, 3]
    (entry,) = listing["topics"]
    for part in entry["partitions"]:
        assert part["leader"] == c.leader(topic, part["partition"])
        assert sorted(r["id"] for r in part["replicas"]) == [1, 2, 3]


def test_create_topics_with_an_explicit_replica_assignment(cluster):
    from confluent_kafka.admin import AdminClient, NewTopic

    c = cluster(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    wanted = [[2, 3], [3, 1], [1, 2]]
    admin.create_topics([NewTopic("placed", num_partitions=3, replica_assignment=wanted)])[
        "placed"
    ].result(30)
    c.wait_for_isr("placed", 3, 2)
    for p, replicas in enumerate(wanted):
        info = c.partition("placed", p)
        assert info["replicas"] == replicas
        assert info["leader"] == replicas[0]  # the first replica is the preferred leader
    bad = admin.create_topics(
        [NewTopic("nowhere", num_partitions=1, replica_assignment=[[1, 9]])]
    )["nowhere"]
    try:
        bad.result(30)
    except Exception as exc:
        assert exc.args[0].code() == confluent_kafka.KafkaError.INVALID_REPLICA_ASSIGNMENT
    else:
        raise AssertionError("an assignment naming an unknown broker was accepted")


def test_create_partitions_with_an_explicit_replica_assignment(cluster):
    """CreatePartitions places new partitions where its assignment says, on any
    live broker (it used to refuse every broker but the one asked)."""
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    c = cluster(2)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("grown", num_partitions=1, replica_assignment=[[1, 2]])])[
        "grown"
    ].result(30)
    added = [[2, 1], [1, 2]]
    admin.create_partitions([NewPartitions("grown", 3, replica_assignment=added)])["grown"].result(
        30
    )
    c.wait_for_isr("grown", 3, 2)
    for p, replicas in enumerate(added, start=1):
        info = c.partition("grown", p)
        assert info["replicas"] == replicas
        assert info["leader"] == replicas[0]
    bad = admin.create_partitions([NewPartitions("grown", 4, replica_assignment=[[1, 9]])])
    try:
        bad["grown"].result(30)
    except Exception as exc:
        assert exc.args[0].code() == confluent_kafka.KafkaError.INVALID_REPLICA_ASSIGNMENT
    else:
        raise AssertionError("an assignment naming an unknown broker was accepted")
    assert len(c.metadata(["grown"])["topics"][0]["partitions"]) == 3


def test_sigterm_of_the_last_broker_is_prompt(cluster):
    """With no other replica to take over, controlled shutdown has nothing to
    wait for: the last broker stops at once, not after
    controlled.shutdown.timeout.ms (issue 21, defect 7)."""
    c = cluster(2, settings={"controlled.shutdown.timeout.ms": "30000"})
    create_topic(c.bootstrap, "last", partitions=2, rf=2, min_isr=1)
    c.wait_for_isr("last", 2, 2)
    assert c.brokers[1].stop() in (0, -15)
    started = time.monotonic()
    assert c.brokers[2].stop() in (0, -15)
    assert time.monotonic() - started < 10.0
    assert "2 with no other live in-sync replica" in c.brokers[2].log()
