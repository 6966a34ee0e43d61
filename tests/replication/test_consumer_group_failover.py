"""A KIP-848 consumer group survives its coordinator's death.

Three broker processes coordinated by a real ZooKeeper (tests/cluster.py), a
replicated topic written continuously, and two confluent-kafka members with
``group.protocol=consumer``. The broker leading the group's
``__consumer_offsets`` partition is SIGKILLed: the partition's new leader
reloads the group from Kafka's consumer-group records (epochs, target and
current assignments), answers ConsumerGroupDescribe with the same members and
partitions, and the members carry on without rejoining.
"""

import threading
import time

import confluent_kafka

from pluglog import errors
from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from tests.chaos import ProducerThread, create_topic

TOPIC, PARTITIONS, GROUP = "cgf", 4, "cgf-group"
SETTINGS = {
    "group.consumer.session.timeout.ms": "15000",
    "group.consumer.heartbeat.interval.ms": "500",
}


class Member(threading.Thread):
    def __init__(self, bootstrap, name):
        super().__init__(daemon=True)
        self.bootstrap, self.name = bootstrap, name
        self.seen = []
        self.stopping = threading.Event()
        self.failure = None

    def run(self):
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": GROUP,
                "group.protocol": "consumer",
                "client.id": self.name,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 1000,
                "reconnect.backoff.max.ms": 500,
            }
        )
        consumer.subscribe([TOPIC])
        try:
            while not self.stopping.is_set():
                msgs = [m for m in consumer.consume(200, 0.2) if not m.error()]
                self.seen += [(m.partition(), m.offset()) for m in msgs]
                if msgs:
                    try:
                        consumer.commit(asynchronous=False)
                    except confluent_kafka.KafkaException:
                        pass  # re-read by whoever owns the partition next
        except Exception as exc:  # reported by the test, not lost in a thread
            self.failure = exc
        finally:
            consumer.close()


def request(cluster, node, key, version, body):
    try:
        with BlockingClient("127.0.0.1", cluster.brokers[node].port, timeout=5) as client:
            return client.request(key, version, body)
    except OSError:
        return None


def find_coordinator(cluster):
    for node in cluster.live():
        found = request(cluster, node, codec.FIND_COORDINATOR, 2, {"key": GROUP, "key_type": 0})
        if found and found["error_code"] == errors.NONE and found["node_id"] in cluster.live():
            return found["node_id"]
    return None


def described(cluster, node):
    """``(group epoch, {member id: (epoch, {partition})})`` or None."""
    body = {"group_ids": [GROUP], "include_authorized_operations": False}
    out = request(cluster, node, codec.CONSUMER_GROUP_DESCRIBE, 0, body)
    if out is None or out["groups"][0]["error_code"] != errors.NONE:
        return None
    group = out["groups"][0]
    members = {
        m["member_id"]: (
            m["member_epoch"],
            {p for tp in m["assignment"]["topic_partitions"] for p in tp["partitions"]},
        )
        for m in group["members"]
    }
    return group["group_epoch"], group["group_state"], members


def test_consumer_group_survives_a_coordinator_failover(cluster):
    cluster = cluster(3, settings=SETTINGS)
    producer = None
    members = []
    try:
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS)
        cluster.wait_for_isr(TOPIC, PARTITIONS, 3)
        producer = ProducerThread(cluster.bootstrap, TOPIC, PARTITIONS, rate=200)
        producer.start()
        members = [Member(cluster.bootstrap, f"m{i}") for i in range(2)]
        for m in members:
            m.start()
        old = cluster.wait_for(lambda: find_coordinator(cluster), what="the coordinator")

        def stable_split():
            got = described(cluster, old)
            if got is None or got[1] != "Stable" or len(got[2]) != 2:
                return None
            parts = sorted(p for _e, ps in got[2].values() for p in ps)
            return got if parts == list(range(PARTITIONS)) else None

        before = cluster.wait_for(stable_split, timeout=90, what="a stable 2-member split")
        cluster.wait_for(lambda: all(len(m.seen) > 50 for m in members), what="consuming")
        cluster.kill(old)
        killed = time.monotonic()
        new = cluster.wait_for(
            lambda: (lambda n: n if n not in (None, old) else None)(find_coordinator(cluster)),
            timeout=60,
            what="a new coordinator",
        )
        after = cluster.wait_for(lambda: described(cluster, new), timeout=60, what="the group")
        # The reloaded group is the one the dead coordinator stored.
        assert after[0] == before[0] and after[2] == before[2], (before, after)
        counts = [len(m.seen) for m in members]
        cluster.wait_for(
            lambda: all(len(m.seen) > c + 100 for m, c in zip(members, counts)),
            timeout=90,
            what="both members consuming after the failover",
        )
        # Nobody had to rejoin: same members, same epochs, a few seconds on.
        later = described(cluster, new)
        assert set(later[2]) == set(before[2]), (before, later)
        assert later[0] == before[0], (before, later)
        assert time.monotonic() - killed < 90
        assert not [m.failure for m in members if m.failure]
    finally:
        if producer is not None:
            producer.stop()
        for m in members:
            m.stopping.set()
        for m in members:
            m.join(30)
