"""Transactions: throughput, read_committed cost, and restart from producer snapshots.

Three measurements against one broker process (confluent-kafka, 200-byte
values, one partition so the figures compare with the paper benchmark):

1. **Produce**: ``--records`` records with the idempotent producer, then the
   same with a transactional producer committing every 100 and every 10,000
   records. Throughput and broker CPU seconds per million records (from
   /proc), each the median of ``--runs`` runs, the systems interleaved.
2. **Fetch**: the transactional topic read from the start at
   read_uncommitted and at read_committed (one aborted transaction of 100
   records in every 20 transactions, so AbortedTransactions are in play).
3. **Restart**: ``--producers`` producer ids with one open transaction each
   spread over a log of many segments; the broker is restarted (SIGTERM,
   which writes snapshots) and the first read_committed fetch after the
   restart is timed (that fetch loads the producer state), with the
   snapshots and again with them deleted (a full header scan).

    python3 bench/txn_bench.py --records 200000 --runs 3
"""

import argparse
import glob
import os
import statistics
import sys
import tempfile
import time

import confluent_kafka

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pluglog import protocol as codec  # noqa: E402
from pluglog.client.blocking import BlockingClient  # noqa: E402
from pluglog.protocol.records import Record, build_batch  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402
from tests.integration.clients import create_topic  # noqa: E402

VALUE = b"x" * 200


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(bootstrap, topic, records, txn_size, txn_id):
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10000}
    if txn_size:
        config["transactional.id"] = txn_id
    else:
        config["enable.idempotence"] = True
    p = confluent_kafka.Producer(config)
    if txn_size:
        p.init_transactions(30)
    started = time.monotonic()
    sent = 0
    while sent < records:
        n = min(txn_size or records, records - sent)
        if txn_size:
            p.begin_transaction()
        for _ in range(n):
            while True:
                try:
                    p.produce(topic, VALUE, partition=0)
                    break
                except BufferError:
                    p.poll(0.01)
        if txn_size:
            p.commit_transaction(60)
        sent += n
    p.flush(60)
    return time.monotonic() - started


def consume(bootstrap, topic, expected, isolation):
    c = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
        }
    )
    c.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    got = 0
    started = time.monotonic()
    while got < expected:
        got += sum(1 for m in c.consume(10000, 1.0) if not m.error())
    elapsed = time.monotonic() - started
    c.close()
    return elapsed


def bench_produce(broker, records, runs):
    rows = {}
    for run in range(runs):
        for label, size in (
            ("idempotent", 0),
            ("transactions of 100", 100),
            ("transactions of 10,000", 10000),
        ):
            topic = f"p-{size}-{run}"
            create_topic(broker.bootstrap, topic, partitions=1)
            cpu = cpu_seconds(broker.proc.pid)
            seconds = produce(broker.bootstrap, topic, records, size, f"bench-{size}-{run}")
            cpu = cpu_seconds(broker.proc.pid) - cpu
            rows.setdefault(label, []).append((records / seconds, cpu / records * 1e6))
    return rows


def bench_fetch(broker, records, runs):
    topic = "f"
    create_topic(broker.bootstrap, topic, partitions=1)
    p = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": "fetch", "linger.ms": 5}
    )
    p.init_transactions(30)
    committed = 0
    n = 0
    while committed < records:
        p.begin_transaction()
        for _ in range(100):
            p.produce(topic, VALUE, partition=0)
        n += 1
        if n % 20 == 0:
            p.flush(60)
            p.abort_transaction(60)
        else:
            p.commit_transaction(60)
            committed += 100
    total = committed + (n // 20) * 100
    rows = {}
    for _ in range(runs):
        for isolation, expected in (("read_uncommitted", total), ("read_committed", committed)):
            cpu = cpu_seconds(broker.proc.pid)
            seconds = consume(broker.bootstrap, topic, expected, isolation)
            cpu = cpu_seconds(broker.proc.pid) - cpu
            rows.setdefault(isolation, []).append((expected / seconds, cpu / expected * 1e6))
    return rows


def _open_transactions(broker, producers):
    """``producers`` producer ids, each with an open transaction."""
    create_topic(broker.bootstrap, "r", partitions=1, config={"segment.bytes": "65536"})
    host, port = broker.bootstrap.split(":")
    with BlockingClient(host, int(port)) as client:
        for pid in range(1000, 1000 + producers):
            batch = build_batch(
                [Record(None, VALUE, (), 0)],
                producer_id=pid,
                producer_epoch=0,
                base_sequence=0,
                is_transactional=True,
            )
            out = client.request(
                codec.PRODUCE,
                7,
                {
                    "transactional_id": f"open-{pid}",
                    "acks": 1,
                    "timeout_ms": 10000,
                    "topic_data": [
                        {"name": "r", "partition_data": [{"index": 0, "records": batch}]}
                    ],
                },
            )
            code = out["responses"][0]["partition_responses"][0]["error_code"]
            assert code == 0, code


def _first_committed_fetch(bootstrap):
    host, port = bootstrap.split(":")
    with BlockingClient(host, int(port)) as client:
        started = time.monotonic()
        out = client.request(
            codec.FETCH,
            11,
            {
                "replica_id": -1,
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": 1 << 20,
                "isolation_level": 1,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": "r",
                        "partitions": [
                            {
                                "partition": 0,
                                "current_leader_epoch": -1,
                                "fetch_offset": 0,
                                "log_start_offset": -1,
                                "partition_max_bytes": 1 << 20,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        )
        elapsed = time.monotonic() - started
    lso = out["responses"][0]["partitions"][0]["last_stable_offset"]
    return elapsed, lso


def bench_restart(data_dir, producers):
    broker = BrokerProcess(data_dir).start()
    _open_transactions(broker, producers)
    port = broker.port
    broker.stop()  # clean: snapshots written
    out = {}
    for label, drop in (("with snapshots", False), ("without snapshots", True)):
        if drop:
            for path in glob.glob(os.path.join(data_dir, "r-0", "*.snapshot")):
                os.unlink(path)
        started = time.monotonic()
        broker = BrokerProcess(data_dir, port=port).start()
        startup = time.monotonic() - started
        load, lso = _first_committed_fetch(broker.bootstrap)
        segments = len(glob.glob(os.path.join(data_dir, "r-0", "*.log")))
        assert lso == 0, lso  # the oldest open transaction holds the LSO at 0
        out[label] = (startup, load, segments)
        broker.stop()
    return out


def _median(values):
    return statistics.median(values)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--producers", type=int, default=10000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(os.path.join(tmp, "data")).start()
        try:
            produced = bench_produce(broker, args.records, args.runs)
            fetched = bench_fetch(broker, args.records, args.runs)
        finally:
            broker.stop()
        restart = bench_restart(os.path.join(tmp, "restart"), args.producers)
    print(f"\n{args.records} x 200 B, one partition, median of {args.runs}\n")
    print("| produce | records/s | broker CPU µs/record |\n|---|---|---|")
    for label, rows in produced.items():
        rate = _median([r for r, _ in rows])
        cpu = _median([c for _, c in rows])
        print(f"| {label} | {rate:,.0f} | {cpu:.2f} |")
    print("\n| fetch | records/s | broker CPU µs/record |\n|---|---|---|")
    for label, rows in fetched.items():
        rate = _median([r for r, _ in rows])
        cpu = _median([c for _, c in rows])
        print(f"| {label} | {rate:,.0f} | {cpu:.2f} |")
    print(f"\nrestart with {args.producers} producer ids, each with an open transaction\n")
    print("| restart | broker start s | first read_committed fetch s | segments |")
    print("|---|---|---|---|")
    for label, (startup, load, segments) in restart.items():
        print(f"| {label} | {startup:.2f} | {load:.3f} | {segments} |")


if __name__ == "__main__":
    main()
