"""kill -9 loop: produce with acks=all, SIGKILL the broker mid-stream, restart
on the same data dir, repeat; then read everything back and check that every
acknowledged record is there with its offset and value.

    python3 bench/kill_loop.py [--rounds 20] [--partitions 4] [--checkpoint-ms MS]

``--checkpoint-ms`` sets log.flush.offset.checkpoint.interval.ms, so kills
land around checkpoints (with >= 100 partitions, spread over reactor
turns: pluglog.broker.checkpoint).

Prints one line per round and a summary (rounds, acked, lost, restart times).
"""

import argparse
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import confluent_kafka  # noqa: E402

from tests.broker_process import BrokerProcess, free_port  # noqa: E402
from tests.integration.clients import create_topic  # noqa: E402


def produce_until_killed(broker, topic, partitions, round_no, acked, rng):
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 3000,
            "reconnect.backoff.max.ms": 200,
        }
    )

    def report(err, msg):
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()

    kill_at = time.monotonic() + rng.uniform(0.5, 2.5)
    i = 0
    while time.monotonic() < kill_at:
        try:
            producer.produce(
                topic,
                value=f"r{round_no}-{i}".encode() * 8,
                partition=i % partitions,
                on_delivery=report,
            )
            i += 1
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    broker.kill()
    producer.flush(5)  # in-flight requests fail; nothing more is acked
    return i


def read_all(broker, topic, partitions):
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "kill-loop-check",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(partitions)
        ]
    )
    stored, at_end = {}, set()
    deadline = time.monotonic() + 120
    while len(at_end) < partitions and time.monotonic() < deadline:
        for msg in consumer.consume(10000, 0.5):
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise RuntimeError(msg.error())
            stored[(msg.partition(), msg.offset())] = msg.value()
    consumer.close()
    return stored


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--checkpoint-ms", type=int, default=None)
    args = parser.parse_args()
    settings = {}
    if args.checkpoint_ms is not None:
        settings["log.flush.offset.checkpoint.interval.ms"] = str(args.checkpoint_ms)
    rng = random.Random(args.seed)
    topic = "kill-loop"
    with tempfile.TemporaryDirectory(prefix="pluglog-kill-loop-") as tmp:
        broker = BrokerProcess(os.path.join(tmp, "data"), port=free_port(), settings=settings)
        broker.start()
        create_topic(broker.bootstrap, topic, partitions=args.partitions)
        acked, restarts = {}, []
        for round_no in range(args.rounds):
            if round_no:
                started = time.monotonic()
                broker.start()
                restarts.append(time.monotonic() - started)
            before = len(acked)
            sent = produce_until_killed(broker, topic, args.partitions, round_no, acked, rng)
            print(
                f"round {round_no + 1}: produced {sent}, acked {len(acked) - before}", flush=True
            )
        broker.start()
        stored = read_all(broker, topic, args.partitions)
        max_rss = "?"
        with open(f"/proc/{broker.proc.pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    max_rss = line.split(":")[1].strip()
        broker.stop()
        lost = [key for key, value in acked.items() if stored.get(key) != value]
        print(
            f"rounds={args.rounds} acked={len(acked)} stored={len(stored)} lost={len(lost)} "
            f"restart max={max(restarts):.2f}s mean={sum(restarts) / len(restarts):.2f}s "
            f"final broker VmHWM={max_rss}"
        )
        if lost:
            print("lost, e.g.:", sorted(lost)[:10])
            sys.exit(1)


if __name__ == "__main__":
    main()
