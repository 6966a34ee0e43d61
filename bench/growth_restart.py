"""Growth: produce throughput vs partition count, broker RSS, restart times.

1. ``growth``: for P in 1, 10, 100, 1000 partitions, a fresh broker takes
   ``--n`` 200-byte records from one confluent-kafka producer (acks=1,
   linger.ms=5, records round-robin over the partitions). Reported: msgs/s,
   broker CPU seconds per million records and the broker's peak RSS
   (VmHWM, which covers the whole run).
2. ``restart``: ``--gb`` GB of 1 KB records in 100 partitions (pre-built
   1 MB batches sent with pluglog's blocking client), then

   * a clean stop (SIGTERM) and a restart, timed from process start until a
     Metadata request and a ListOffsets for all 100 partitions are answered
     with the expected end offsets (no rescan expected);
   * 10 % more data, a SIGKILL, and the same timed restart (rescan only of
     segments after each log's recovery point; the broker log's recovery
     lines are counted).

Usage: ``python3 bench/growth_restart.py [--n 1000000] [--gb 2] [--parts 1,10,100,1000]``;
``--only restart --restart-partitions 10000 --batch-records 10 --gb 0.2`` is
the many-partitions start-up (RSS and open fds are printed after each
restart).
"""

import argparse
import os
import re
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from pluglog import protocol as codec  # noqa: E402
from pluglog.client.blocking import BlockingClient  # noqa: E402
from pluglog.protocol.records import Record, build_batch  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402


def proc_stat(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/status") as handle:
        status = dict(line.split(":", 1) for line in handle if ":" in line)
    return cpu, int(status["VmHWM"].split()[0]) // 1024, int(status["VmRSS"].split()[0]) // 1024


def create_topic(bootstrap, topic, partitions, step=500):
    """``topic`` with ``partitions``, created ``step`` at a time (CreateTopics,
    then CreatePartitions): before the new logs' durability was batched
    (issue 24), each new partition cost the broker two to four fsyncs on its
    event loop, ~6 ms here, so one request for 10,000 outlasted a client's
    timeout; the same steps are kept so that old and new code compare."""
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, min(partitions, step), 1)])[topic].result(120)
    for count in range(step * 2, partitions + step, step):
        wanted = NewPartitions(topic, min(count, partitions))
        admin.create_partitions([wanted])[topic].result(120)


def growth(args):
    import confluent_kafka as ck

    print("| partitions | msgs/s | broker CPU s / 1M records | broker peak RSS MB |")
    print("|---|---|---|---|")
    for parts in [int(p) for p in args.parts.split(",")]:
        data = os.path.join(args.work, f"growth-{parts}")
        shutil.rmtree(data, ignore_errors=True)
        broker = BrokerProcess(data).start()
        try:
            create_topic(broker.bootstrap, "g", parts)
            producer = ck.Producer(
                {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": 1}
            )
            producer.list_topics("g", timeout=10)
            payload = b"x" * 200
            cpu0 = proc_stat(broker.proc.pid)[0]
            t0 = time.perf_counter()
            for i in range(args.n):
                while True:
                    try:
                        producer.produce("g", payload, partition=i % parts)
                        break
                    except BufferError:
                        producer.poll(0.001)
                if not i & 1023:
                    producer.poll(0)
            left = producer.flush(120)
            seconds = time.perf_counter() - t0
            cpu, hwm, _ = proc_stat(broker.proc.pid)
            rate = (args.n - left) / seconds
            per_m = (cpu - cpu0) / (args.n / 1e6)
            print(f"| {parts} | {rate:,.0f} | {per_m:.2f} | {hwm} |", flush=True)
            del producer  # close its connections before the broker stops
        finally:
            broker.stop()
            shutil.rmtree(data, ignore_errors=True)


def _wait_ready(broker, expected):
    """Metadata + ListOffsets(latest) for every partition answer as expected."""
    with BlockingClient.from_bootstrap(broker.bootstrap) as client:
        meta = client.request(codec.METADATA, 1, {"topics": [{"name": "r"}]})
        assert len(meta["topics"][0]["partitions"]) == len(expected), meta
        body = {
            "replica_id": -1,
            "topics": [
                {
                    "name": "r",
                    "partitions": [
                        {"partition_index": p, "timestamp": -1} for p in range(len(expected))
                    ],
                }
            ],
        }
        answer = client.request(codec.LIST_OFFSETS, 1, body)
        ends = {p["partition_index"]: p["offset"] for p in answer["topics"][0]["partitions"]}
        assert ends == expected, (ends, expected)


def _load(broker, batch, per_partition, parts, ends, count):
    with BlockingClient.from_bootstrap(broker.bootstrap) as client:
        for _ in range(per_partition):
            for first in range(0, parts, 10):
                data = [{"index": p, "records": batch} for p in range(first, first + 10)]
                body = {
                    "acks": 1,
                    "timeout_ms": 5000,
                    "topic_data": [{"name": "r", "partition_data": data}],
                }
                client.request(codec.PRODUCE, 8, body)
                for p in range(first, first + 10):
                    ends[p] += count


def _timed_restart(broker, expected):
    t0 = time.perf_counter()
    broker.start(timeout=120)
    listening = time.perf_counter() - t0
    _wait_ready(broker, expected)
    return listening, time.perf_counter() - t0


def _footprint(broker):
    """``(RSS MiB, open fds)`` of the broker process, from /proc."""
    pid = broker.proc.pid
    with open(f"/proc/{pid}/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return rss / 1024, len(os.listdir(f"/proc/{pid}/fd"))


def restart(args):
    parts = args.restart_partitions
    data = os.path.join(args.work, "restart")
    shutil.rmtree(data, ignore_errors=True)
    count = args.batch_records
    batch = build_batch([Record(value=os.urandom(1000)) for _ in range(count)], base_timestamp=1)
    per_partition = max(1, int(args.gb * 1024**3 / len(batch) / parts))
    ends = dict.fromkeys(range(parts), 0)
    broker = BrokerProcess(data).start()
    try:
        t0 = time.perf_counter()
        create_topic(broker.bootstrap, "r", parts)
        print(
            f"created {parts} partitions ({min(parts, 500)} a request) in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        t0 = time.perf_counter()
        _load(broker, batch, per_partition, parts, ends, count)
        loaded = per_partition * parts * len(batch)
        print(
            f"loaded {loaded / 1e9:.2f} GB in {parts} partitions in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        t0 = time.perf_counter()
        broker.stop()
        print(f"clean stop took {time.perf_counter() - t0:.2f} s")
        listening, ready = _timed_restart(broker, ends)
        rss, fds = _footprint(broker)
        print(
            f"restart after clean stop: listening after {listening:.2f} s, "
            f"all {parts} partitions answered after {ready:.2f} s; RSS {rss:.0f} MiB, "
            f"{fds} open fds"
        )
        _load(broker, batch, max(1, per_partition // 10), parts, ends, count)
        broker.kill()
        before = broker.log().count("after an unclean shutdown")
        listening, ready = _timed_restart(broker, ends)
        log = broker.log()
        recovered = log.count("after an unclean shutdown") - before
        scanned = sum(int(n) for n in re.findall(r"re-scanned (\d+) segment", log))
        rss, fds = _footprint(broker)
        print(
            f"restart after SIGKILL: listening after {listening:.2f} s, all partitions "
            f"answered after {ready:.2f} s; {recovered} logs recovered, "
            f"{scanned} segment(s) re-scanned in total; RSS {rss:.0f} MiB, {fds} open fds"
        )
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--parts", default="1,10,100,1000")
    parser.add_argument("--gb", type=float, default=2.0)
    parser.add_argument("--work", default="/tmp/pluglog-bench")
    parser.add_argument("--only", choices=["growth", "restart"])
    parser.add_argument(
        "--restart-partitions", type=int, default=100, help="partitions of the restart test"
    )
    parser.add_argument(
        "--batch-records", type=int, default=1000, help="1 KB records per batch (restart test)"
    )
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    if args.only != "restart":
        growth(args)
    if args.only != "growth":
        restart(args)


if __name__ == "__main__":
    main()
