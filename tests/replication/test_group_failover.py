"""A consumer group keeps consuming across a group-coordinator failover and back.

Three broker processes coordinated by a real ZooKeeper (tests/cluster.py), a
topic with replication factor 3 and min.insync.replicas=2 written
continuously by an acks=all producer, and one group with a confluent-kafka
member and a kafka-python member. The broker leading the group's
``__consumer_offsets`` partition (the coordinator) is SIGKILLed: the
partition's new leader loads the group and the members carry on. When the
killed broker returns and is elected back as the partition's preferred
leader, the group moves back to it and the interim coordinator lets go.

Members note every record before committing it (at-least-once), so "no record
skipped" is: every acknowledged record was consumed. "Committed offsets
intact" is: what the old coordinator acknowledged before it died is what the
new one serves, and no member went back below it.
"""

import contextlib
import io
import threading
import time

import confluent_kafka
import kafka
from kafka.coordinator.assignors.range import RangePartitionAssignor

from pluglog import errors
from pluglog import protocol as codec
from pluglog.cli.main import main as cli_main
from pluglog.client.blocking import BlockingClient
from tests import kafka_python_group
from tests.chaos import ProducerThread, create_topic

TOPIC = "gf"
PARTITIONS = 3
GROUP = "failover-group"
SESSION_MS = 6000


class Member(threading.Thread):
    """One group member; ``seen`` lists ``(time, partition, offset, value)``."""

    def __init__(self, bootstrap):
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.seen = []
        self.commit_failures = 0
        self.assigned = set()
        self.stopping = threading.Event()
        self.failure = None

    def run(self):
        try:
            self.consume()
        except Exception as exc:  # reported by the test, not lost in a thread
            self.failure = exc

    def note(self, partition, offset, value):
        self.seen.append((time.monotonic(), partition, offset, value))


class ConfluentMember(Member):
    def consume(self):
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": GROUP,
                "client.id": "confluent-member",
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": 500,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "range",
                "topic.metadata.refresh.interval.ms": 1000,
                "reconnect.backoff.max.ms": 500,
            }
        )
        consumer.subscribe([TOPIC])
        try:
            while not self.stopping.is_set():
                msgs = [m for m in consumer.consume(200, 0.2) if not m.error()]
                self.assigned = {tp.partition for tp in consumer.assignment()}
                if not msgs:
                    continue
                for m in msgs:
                    self.note(m.partition(), m.offset(), m.value())
                try:
                    consumer.commit(asynchronous=False)
                except confluent_kafka.KafkaException:
                    self.commit_failures += 1
        finally:
            consumer.close()


class KafkaPythonMember(Member):
    def consume(self):
        # kafka_python_group: kafka-python 3.0.12 can leave a finished join unapplied.
        consumer = kafka_python_group.group_consumer(
            TOPIC,
            bootstrap_servers=self.bootstrap,
            group_id=GROUP,
            client_id="kafka-python-member",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=500,
            metadata_max_age_ms=1000,
            partition_assignment_strategy=[RangePartitionAssignor],
        )
        try:
            while not self.stopping.is_set():
                polled = kafka_python_group.poll(consumer, 200)
                self.assigned = {tp.partition for tp in consumer.assignment()}
                msgs = [m for batch in polled.values() for m in batch]
                if not msgs:
                    continue
                for m in msgs:
                    self.note(m.partition, m.offset, m.value)
                try:
                    consumer.commit()
                except kafka.errors.KafkaError:
                    self.commit_failures += 1
        finally:
            consumer.close()


def find_coordinator(cluster):
    """The node id the live brokers name as the group's coordinator, or None."""
    for node in cluster.live():
        try:
            with BlockingClient("127.0.0.1", cluster.brokers[node].port, timeout=5) as client:
                found = client.request(codec.FIND_COORDINATOR, 2, {"key": GROUP, "key_type": 0})
        except OSError:
            continue
        if found["error_code"] == errors.NONE and found["node_id"] in cluster.live():
            return found["node_id"]
    return None


def committed(cluster, node):
    """``{partition: offset}`` the coordinator ``node`` serves, or None."""
    body = {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0, 1, 2]}]}
    try:
        with BlockingClient("127.0.0.1", cluster.brokers[node].port, timeout=5) as client:
            out = client.request(codec.OFFSET_FETCH, 5, body)
    except OSError:
        return None
    if out["error_code"] != errors.NONE:
        return None
    return {p["partition_index"]: p["committed_offset"] for p in out["topics"][0]["partitions"]}


def describe(cluster, node):
    with BlockingClient("127.0.0.1", cluster.brokers[node].port, timeout=5) as client:
        out = client.request(codec.DESCRIBE_GROUPS, 3, {"groups": [GROUP]})
    return out["groups"][0]


def cli(cluster, node, *argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(["--bootstrap-server", cluster.brokers[node].bootstrap, *argv])
    assert code == 0, out.getvalue()
    return out.getvalue()


def keeps_consuming(cluster, members, when):
    counts = [len(m.seen) for m in members]
    cluster.wait_for(
        lambda: all(len(m.seen) > c + 100 for m, c in zip(members, counts)),
        timeout=90,
        what=f"both members consuming {when}",
    )


def test_group_keeps_consuming_across_a_coordinator_failover(cluster):
    cluster = cluster(3)
    producer = None
    members = []
    try:
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS)
        cluster.wait_for_isr(TOPIC, PARTITIONS, 3)
        producer = ProducerThread(cluster.bootstrap, TOPIC, PARTITIONS, rate=300)
        producer.start()
        members = [ConfluentMember(cluster.bootstrap), KafkaPythonMember(cluster.bootstrap)]
        for member in members:
            member.start()

        def both_consuming():
            return all(m.assigned for m in members) and all(len(m.seen) > 50 for m in members)

        cluster.wait_for(both_consuming, timeout=90, what="both members consuming")
        old = cluster.wait_for(lambda: find_coordinator(cluster), what="the coordinator")
        # The offsets topic got replication factor 3, so the group survives its leader.
        assert len(cluster.partition("__consumer_offsets", 0)["replicas"]) == 3
        before = cluster.wait_for(lambda: committed(cluster, old), what="committed offsets")
        assert all(before[p] > 0 for p in range(PARTITIONS)), before

        killed = time.monotonic()
        cluster.kill(old)
        new = cluster.wait_for(
            lambda: (lambda n: n if n not in (None, old) else None)(find_coordinator(cluster)),
            timeout=60,
            what="a new coordinator",
        )
        after = cluster.wait_for(lambda: committed(cluster, new), timeout=60, what="offsets")
        failover_s = time.monotonic() - killed
        # What the dead coordinator acknowledged, the new one serves.
        assert all(after[p] >= before[p] for p in range(PARTITIONS)), (before, after)
        # Failover within 2 x the ZooKeeper session timeout (4 s) plus loading.
        assert failover_s < 2 * 4.0 + 5.0, failover_s

        keeps_consuming(cluster, members, "after the failover")

        # The old coordinator returns, catches up and is elected back as the
        # preferred leader: the group moves back, the interim one unloads it.
        moved_back = (time.monotonic(), committed(cluster, new))
        assert moved_back[1] is not None
        cluster.restart(old)
        cluster.wait_for(lambda: find_coordinator(cluster) == old, timeout=90, what="move back")
        back = cluster.wait_for(lambda: committed(cluster, old), timeout=30, what="offsets")
        assert all(back[p] >= moved_back[1][p] for p in range(PARTITIONS)), (moved_back, back)
        with BlockingClient("127.0.0.1", cluster.brokers[new].port, timeout=5) as client:
            out = client.request(
                codec.HEARTBEAT,
                3,
                {
                    "group_id": GROUP,
                    "generation_id": 1,
                    "member_id": "x",
                    "group_instance_id": None,
                },
            )
        assert out["error_code"] == errors.NOT_COORDINATOR
        keeps_consuming(cluster, members, "after the move back")
        producer.stop()
        acked = dict(producer.acked)
        ends = {p: 0 for p in range(PARTITIONS)}
        for p, o in acked.values():
            ends[p] = max(ends[p], o + 1)

        def all_committed():
            now = committed(cluster, find_coordinator(cluster) or new)
            return now is not None and all(now[p] >= ends[p] for p in range(PARTITIONS))

        cluster.wait_for(all_committed, timeout=90, what="commits reaching the log ends")
        group = describe(cluster, find_coordinator(cluster))
        assert group["group_state"] == "Stable"
        assert sorted(m["client_id"] for m in group["members"]) == [
            "confluent-member",
            "kafka-python-member",
        ]
        # The CLI finds the coordinator (and each partition's leader) itself.
        elsewhere = next(n for n in cluster.live() if n != find_coordinator(cluster))
        out = cli(cluster, elsewhere, "groups", "describe", GROUP)
        assert "State: Stable" in out and "Members: 2" in out
        rows = [line.split("\t") for line in out.splitlines() if line.startswith(TOPIC + "\t")]
        assert sorted(int(r[1]) for r in rows) == [0, 1, 2]
        assert [r[4] for r in rows] == ["0", "0", "0"]  # no lag: all committed
        assert f"{GROUP}\tconsumer" in cli(cluster, elsewhere, "groups", "list")
    finally:
        for member in members:
            member.stopping.set()
        for member in members:
            member.join(30)
        if producer is not None and producer.is_alive():
            producer.stop()

    assert [m.failure for m in members] == [None, None]
    seen = [entry for m in members for entry in m.seen]
    consumed = {value for _t, _p, _o, value in seen}
    skipped = [v for v in acked if v not in consumed]
    assert not skipped, f"{len(skipped)} acknowledged records never consumed, e.g. {skipped[:3]}"
    # No member went back below what the old coordinator had acknowledged.
    reread = [(p, o) for t, p, o, _v in seen if t > killed and o < before[p]]
    reread += [(p, o) for t, p, o, _v in seen if t > moved_back[0] and o < moved_back[1][p]]
    assert not reread, f"{len(reread)} records below the committed offsets read again"
