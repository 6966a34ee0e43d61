"""Chaos rounds against a local cluster (tests.cluster.Cluster): the pieces
bench/chaos.py and tests/replication/ share.

A confluent-kafka producer (acks=all) writes unique values continuously to a
topic with replication factor 3 and min.insync.replicas=2 while, each round,
a seeded random victim (a partition leader, a follower, or the controller)
is SIGKILLed, the cluster fails over, and the victim comes back and catches
up. Afterwards every acknowledged record must be readable at the offset it
was acknowledged with, and the replicas' logs identical batch for batch.
Duplicates (retries of writes whose acknowledgement died with a leader) are
counted: Kafka allows them without idempotence.

Given the cluster's ZooKeeper, every third round begins with a ZooKeeper fault: the
standalone server SIGKILLed or SIGTERMed and started again, or one node of
an ensemble SIGKILLed (restarted after the broker failover). A killed broker
is started again at once, and a start that fails is counted. A monitor
thread records the longest time any partition had no live leader in some
live broker's Metadata.
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


class LeaderMonitor(threading.Thread):
    """Polls every live broker's Metadata; a partition is without a leader
    while some live broker names a leader that is not a live broker process
    (dead, or -1). Keeps the longest such stretch per partition."""

    def __init__(self, cluster, topic, partitions, interval=0.2):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.topic = topic
        self.partitions = partitions
        self.interval = interval
        self.longest = [0.0] * partitions
        self._since = [None] * partitions
        self.stopping = threading.Event()

    def _leaderless(self):
        live = set(self.cluster.live())
        missing = set()
        for node in sorted(live):
            try:
                meta = self.cluster.metadata([self.topic], node)
            except (OSError, RuntimeError):
                continue  # being killed or still starting
            for entry in meta["topics"]:
                for part in entry["partitions"]:
                    if part["leader_id"] not in live:
                        missing.add(part["partition_index"])
        return missing

    def run(self):
        while not self.stopping.wait(self.interval):
            missing = self._leaderless()
            now = time.monotonic()
            for p in range(self.partitions):
                if p in missing and self._since[p] is None:
                    self._since[p] = now
                elif p not in missing and self._since[p] is not None:
                    self.longest[p] = max(self.longest[p], now - self._since[p])
                    self._since[p] = None

    def stop(self):
        self.stopping.set()
        self.join(30)
        now = time.monotonic()
        for p, since in enumerate(self._since):
            if since is not None:
                self.longest[p] = max(self.longest[p], now - since)
        return max(self.longest)


def zookeeper_fault(number, rng, zk):
    """The ``number``-th ZooKeeper fault; returns a function that ends it
    (restarts what was stopped) and its description. ``zk`` is a standalone
    ``ZooKeeperServer`` (SIGKILL and SIGTERM in turn; the returned function
    restarts it) or a ``tests.zookeeper.ZooKeeperEnsemble`` (one node SIGKILLed:
    the leader every other time, else a random node; the function restarts it)."""
    if hasattr(zk, "nodes"):
        leader = zk.leader()
        node = leader if number % 2 else rng.choice(sorted(zk.nodes))
        role = "leader" if node == leader else "follower"
        zk.kill(node)
        return (lambda: zk.start_node(node)), f"ZooKeeper node {node} ({role}) SIGKILLed"
    how = "SIGKILL" if number % 2 else "SIGTERM"
    zk.kill() if how == "SIGKILL" else zk.stop()
    return zk.start, f"ZooKeeper {how}"


def restart_broker(cluster, node, attempts=5, out=print):
    """Start a killed broker again at once (not waiting for its old session
    to expire: the broker waits itself); the number of failed starts."""
    failed = 0
    while True:
        try:
            cluster.restart(node, wait_expiry=False)
            return failed
        except RuntimeError as exc:
            failed += 1
            out(f"broker {node} failed to start: {str(exc).splitlines()[0]}")
            if failed >= attempts:
                raise
            time.sleep(2)


def run_chaos(
    cluster,
    topic,
    rounds,
    seed,
    partitions=2,
    rate=1000,
    settle_s=2.0,
    out=print,
    zk=None,
    idempotent=False,
):
    """Run the rounds against a started ``tests.cluster.Cluster``; return the figures.

    With ``zk`` (the cluster's ZooKeeper) every third round starts with a
    ZooKeeper fault (:func:`zookeeper_fault`); a standalone ZooKeeper is
    started again after 0.5-2 s and the broker kill follows at once, while
    the brokers are reconnecting; an ensemble node stays down until the
    broker has failed over."""
    rng = random.Random(seed)
    create_topic(cluster.bootstrap, topic, partitions)
    cluster.wait_for_isr(topic, partitions, 3)
    producer = ProducerThread(cluster.bootstrap, topic, partitions, rate, idempotent)
    producer.start()
    monitor = LeaderMonitor(cluster, topic, partitions)
    monitor.start()
    failovers = []
    restart_failures = 0
    zk_faults = 0
    try:
        time.sleep(settle_s)
        for number in range(1, rounds + 1):
            kind, victim = pick_victim(rng, cluster, topic)
            led = [p for p in range(partitions) if cluster.leader(topic, p) == victim]
            end_fault, fault = None, ""
            if zk is not None and number % 3 == 0:
                zk_faults += 1
                end_fault, fault = zookeeper_fault(zk_faults, rng, zk)
                if not hasattr(zk, "nodes"):
                    time.sleep(rng.uniform(0.5, 2.0))
                    end_fault()  # a standalone ZooKeeper: back before the kill
                    end_fault = None
                fault += ", then "
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
            if end_fault is not None:
                end_fault()
            restart_failures += restart_broker(cluster, victim, out=out)
            cluster.wait_for_isr(topic, partitions, 3, timeout=60)
            out(
                f"round {number}: {fault}killed {kind} broker {victim} "
                f"(led {len(led)} partition(s), failover {failover:.2f}s), "
                f"acked so far {len(producer.acked)}"
            )
            time.sleep(settle_s)
    finally:
        producer.stop()
        leaderless = monitor.stop()
    cluster.wait_for_isr(topic, partitions, 3, timeout=60)
    acked = dict(producer.acked)
    lost, duplicated = check_read_back(cluster.bootstrap, topic, partitions, acked)
    figures = {
        "rounds": rounds,
        "zookeeper_faults": zk_faults,
        "sent": producer.sent,
        "acked": len(acked),
        "lost": len(lost),
        "duplicated": len(duplicated),
        "errors": dict(producer.errors),
        "failover_max_s": round(max(failovers), 2) if failovers else None,
        "failover_median_s": round(sorted(failovers)[len(failovers) // 2], 2)
        if failovers
        else None,
        "longest_without_leader_s": round(leaderless, 2),
        "restart_failures": restart_failures,
        "lost_examples": lost[:5],
    }
    return figures


def check_read_back(bootstrap, topic, partitions, acked):
    """``(lost, duplicated)``: acknowledged values not read back at the offset
    they were acknowledged with, and acknowledged values stored more than once."""
    lost, duplicated, _stored = read_back(bootstrap, topic, partitions, acked)
    return lost, duplicated


def read_back(bootstrap, topic, partitions, acked):
    """:func:`check_read_back` plus what was read: ``(lost, duplicated,
    stored)``, ``stored`` as :func:`read_all` returns it."""
    ends = {p: 0 for p in range(partitions)}
    for p, offset in acked.values():
        ends[p] = max(ends[p], offset + 1)
    stored = read_all(bootstrap, topic, partitions, ends)
    lost = [v for v, where in acked.items() if stored.get(where) != v]
    seen = {}
    for value in stored.values():
        seen[value] = seen.get(value, 0) + 1
    duplicated = [v for v, n in seen.items() if n > 1 and v in acked]
    return lost, duplicated, stored


def describe_duplicates(duplicated, stored, acked, log_dirs, topic, limit=5):
    """Lines saying where each of the first ``limit`` duplicated values is
    stored and which batches hold it in each replica's log (``log_dirs``:
    ``{name: directory holding topic-partition dirs}``): the producer id,
    epoch and sequence range tell a retried idempotent batch appended twice
    (same producer, epoch and sequences) from a producer that re-sent it as
    new (an epoch bump, new sequences)."""
    where = {}
    for (p, offset), value in stored.items():
        where.setdefault(value, []).append((p, offset))
    lines = []
    for value in duplicated[:limit]:
        places = sorted(where.get(value, []))
        lines.append(f"{value!r}: acked at {acked.get(value)}, stored at {places}")
        for p, offset in places:
            for name, directory in sorted(log_dirs.items()):
                for header in _batches_holding(directory, topic, p, offset):
                    lines.append(
                        f"  {name} {topic}-{p}@{offset}: batch {header.base_offset}-"
                        f"{header.last_offset} leader epoch {header.partition_leader_epoch} "
                        f"producer {header.producer_id} epoch {header.producer_epoch} "
                        f"sequences {header.base_sequence}-"
                        f"{header.base_sequence + header.last_offset_delta}"
                    )
    return lines


def _batches_holding(directory, topic, partition, offset):
    path = Path(directory) / f"{topic}-{partition}"
    if not path.is_dir():
        return []
    out = []
    for segment in sorted(path.glob("*.log")):
        entries, _stop = scan_batches(segment.read_bytes())
        out += [h for _pos, h in entries if h.base_offset <= offset <= h.last_offset]
    return out


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
