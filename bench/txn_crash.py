"""Exactly-once under SIGKILL: a consume-transform-produce loop with transactions.

The input topic gets ``--records`` records (acks=all, idempotent). A
confluent-kafka loop reads them at read_committed (``assign()`` with the
group's committed offsets), writes each transformed record to the output
topic and sends the consumed offsets to the same transaction, then commits.
A timer SIGKILLs the broker at a random moment (mid-transaction, during a
commit, between transactions) ``--kills`` times; after each kill the broker
restarts on the same data dir and the loop starts over from the committed
offsets with a new producer of the same transactional id. At the end a
read_committed read of the output must hold every input record exactly
once; a read_uncommitted read shows the aborted duplicates too.

    python3 bench/txn_crash.py --records 100000 --kills 10

``run()`` is also what tests/integration/test_txn_crash.py calls with small
numbers.
"""

import argparse
import collections
import os
import random
import sys
import tempfile
import threading
import time

import confluent_kafka

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.integration.clients import create_topic  # noqa: E402

SETTINGS = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
}
PARTITIONS = 3


def fill_input(bootstrap, records):
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20}
    )
    for i in range(records):
        while True:
            try:
                producer.produce("in", key=str(i), value=str(i), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def transform_round(bootstrap, deadline, kill=None):
    """Run the loop until an error (the kill); return transactions committed.

    ``kill``: ``(after, phase, killer)``: call ``killer.kill()`` in transaction
    number ``after`` of this round, ``"mid"`` (records and offsets sent, no
    EndTxn yet), ``"commit"`` (while EndTxn and its markers are in flight) or
    ``"between"`` (after the commit returned)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "ctp",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "ctp-0",
            "transaction.timeout.ms": 10000,
            "linger.ms": 5,
            "message.timeout.ms": 8000,
        }
    )
    commits = 0
    try:
        producer.init_transactions(20)
        partitions = [confluent_kafka.TopicPartition("in", p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        while time.monotonic() < deadline:
            msgs = [m for m in consumer.consume(500, 0.5) if not m.error()]
            if not msgs:
                if _drained(consumer, partitions):
                    return commits, True
                continue
            producer.begin_transaction()
            last = {}
            for m in msgs:
                producer.produce(
                    "out", key=m.key(), value=b"out-" + m.value(), partition=m.partition()
                )
                last[m.partition()] = m.offset()
            producer.send_offsets_to_transaction(
                [confluent_kafka.TopicPartition("in", p, o + 1) for p, o in last.items()],
                consumer.consumer_group_metadata(),
                10,
            )
            phase = kill[1] if kill is not None and commits + 1 == kill[0] else None
            if phase == "mid":
                producer.flush(10)
                kill[2].kill()
            elif phase == "commit":
                threading.Timer(0.002, kill[2].kill).start()
            producer.commit_transaction(10)
            commits += 1
            if phase == "between":
                kill[2].kill()
            if phase is not None:
                # The round ends with the transaction the kill hit: on a
                # cluster the client may carry on against the new leaders,
                # and the next kill needs input left to work on.
                return commits, False
        return commits, False
    except confluent_kafka.KafkaException as exc:
        # Expected after a kill; said, because a round that ends for another
        # reason is what a failing run needs explained.
        print(f"round ended after {commits} commit(s): {exc}", file=sys.stderr, flush=True)
        return commits, False
    finally:
        consumer.close()


def _drained(consumer, partitions):
    """Every input partition's offsets committed up to its end (not merely a
    quiet moment: a cluster may still be electing or loading the group's
    offsets).

    The group's committed offsets, not ``position()``: librdkafka gives a
    partition no position (-1001) until this consumer returns a message from
    it, so a round that starts after a partition was finished would never see
    it drained and would run to the deadline."""
    committed = consumer.committed(partitions, timeout=5)
    for tp, done in zip(partitions, committed, strict=True):
        _low, high = consumer.get_watermark_offsets(tp, timeout=5, cached=False)
        # A negative end is "unknown" (a leader moving), never "read to it".
        if done.offset < 0 or high < 0 or done.offset < high:
            return False
    return True


def read_output(bootstrap, isolation):
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"verify-{isolation}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition("out", p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(PARTITIONS)
        ]
    )
    out = collections.Counter()
    quiet = time.monotonic()
    while time.monotonic() - quiet < 3:
        for m in consumer.consume(2000, 0.5):
            if not m.error():
                out[m.value().decode()] += 1
                quiet = time.monotonic()
    consumer.close()
    return out


def run(data_dir, records, kills, seed=0, timeout=600, log=print):
    """Returns ``(committed_counter, uncommitted_counter, kills_done)``."""
    rng = random.Random(seed)
    broker = BrokerProcess(data_dir, settings=SETTINGS).start()
    port = broker.port
    create_topic(broker.bootstrap, "in", partitions=PARTITIONS)
    create_topic(broker.bootstrap, "out", partitions=PARTITIONS)
    fill_input(broker.bootstrap, records)
    deadline = time.monotonic() + timeout
    done = 0
    # Spread the kills over the run: about 500 records per transaction.
    spacing = max(1, records // 500 // (kills + 1))
    try:
        while time.monotonic() < deadline:
            kill = None
            if done < kills:
                kill = (rng.randint(1, spacing), rng.choice(("mid", "commit", "between")), broker)
            commits, drained = transform_round(broker.bootstrap, deadline, kill)
            if kill is not None and broker.proc.poll() is not None:
                done += 1
                log(f"kill {done} ({kill[1]}): {commits} transaction(s) committed in this round")
                broker = BrokerProcess(data_dir, port=port, settings=SETTINGS).start()
            elif drained:
                break
        return (
            read_output(broker.bootstrap, "read_committed"),
            read_output(broker.bootstrap, "read_uncommitted"),
            done,
        )
    finally:
        broker.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        committed, uncommitted, kills = run(
            os.path.join(tmp, "data"), args.records, args.kills, args.seed, timeout=3600
        )
    expected = {f"out-{i}" for i in range(args.records)}
    missing = expected - set(committed)
    doubled = [v for v, n in committed.items() if n > 1]
    print(
        f"records={args.records} kills={kills} seconds={time.monotonic() - started:.0f} "
        f"read_committed={sum(committed.values())} missing={len(missing)} doubled={len(doubled)} "
        f"read_uncommitted={sum(uncommitted.values())}"
    )
    sys.exit(0 if not missing and not doubled and set(committed) == expected else 1)


if __name__ == "__main__":
    main()
