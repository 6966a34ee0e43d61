"""Produce and consume with real Kafka clients, normalised for comparison.

Every record is ``(partition, key, value, headers)`` with bytes or None for key
and value and a list of ``(str, bytes)`` headers, so records written by one
client can be compared with what another client reads.
"""

import asyncio
import json
import subprocess
import time

import confluent_kafka
import kafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = {
    "kcat": ["none", "gzip", "snappy", "lz4", "zstd"],
    "confluent": ["none", "gzip", "snappy", "lz4", "zstd"],
    "kafka-python": [None, "gzip", "snappy", "lz4", "zstd"],
    "aiokafka": [None, "gzip", "snappy", "lz4", "zstd"],
}


def make_records(count, partitions=3, seed=0, kcat=False):
    """Deterministic records with keys, null keys/values, headers.

    ``kcat=True`` gives every record the same headers, since kcat sets
    headers per run rather than per record."""
    records = []
    for i in range(count):
        n = i + seed
        key = None if n % 10 == 0 else f"key-{n}".encode()
        value = None if n % 7 == 0 and key is not None else (f"value-{n}-" * (n % 5 + 1)).encode()
        headers = [("idx", str(n).encode())]
        if n % 3 == 0:
            headers.append(("empty", b""))
        if kcat:
            headers = [("producer", b"kcat"), ("run", b"matrix")]
        records.append((n % partitions, key, value, headers))
    return records


def create_topic(bootstrap, topic, partitions=3, config=None):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})]
    )
    futures[topic].result(timeout=30)


def create_topic_kafka_python(bootstrap, topic, partitions=3):
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([KpNewTopic(topic, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()


def create_topic_aiokafka(bootstrap, topic, partitions=3):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as AioNewTopic

    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics(
                [AioNewTopic(topic, num_partitions=partitions, replication_factor=1)]
            )
        finally:
            await admin.close()

    asyncio.run(run())


def create_topic_kcat(bootstrap, topic, partitions=3):
    """kcat has no admin API: its metadata request auto-creates the topic with
    the broker's num.partitions, which the matrix broker sets to ``partitions``."""
    out = _kcat(bootstrap, "-L", "-t", topic, "-J")
    created = json.loads(out)["topics"][0]
    assert len(created["partitions"]) == partitions, created


CREATORS = {
    "kcat": create_topic_kcat,
    "confluent": create_topic,
    "kafka-python": create_topic_kafka_python,
    "aiokafka": create_topic_aiokafka,
}


def by_partition(records):
    out = {}
    for partition, key, value, headers in records:
        out.setdefault(partition, []).append((key, value, headers))
    return out


# ---- producers ---------------------------------------------------------------


def produce_confluent(bootstrap, topic, records, compression="none", **extra):
    errors = []
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": compression,
            "linger.ms": 5,
            **extra,
        }
    )

    def report(err, msg):
        if err is not None:
            errors.append(err)

    for partition, key, value, headers in records:
        while True:
            try:
                producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    headers=headers,
                    on_delivery=report,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} records not delivered"
    assert not errors, errors[:3]


def produce_kafka_python(bootstrap, topic, records, compression=None, **extra):
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, compression_type=compression, linger_ms=5, **extra
    )
    futures = [
        producer.send(topic, value=value, key=key, partition=partition, headers=headers)
        for partition, key, value, headers in records
    ]
    producer.flush(60)
    for future in futures:
        future.get(timeout=30)
    producer.close()


def produce_aiokafka(bootstrap, topic, records, compression=None):
    async def run():
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, compression_type=compression, linger_ms=5
        )
        await producer.start()
        try:
            futures = []
            for partition, key, value, headers in records:
                futures.append(
                    await producer.send(
                        topic, value=value, key=key, partition=partition, headers=headers
                    )
                )
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    asyncio.run(run())


def _kcat(bootstrap, *args, data=None):
    result = subprocess.run(
        ["kcat", "-b", bootstrap, *args], input=data, capture_output=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout.decode()


def produce_kcat(bootstrap, topic, records, compression="none"):
    """One kcat run per partition: ``key:value`` lines, -Z turns empty into null.

    kcat sets headers per run, not per record, so the records given must share
    one header list (``make_records(..., kcat=True)`` builds such records).
    """
    headers = records[0][3]
    assert all(r[3] == headers for r in records), "kcat headers are per run"
    header_args = [arg for k, v in headers for arg in ("-H", f"{k}={v.decode()}")]
    for partition, chunk in sorted(by_partition(records).items()):
        lines = b"".join((key or b"") + b":" + (value or b"") + b"\n" for key, value, _ in chunk)
        _kcat(
            bootstrap,
            "-P",
            "-t",
            topic,
            "-p",
            str(partition),
            "-K:",
            "-Z",
            "-z",
            compression,
            *header_args,
            data=lines,
        )


PRODUCERS = {
    "kcat": produce_kcat,
    "confluent": produce_confluent,
    "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka,
}


# ---- consumers ---------------------------------------------------------------


def _norm_headers(headers):
    return [(k, bytes(v) if v is not None else None) for k, v in (headers or [])]


def consume_confluent(bootstrap, topic, partitions, expected, timeout=60):
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"assign-{topic}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(partitions)
        ]
    )
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    raise AssertionError(f"consume error: {msg.error()}")
                out.append((msg.partition(), msg.key(), msg.value(), _norm_headers(msg.headers())))
    finally:
        consumer.close()
    return out


def consume_kafka_python(bootstrap, topic, partitions, expected, timeout=60):
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [kafka.TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for tp_records in consumer.poll(timeout_ms=500).values():
                for msg in tp_records:
                    out.append((msg.partition, msg.key, msg.value, _norm_headers(msg.headers)))
    finally:
        consumer.close()
    return out


def consume_aiokafka(bootstrap, topic, partitions, expected, timeout=60):
    async def run():
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        tps = [AioTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        out = []
        deadline = time.monotonic() + timeout
        try:
            while len(out) < expected and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for msgs in batches.values():
                    for msg in msgs:
                        out.append((msg.partition, msg.key, msg.value, _norm_headers(msg.headers)))
        finally:
            await consumer.stop()
        return out

    return asyncio.run(run())


def consume_kcat(bootstrap, topic, partitions, expected, timeout=60):
    out = _kcat(bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-J")
    records = []
    for line in out.splitlines():
        msg = json.loads(line)
        flat = msg.get("headers") or []
        headers = [(flat[i], flat[i + 1].encode()) for i in range(0, len(flat), 2)]
        key = None if msg["key"] is None else msg["key"].encode()
        value = None if msg["payload"] is None else msg["payload"].encode()
        records.append((msg["partition"], key, value, headers))
    return records


CONSUMERS = {
    "kcat": consume_kcat,
    "confluent": consume_confluent,
    "kafka-python": consume_kafka_python,
    "aiokafka": consume_aiokafka,
}


# ---- pluglog's own Twisted client (in a subprocess: it runs a reactor) -------


def _runner(*args, data=None, timeout=120):
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root)
    result = subprocess.run(
        [sys.executable, "-m", "tests.integration.twisted_runner", *args],
        input=data,
        capture_output=True,
        timeout=timeout,
        check=False,
        cwd=root,
        env=env,
        text=True,
    )
    assert result.returncode == 0, f"twisted_runner {args[0]} failed: {result.stderr[-2000:]}"
    return result.stdout


def _latin(data):
    return None if data is None else bytes(data).decode("latin-1")


def produce_pluglog(bootstrap, topic, records, compression="none", *extra):
    lines = "".join(
        json.dumps([p, _latin(k), _latin(v), [[n, _latin(hv)] for n, hv in h]]) + "\n"
        for p, k, v, h in records
    )
    return json.loads(_runner("produce", bootstrap, topic, compression, *extra, data=lines))


def consume_pluglog(bootstrap, topic, partitions, expected, timeout=60):
    out = _runner("consume", bootstrap, topic, str(partitions), str(expected), str(timeout))
    records = []
    for line in out.splitlines():
        p, k, v, h = json.loads(line)
        enc = lambda s: None if s is None else s.encode("latin-1")  # noqa: E731
        records.append((p, enc(k), enc(v), [(n, enc(hv)) for n, hv in h]))
    return records


CODECS["pluglog"] = ["none", "gzip", "snappy", "lz4", "zstd"]
PRODUCERS["pluglog"] = produce_pluglog
CONSUMERS["pluglog"] = consume_pluglog
CREATORS["pluglog"] = create_topic
