"""Chaos rounds against a local cluster (tests.cluster.Cluster): the pieces
bench/chaos.py and tests/cluster/ share.

A confluent-kafka producer (acks=all) writes unique values continuously to a
topic with replication factor 3 and min.insync.replicas=2 while, each round,
a seeded random victim (a partition leader, a follower, or the controller)
is SIGKILLed, the cluster fails over, and the victim comes back and catches
up. Afterwards every acknowledged record must be readable at the offset it
was acknowledged with, and the replicas' logs identical batch for batch.
Duplicates (retries of writes whose acknowledgement died with a leader) are
counted: Kafka allows them without idempotence.
"""

import random
import threading
import time
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from pluglog.storage.records import scan_batches


class ProducerThread(threading.Thread):
    """Produces ``seq`` values round robin over partitions at about ``rate``/s."""

    def __init__(self, bootstrap, topic, partitions, rate=2000, idempotent=False):
        super().__init__(daemon=True)
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.acked = {}
        self.errors = {}
        self.sent = 0
        #: acknowledgements per partition, and the longest time (s) a partition
        #: went without one while writes to it were pending
        self.acked_per_partition = [0] * partitions
        self.longest_gap = [0.0] * partitions
        self._last_ack = [None] * partitions
        self.stopping = threading.Event()
        self.producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": idempotent,
                "linger.ms": 2,
                "message.timeout.ms": 60000,
                "request.timeout.ms": 15000,
                "retry.backoff.ms": 100,
                "reconnect.backoff.max.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

    def _report(self, err, msg):
        if err is None:
            p = msg.partition()
            self.acked[msg.value()] = (p, msg.offset())
            self.acked_per_partition[p] += 1
            now = time.monotonic()
            if self._last_ack[p] is not None:
                self.longest_gap[p] = max(self.longest_gap[p], now - self._last_ack[p])
            self._last_ack[p] = now
        else:
            name = err.name()
            self.errors[name] = self.errors.get(name, 0) + 1

    def run(self):
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self.stopping.is_set():
            now = time.monotonic()
            if now < next_at:
                self.producer.poll(min(next_at - now, 0.05))
                continue
            value = b"%010d" % self.sent
            try:
                self.producer.produce(
                    self.topic,
                    value=value,
                    partition=self.sent % self.partitions,
                    on_delivery=self._report,
                )
                self.sent += 1
                next_at += interval
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0)
        self.producer.flush(90)

    def stop(self):
        self.stopping.set()
        self.join(120)


def create_topic(bootstrap, topic, partitions, rf=3, min_isr=2, config=None):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=partitions,
                replication_factor=rf,
                config={"min.insync.replicas": str(min_isr), **(config or {})},
            )
        ]
    )
    futures[topic].result(30)


def read_all(bootstrap, topic, partitions, ends, timeout=120):
    """``{(partition, offset): value}`` of everything below ``ends[p]``."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "chaos-check", "enable.auto.commit": False}
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(partitions)
        ]
    )
    stored = {}
    done = {p for p in range(partitions) if ends[p] == 0}
    deadline = time.monotonic() + timeout
    while len(done) < partitions and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is not None:
                continue
            stored[(msg.partition(), msg.offset())] = msg.value()
            if msg.offset() >= ends[msg.partition()] - 1:
                done.add(msg.partition())
    consumer.close()
    return stored


def log_batches(data_dir, topic, partition):
    """Every batch stored in one partition's segment files, as bytes."""
    directory = Path(data_dir) / f"{topic}-{partition}"
    out = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        entries, _stop = scan_batches(data)
        out.extend(bytes(data[pos : pos + header.size]) for pos, header in entries)
    return out


def pick_victim(rng, cluster, topic):
    kind = rng.choice(["leader", "follower", "controller"])
    info = cluster.partition(topic, 0)
    if kind == "leader":
        node = info["leader"]
    elif kind == "controller":
        node = cluster.controller()
    else:
        followers = [r for r in info["isr"] if r != info["leader"]] or [
            r for r in info["replicas"] if r != info["leader"]
        ]
        node = rng.choice(followers)
    return kind, node


def run_chaos(cluster, topic, rounds, seed, partitions=2, rate=1000, settle_s=2.0, out=print):
    """Run the rounds against a started ``tests.cluster.Cluster``; return the figures."""
    rng = random.Random(seed)
    create_topic(cluster.bootstrap, topic, partitions)
    cluster.wait_for_isr(topic, partitions, 3)
    producer = ProducerThread(cluster.bootstrap, topic, partitions, rate)
    producer.start()
    failovers = []
    try:
        time.sleep(settle_s)
        for number in range(1, rounds + 1):
            kind, victim = pick_victim(rng, cluster, topic)
            led = [p for p in range(partitions) if cluster.leader(topic, p) == victim]
            killed = time.monotonic()
            cluster.kill(victim)
            for p in led:
                cluster.wait_for(
                    lambda p=p, v=victim: cluster.leader(topic, p) not in (v, -1, None),
                    timeout=30,
                    what=f"a new leader of {topic}-{p}",
                )
            failover = time.monotonic() - killed
            if led:
                failovers.append(failover)
            time.sleep(settle_s)
            cluster.restart(victim)
            cluster.wait_for_isr(topic, partitions, 3, timeout=60)
            out(
                f"round {number}: killed {kind} broker {victim} "
                f"(led {len(led)} partition(s), failover {failover:.2f}s), "
                f"acked so far {len(producer.acked)}"
            )
            time.sleep(settle_s)
    finally:
        producer.stop()
    cluster.wait_for_isr(topic, partitions, 3, timeout=60)
    acked = dict(producer.acked)
    ends = {p: 0 for p in range(partitions)}
    for p, o in acked.values():
        ends[p] = max(ends[p], o + 1)
    stored = read_all(cluster.bootstrap, topic, partitions, ends)
    lost = [v for v, where in acked.items() if stored.get(where) != v]
    seen = {}
    for value in stored.values():
        seen[value] = seen.get(value, 0) + 1
    duplicated = sum(1 for v, n in seen.items() if n > 1 and v in acked)
    figures = {
        "rounds": rounds,
        "sent": producer.sent,
        "acked": len(acked),
        "lost": len(lost),
        "duplicated": duplicated,
        "errors": dict(producer.errors),
        "failover_max_s": round(max(failovers), 2) if failovers else None,
        "failover_median_s": round(sorted(failovers)[len(failovers) // 2], 2)
        if failovers
        else None,
        "lost_examples": lost[:5],
    }
    return figures


def compare_replicas(cluster, topic, partitions):
    """Stop the cluster cleanly and compare every replica's log batch by batch."""
    cluster.stop()
    mismatches = []
    for p in range(partitions):
        logs = {n: log_batches(b.data_dir, topic, p) for n, b in cluster.brokers.items()}
        reference = next(iter(logs.values()))
        for node, batches in logs.items():
            if batches != reference:
                mismatches.append((p, node, len(batches), len(reference)))
    return mismatches
