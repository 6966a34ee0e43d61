"""Consumer groups with real clients against the real broker process.

librdkafka (confluent-kafka and kcat), kafka-python and aiokafka consumers join
groups, split partitions, commit, fail over and come back after broker and
consumer restarts. Every consumer records a record only after the commit
covering it succeeded, so "each (partition, offset) exactly once across the
group, no gaps" is exactly what the coordinator's generation fencing and
offset store promise, SIGKILLed members included.

Run as ``python -m tests.integration.test_groups WORKER-JSON`` this module is
the confluent-kafka consumer process the tests start and kill.
"""

import asyncio
import faulthandler
import json
import os
import signal
import subprocess
import sys
import threading
import time

import confluent_kafka
import kafka
import pytest
from aiokafka import AIOKafkaConsumer
from kafka.coordinator.assignors.range import RangePartitionAssignor

from tests import kafka_python_group
from tests.broker_process import ROOT
from tests.integration.clients import create_topic, produce_confluent

pytestmark = pytest.mark.integration

SESSION_MS = 6000
POLL_STALL_S = 20
FAST_GROUP = {
    "session.timeout.ms": SESSION_MS,
    "heartbeat.interval.ms": 500,
    "max.poll.interval.ms": 30000,
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
}


def produce(bootstrap, topic, count, partitions, start=0):
    produce_confluent(
        bootstrap,
        topic,
        [(i % partitions, None, f"v{start + i}".encode(), []) for i in range(count)],
    )


def confluent_consumer(bootstrap, group, **extra):
    return confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, **FAST_GROUP, **extra}
    )


def commit_confluent(consumer, msgs):
    """Commit past ``msgs``; returns those of the partitions whose commit
    succeeded (processed once). A partition whose commit failed is rewound
    to its first record in ``msgs``, to read it again if it is still ours:
    seeking to every record in turn left each partition at its last one,
    skipping the rest (a CI run lost 99 records of two partitions so)."""
    last, first = {}, {}
    for m in msgs:
        key = (m.topic(), m.partition())
        last[key] = m.offset()
        first.setdefault(key, m.offset())
    tps = [confluent_kafka.TopicPartition(t, p, o + 1) for (t, p), o in last.items()]
    try:
        done = consumer.commit(offsets=tps, asynchronous=False)
    except confluent_kafka.KafkaException:
        done = None  # the request failed: none committed
    if done is None:
        failed = set(first)
    else:
        failed = {(tp.topic, tp.partition) for tp in done if tp.error}
    for t, p in failed:
        try:
            consumer.seek(confluent_kafka.TopicPartition(t, p, first[(t, p)]))
        except confluent_kafka.KafkaException:
            pass  # no longer ours: its new owner starts at the committed offset
    return [m for m in msgs if (m.topic(), m.partition()) not in failed]


def committed(bootstrap, group, topic, partitions):
    consumer = confluent_consumer(bootstrap, group)
    try:
        tps = [confluent_kafka.TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=20)}
    finally:
        consumer.close()


def wait_for(predicate, timeout, what, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def assert_exactly_once(seen, topic_counts):
    """``seen``: list of (partition, offset); ``topic_counts``: {partition: count}."""
    expected = {(p, o) for p, n in topic_counts.items() for o in range(n)}
    dupes = len(seen) - len(set(seen))
    assert dupes == 0, f"{dupes} records consumed more than once"
    missing = expected - set(seen)
    assert not missing, f"{len(missing)} records never consumed, e.g. {sorted(missing)[:5]}"
    assert set(seen) == expected


# ---- consumer worker processes ----------------------------------------------------
# Each consumer runs in its own process: kill -9 must be possible, and two
# kafka-python consumers in one process occasionally stall each other.


def _confluent_loop(spec, stopping, log):
    extra = {"group.instance.id": spec["instance"]} if spec.get("instance") else {}
    if spec.get("assignor"):
        extra["partition.assignment.strategy"] = spec["assignor"]
    if spec.get("protocol") == "consumer":
        # KIP-848: the broker sets session and heartbeat times and assigns.
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": spec["bootstrap"],
                "group.id": spec["group"],
                "group.protocol": "consumer",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                **extra,
            }
        )
    else:
        consumer = confluent_consumer(spec["bootstrap"], spec["group"], **extra)
    if spec.get("protocol") == "consumer":
        # Incremental: log each hand-over as it happens (G gained, L lost),
        # so a test can check no partition ever had two owners.
        consumer.subscribe(
            [spec["topic"]],
            on_assign=lambda _c, parts: log.handover("G", parts),
            on_revoke=lambda _c, parts: log.handover("L", parts),
            on_lost=lambda _c, parts: log.handover("L", parts),
        )
    else:
        consumer.subscribe([spec["topic"]])
    try:
        while not stopping:
            msgs = [m for m in consumer.consume(200, 0.2) if not m.error()]
            log.assignment({tp.partition for tp in consumer.assignment()})
            done = commit_confluent(consumer, msgs) if msgs else []
            if done:
                log.committed([(m.partition(), m.offset()) for m in done], spec.get("delay", 0))
    finally:
        consumer.close()


def _kafka_python_loop(spec, stopping, log):
    extra = {}
    if spec.get("assignor") == "range":
        extra["partition_assignment_strategy"] = [RangePartitionAssignor]
    # kafka_python_group: kafka-python 3.0.12 can leave a finished join
    # unapplied (a member with no partitions, no heartbeats, never rejoining).
    consumer = kafka_python_group.group_consumer(
        spec["topic"],
        bootstrap_servers=spec["bootstrap"],
        group_id=spec["group"],
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=500,
        **extra,
    )
    try:
        while not stopping:
            # If a poll (a 200 ms poll, or a join the rebalance bounds) takes
            # 20 s, every thread's stack goes to the worker's .err file, which
            # the test's failure message shows.
            faulthandler.dump_traceback_later(POLL_STALL_S, repeat=True)
            polled = kafka_python_group.poll(consumer, 200)
            faulthandler.cancel_dump_traceback_later()
            log.assignment({tp.partition for tp in consumer.assignment()})
            pairs = [(m.partition, m.offset) for msgs in polled.values() for m in msgs]
            if not pairs:
                continue
            try:
                consumer.commit()
            except kafka.errors.CommitFailedError:
                continue  # the next poll rejoins and resumes from the commits
            log.committed(pairs, spec.get("delay", 0))
    finally:
        consumer.close()


def stall_dumps(workers):
    """The thread dumps stalled kafka-python workers wrote (see _kafka_python_loop)."""
    out = []
    for worker in workers:
        if not worker.err.closed:  # a stopped worker's is closed, and complete
            worker.err.flush()
        with open(worker.err.name, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        if "Thread 0x" in text or "Current thread" in text:
            out.append(f"--- {worker.err.name}:\n{text[-20000:]}")
    return "\n".join(out) or "(no worker reported a stalled poll)"


class _WorkerLog:
    """Lines ``time A p,p,...`` (assignment changed) and ``time R p:o ...``
    (records whose commit succeeded)."""

    def __init__(self, handle):
        self.handle = handle
        self.last = None

    def assignment(self, partitions):
        if partitions != self.last:
            self.last = partitions
            joined = ",".join(map(str, sorted(partitions)))
            self.handle.write(f"{time.time():.3f} A {joined}\n")
            self.handle.flush()

    def handover(self, kind, parts):
        joined = ",".join(str(tp.partition) for tp in parts)
        self.handle.write(f"{time.time():.6f} {kind} {joined}\n")
        self.handle.flush()

    def committed(self, pairs, delay):
        text = " ".join(f"{p}:{o}" for p, o in pairs)
        self.handle.write(f"{time.time():.3f} R {text}\n")
        self.handle.flush()
        time.sleep(delay)


def worker_main(spec):
    """Consume until SIGTERM, logging assignments and committed records."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    loop = _kafka_python_loop if spec.get("client") == "kafka-python" else _confluent_loop
    with open(spec["out"], "a", encoding="ascii") as out:
        loop(spec, stopping, _WorkerLog(out))


class Worker:
    def __init__(self, tmp_path, name, **spec):
        self.out = str(tmp_path / f"{name}.out")
        self.err = open(tmp_path / f"{name}.err", "wb")  # noqa: SIM115
        spec["out"] = self.out
        env = dict(os.environ, PYTHONPATH=ROOT)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.test_groups", json.dumps(spec)],
            cwd=ROOT,
            env=env,
            stdout=self.err,
            stderr=subprocess.STDOUT,
        )

    def _lines(self, kind):
        try:
            with open(self.out, encoding="ascii") as handle:
                lines = handle.read().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            stamp, what, *rest = line.split()
            if what == kind:
                out.append((float(stamp), rest))
        return out

    def handovers(self):
        """[(time, "G" or "L", {partition})] from the rebalance callbacks."""
        out = []
        for kind in ("G", "L"):
            for t, rest in self._lines(kind):
                out.append((t, kind, {int(p) for p in rest[0].split(",")} if rest else set()))
        return sorted(out, key=lambda e: e[0])

    def batches(self):
        """[(time, [(partition, offset)])] committed so far."""
        return [(t, [tuple(map(int, p.split(":"))) for p in rest]) for t, rest in self._lines("R")]

    def assignments(self):
        """[(time, {partition})] in the order the consumer saw them."""
        return [
            (t, {int(p) for p in rest[0].split(",")} if rest else set())
            for t, rest in self._lines("A")
        ]

    def assigned(self):
        found = self.assignments()
        return found[-1][1] if found else set()

    def records(self):
        return [r for _, batch in self.batches() for r in batch]

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(30)
        self.err.close()


def balanced_workers(workers, parts):
    def balanced():
        sets = [w.assigned() for w in workers]
        return all(sets) and sorted(p for s in sets for p in s) == list(range(parts))

    try:
        wait_for(balanced, 60, "a balanced assignment")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{stall_dumps(workers)}") from None
    return [w.assigned() for w in workers]


def test_confluent_group_failover_exactly_once(shared_broker, tmp_path):
    bootstrap = shared_broker.bootstrap
    topic, group, parts, total = "grp-failover", "grp-failover-g", 6, 60000
    create_topic(bootstrap, topic, partitions=parts)
    produce(bootstrap, topic, total, parts)
    spec = {"bootstrap": bootstrap, "topic": topic, "group": group, "delay": 0.1}
    workers = [Worker(tmp_path, f"w{i}", **spec) for i in range(3)]
    try:

        def progress():
            return len({r for w in workers for r in w.records()})

        wait_for(lambda: progress() >= total // 4, 60, "a quarter of the records")
        workers[0].stop(signal.SIGTERM)  # clean close: LeaveGroup
        wait_for(lambda: progress() >= total // 2, 60, "half of the records")
        victim, survivor = workers[1], workers[2]
        victim_parts = victim.assigned()
        assert victim_parts
        victim.stop(signal.SIGKILL)
        killed_at = time.time()
        try:
            wait_for(lambda: progress() >= total, 90, "every record")
        except AssertionError as exc:
            # What each side saw, for a stall that only a loaded run shows.
            seen = {
                w.err.name: (w.assignments()[-3:], len(w.records())) for w in (victim, survivor)
            }
            raise AssertionError(
                f"{exc}: {progress()} of {total}; assignments and records {seen}\n"
                f"{stall_dumps(workers)}\n--- broker log:\n{shared_broker.log()[-8000:]}"
            ) from None
        taken_over = min(t for t, parts in survivor.assignments() if victim_parts <= parts)
        # Session expiry (6 s), a heartbeat, JoinGroup and SyncGroup.
        assert taken_over - killed_at < SESSION_MS / 1000 + 3, taken_over - killed_at
        done_before = [
            r for w in workers for t, batch in w.batches() if t <= killed_at for r in batch
        ]
        unfinished = {p for p in victim_parts if sum(q == p for q, _ in done_before) < 10000}
        after = {p for t, batch in survivor.batches() if t > taken_over for p, _ in batch}
        assert unfinished <= after
    finally:
        for w in workers:
            w.stop(signal.SIGTERM)
    assert_exactly_once(
        [r for w in workers for r in w.records()], dict.fromkeys(range(parts), 10000)
    )
    assert committed(bootstrap, group, topic, parts) == dict.fromkeys(range(parts), 10000)


# ---- in-process consumers -----------------------------------------------------------


class Collector:
    """Records (partition, offset) pairs from consumer threads or tasks."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_consumer = {}

    def add(self, name, pairs):
        with self.lock:
            self.by_consumer.setdefault(name, []).extend(pairs)

    def all(self):
        with self.lock:
            return [r for pairs in self.by_consumer.values() for r in pairs]


def group_of_workers(tmp_path, bootstrap, topic, parts, clients, count, **spec):
    """Start one worker per client, wait until they split ``parts``, produce
    ``count`` records and wait until all are committed; returns (workers, assigned)."""
    spec = {"bootstrap": bootstrap, "topic": topic, "group": f"{topic}-g", **spec}
    workers = [Worker(tmp_path, f"{c}-{i}", client=c, **spec) for i, c in enumerate(clients)]
    try:
        assigned = balanced_workers(workers, parts)
        produce(bootstrap, topic, count, parts)
        wait_for(
            lambda: len({r for w in workers for r in w.records()}) >= count, 60, "every record"
        )
    finally:
        for w in workers:
            w.stop(signal.SIGTERM)
    return workers, assigned


def test_kafka_python_group_of_two(shared_broker, tmp_path):
    bootstrap, topic = shared_broker.bootstrap, "grp-kp"
    create_topic(bootstrap, topic, partitions=4)
    workers, assigned = group_of_workers(
        tmp_path, bootstrap, topic, 4, ["kafka-python", "kafka-python"], 2000
    )
    assert [len(a) for a in assigned] == [2, 2]
    assert_exactly_once([r for w in workers for r in w.records()], dict.fromkeys(range(4), 500))
    for worker, partitions in zip(workers, assigned):
        assert {p for p, _ in worker.records()} == partitions
    assert committed(bootstrap, f"{topic}-g", topic, 4) == dict.fromkeys(range(4), 500)


def test_kafka_python_joins_are_applied_with_any_poll_timeout(shared_broker):
    """The kafka-python work-around (tests/kafka_python_group.py) on its own:
    polls whose timer always expires mid-join (timeout 0) still join, and the
    leader's rejoin after partitions are added is applied. Plain
    ``consumer.poll(timeout_ms=0)`` on kafka-python 3.0.12 never joins: every
    finished join is dropped and sent again."""
    bootstrap, topic = shared_broker.bootstrap, "grp-kp-timer"
    create_topic(bootstrap, topic, partitions=2)
    consumer = kafka_python_group.group_consumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"{topic}-g",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=500,
        metadata_max_age_ms=300,
    )

    def assigned():
        kafka_python_group.poll(consumer, 0)
        return {tp.partition for tp in consumer.assignment()}

    try:
        wait_for(lambda: assigned() == {0, 1}, 30, "the first assignment")
        admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.create_partitions({topic: kafka.admin.NewPartitions(total_count=4)})
        finally:
            admin.close()
        # The leader sees the new partitions in its metadata and rejoins.
        wait_for(lambda: assigned() == {0, 1, 2, 3}, 30, "the new partitions assigned")
        assert consumer._coordinator.stable()
    finally:
        consumer.close()


def test_mixed_librdkafka_and_kafka_python_group(shared_broker, tmp_path):
    bootstrap, topic = shared_broker.bootstrap, "grp-mixed"
    create_topic(bootstrap, topic, partitions=6)
    workers, assigned = group_of_workers(
        tmp_path, bootstrap, topic, 6, ["confluent", "kafka-python"], 1200, assignor="range"
    )
    assert [len(a) for a in assigned] == [3, 3]
    assert_exactly_once([r for w in workers for r in w.records()], dict.fromkeys(range(6), 200))
    for worker, partitions in zip(workers, assigned):
        assert {p for p, _ in worker.records()} == partitions


def test_aiokafka_group_of_two(shared_broker):
    bootstrap, topic, group = shared_broker.bootstrap, "grp-aio", "grp-aio-g"
    create_topic(bootstrap, topic, partitions=4)
    seen = {}

    async def consume(name, consumer, done):
        await consumer.start()
        try:
            while not done.is_set():
                batches = await consumer.getmany(timeout_ms=200)
                pairs = [(m.partition, m.offset) for msgs in batches.values() for m in msgs]
                if pairs:
                    await consumer.commit()
                    seen.setdefault(name, []).extend(pairs)
        finally:
            await consumer.stop()

    async def run():
        done = asyncio.Event()
        consumers = {
            name: AIOKafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group,
                client_id=name,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=SESSION_MS,
                heartbeat_interval_ms=500,
            )
            for name in ("aio-a", "aio-b")
        }
        tasks = [asyncio.create_task(consume(n, c, done)) for n, c in consumers.items()]
        deadline = time.monotonic() + 60
        while not all(c.assignment() for c in consumers.values()):
            assert time.monotonic() < deadline, "no balanced assignment"
            await asyncio.sleep(0.1)
        assigned = {n: {tp.partition for tp in c.assignment()} for n, c in consumers.items()}
        await asyncio.to_thread(produce, bootstrap, topic, 2000, 4)
        while len({r for pairs in seen.values() for r in pairs}) < 2000:
            assert time.monotonic() < deadline + 30, "records missing"
            await asyncio.sleep(0.1)
        done.set()
        await asyncio.gather(*tasks)
        return assigned

    assigned = asyncio.run(run())
    assert sorted(p for s in assigned.values() for p in s) == [0, 1, 2, 3]
    assert all(len(s) == 2 for s in assigned.values())
    assert_exactly_once(
        [r for pairs in seen.values() for r in pairs], dict.fromkeys(range(4), 500)
    )
    assert committed(bootstrap, group, topic, 4) == dict.fromkeys(range(4), 500)


def test_kcat_balanced_consumer(shared_broker):
    bootstrap, topic, group = shared_broker.bootstrap, "grp-kcat", "grp-kcat-g"
    create_topic(bootstrap, topic, partitions=3)
    produce(bootstrap, topic, 300, 3)
    result = subprocess.run(
        [
            "kcat",
            "-b",
            bootstrap,
            "-G",
            group,
            "-X",
            "auto.offset.reset=earliest",
            "-X",
            f"session.timeout.ms={SESSION_MS}",
            "-c",
            "300",
            "-f",
            "%p:%o\n",
            topic,
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    seen = [tuple(map(int, line.split(":"))) for line in result.stdout.decode().split()]
    assert_exactly_once(seen, dict.fromkeys(range(3), 100))
    # kcat commits what it consumed when it closes (auto commit).
    assert committed(bootstrap, group, topic, 3) == dict.fromkeys(range(3), 100)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_committed_offsets_survive_broker_restart(broker, how):
    bootstrap, topic, group = broker.bootstrap, "grp-restart", "grp-restart-g"
    create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, 100, 2)
    consumer = confluent_consumer(bootstrap, group)
    consumer.subscribe([topic])
    wait_for(lambda: (consumer.poll(0.2), consumer.assignment())[1], 30, "an assignment")
    offsets = [
        confluent_kafka.TopicPartition(topic, 0, 17, metadata="m0", leader_epoch=0),
        confluent_kafka.TopicPartition(topic, 1, 33),
    ]
    assert all(tp.error is None for tp in consumer.commit(offsets=offsets, asynchronous=False))
    consumer.close()
    if how == "sigterm":
        broker.stop()
    else:
        broker.kill()
    broker.start()
    after = confluent_consumer(bootstrap, group)
    try:
        got = after.committed([confluent_kafka.TopicPartition(topic, p) for p in (0, 1)], 20)
        assert [(tp.partition, tp.offset) for tp in got] == [(0, 17), (1, 33)]
        assert got[0].metadata == "m0"
        after.subscribe([topic])
        first = {}
        deadline = time.monotonic() + 30
        while len(first) < 2 and time.monotonic() < deadline:
            m = after.poll(0.2)
            if m is not None and not m.error():
                first.setdefault(m.partition(), m.offset())
        assert first == {0: 17, 1: 33}
    finally:
        after.close()


def test_static_member_restart_keeps_assignment_without_rebalance(shared_broker, tmp_path):
    bootstrap, topic, group = shared_broker.bootstrap, "grp-static", "grp-static-g"
    create_topic(bootstrap, topic, partitions=4)
    events = []
    collector, stop, assigned = Collector(), threading.Event(), {}

    def on_assign(_consumer, partitions):
        events.append(("assign", sorted(p.partition for p in partitions)))

    def on_revoke(_consumer, partitions):
        events.append(("revoke", sorted(p.partition for p in partitions)))

    def member_b():
        consumer = confluent_consumer(bootstrap, group, **{"group.instance.id": "static-b"})
        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not stop.is_set():
                msgs = [m for m in consumer.consume(200, 0.2) if not m.error()]
                assigned["b"] = {tp.partition for tp in consumer.assignment()}
                done = commit_confluent(consumer, msgs) if msgs else []
                if done:
                    collector.add("b", [(m.partition(), m.offset()) for m in done])
        finally:
            consumer.close()

    thread = threading.Thread(target=member_b, daemon=True)
    thread.start()
    spec = {"bootstrap": bootstrap, "topic": topic, "group": group, "instance": "static-a"}
    a = Worker(tmp_path, "a1", **spec)
    a2 = None
    try:
        wait_for(lambda: len(assigned.get("b", ())) == 2, 60, "two partitions for b")
        produce(bootstrap, topic, 400, 4)

        def consumed(n):
            return len(set(collector.all()) | set(a.records() + (a2.records() if a2 else []))) >= n

        wait_for(lambda: consumed(400), 60, "the first 400 records")
        a_parts = {p for p, _ in a.records()}
        events_before = list(events)
        a.stop(signal.SIGKILL)
        a2 = Worker(tmp_path, "a2", **spec)  # same group.instance.id, well within 6 s
        produce(bootstrap, topic, 400, 4, start=400)
        wait_for(lambda: consumed(800), 60, "the next 400 records")
        assert {p for p, _ in a2.records()} == a_parts
        time.sleep(SESSION_MS / 1000)  # the old incarnation's session ends: still no rebalance
        assert events == events_before, "the other static member was rebalanced"
        assert len({p for p, _ in a2.records()}) == 2
    finally:
        stop.set()
        thread.join(30)
        a.stop(signal.SIGKILL)
        if a2 is not None:
            a2.stop(signal.SIGTERM)
    seen = collector.all() + a.records() + a2.records()
    assert_exactly_once(seen, dict.fromkeys(range(4), 200))


if __name__ == "__main__":
    worker_main(json.loads(sys.argv[1]))
