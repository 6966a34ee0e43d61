"""Log cleaner benchmark: cleaning throughput, and produce latency while a pass runs.

1. Throughput: a compacted log of ``--mb`` MB (keyed 100-byte values over
   ``--keys`` keys, batches of 50 records, uncompressed and lz4) is written
   with the storage API, rolled, and :func:`pluglog.storage.cleaner.clean`
   runs on it in this process; MB/s = dirty bytes cleaned / wall time.
2. Produce latency: a broker process; a stop-and-wait client sends
   ``--requests`` one-batch Produce requests (acks=1, 10 records of 100 bytes)
   to another topic, once with ``log.cleaner.enable=false`` and once while the
   cleaner compacts a ``--dirty-mb`` MB topic (its pass is started by
   lifting ``min.compaction.lag.ms`` right before the timed run). p50/p99/max
   are printed; the broker log tells how long the pass ran.

Run: ``cd <checkout> && PYTHONPATH=$PWD python3 bench/cleaner_bench.py``
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pluglog import protocol as codec  # noqa: E402
from pluglog.client.blocking import BlockingClient  # noqa: E402
from pluglog.config import TopicConfig  # noqa: E402
from pluglog.protocol.records import Record, build_batch  # noqa: E402
from pluglog.storage.cleaner import CleanJob, SourceSegment, clean, map_capacity  # noqa: E402
from pluglog.storage.manager import SegmentLogStorage  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402


def throughput(mb, keys, codec_id):
    config = TopicConfig(segment_bytes=64 << 20, cleanup_policy="compact")
    with tempfile.TemporaryDirectory(prefix="cleaner-bench-") as tmp:
        storage = SegmentLogStorage(tmp, config)
        log = storage.open_log("t", 0, config)
        i = 0
        while log.size_bytes < mb << 20:
            # 100-byte hex values: about 2:1 for lz4, like text.
            values = os.urandom(50 * 50).hex().encode()
            records = [
                Record(f"key-{(i + n) % keys}".encode(), values[n * 100 : n * 100 + 100])
                for n in range(50)
            ]
            log.append(build_batch(records, compression=codec_id), 0)
            i += 50
        log.roll(0)
        log.flush()
        segments = log.segments[:-1]
        job = CleanJob(
            "t",
            0,
            log.directory,
            tuple(
                SourceSegment(s.base_offset, s.next_offset, s.size, s.log_path, -1)
                for s in segments
            ),
            0,
            0,
            86400000,
            map_capacity(134217728, 1),
            config.segment_bytes,
            config.index_interval_bytes,
            config.segment_index_bytes,
        )
        dirty = sum(s.size for s in segments)
        started = time.perf_counter()
        cpu = time.process_time()
        result = clean(job)
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu
        storage.close()
    return dirty, result, wall, cpu, i


def produce_latencies(bootstrap, requests):
    batch = build_batch([Record(b"k", b"v" * 100) for _ in range(10)])
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30000,
        "topic_data": [{"name": "lat", "partition_data": [{"index": 0, "records": batch}]}],
    }
    out = []
    with BlockingClient.from_bootstrap(bootstrap) as client:
        for _ in range(200):  # warm-up
            client.request(codec.PRODUCE, 8, body)
        for _ in range(requests):
            started = time.perf_counter()
            answer = client.request(codec.PRODUCE, 8, body)
            out.append((time.perf_counter() - started) * 1000)
            assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
    return out


def fill(bootstrap, topic, mb):
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    value = os.urandom(50).hex().encode()
    sent = 0
    n = 0
    while sent < mb << 20:
        try:
            producer.produce(topic, value, f"key-{n % 10000}".encode(), partition=0)
            sent += 110
            n += 1
        except BufferError:
            producer.poll(0.05)
    producer.flush(120)


def alter_topic(bootstrap, topic, configs):
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config=configs)
    # alter_configs (not incremental): replaces the overrides, dropping the lag.
    for future in admin.alter_configs([resource]).values():
        future.result(30)


def latency_run(cleaner, dirty_mb, requests):
    from tests.integration.clients import create_topic

    with tempfile.TemporaryDirectory(prefix="cleaner-lat-") as tmp:
        settings = {"log.cleaner.enable": str(cleaner).lower(), "log.cleaner.backoff.ms": "200"}
        broker = BrokerProcess(os.path.join(tmp, "data"), settings=settings).start()
        try:
            create_topic(broker.bootstrap, "lat", partitions=1)
            create_topic(
                broker.bootstrap,
                "dirty",
                partitions=1,
                config={
                    "cleanup.policy": "compact",
                    "segment.bytes": str(8 << 20),
                    "min.compaction.lag.ms": str(10**12),
                },
            )
            fill(broker.bootstrap, "dirty", dirty_mb)
            alter_topic(
                broker.bootstrap,
                "dirty",
                {"cleanup.policy": "compact", "segment.bytes": str(8 << 20)},
            )
            started = time.perf_counter()
            latencies = produce_latencies(broker.bootstrap, requests)
            took = time.perf_counter() - started
            deadline = time.monotonic() + 120
            while cleaner and "cleaned dirty-0" not in broker.log():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        finally:
            broker.stop()
            log = broker.log()
    passes = [line for line in log.splitlines() if "cleaned dirty-0" in line]
    return latencies, took, passes


def summary(latencies):
    ordered = sorted(latencies)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    return statistics.median(ordered), p99, ordered[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--keys", type=int, default=10000)
    parser.add_argument("--dirty-mb", type=int, default=48)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    for name, codec_id in () if args.skip_throughput else (("none", 0), ("lz4", 3)):
        dirty, result, wall, cpu, records = throughput(args.mb, args.keys, codec_id)
        print(
            f"clean {name}: {dirty / 1e6:.1f} MB dirty ({records} records, {args.keys} keys) -> "
            f"{result.bytes_written / 1e6:.2f} MB in {wall:.2f} s = {dirty / 1e6 / wall:.1f} MB/s "
            f"(CPU {cpu:.2f} s, {result.records_removed} records removed)"
        )
    for cleaner in () if args.skip_latency else (False, True):
        latencies, took, passes = latency_run(cleaner, args.dirty_mb, args.requests)
        p50, p99, worst = summary(latencies)
        print(
            f"produce, cleaner {'running' if cleaner else 'off'}: {len(latencies)} requests in "
            f"{took:.1f} s, p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms"
        )
        for line in passes:
            print("   ", line.split("] ", 1)[-1])


if __name__ == "__main__":
    main()
