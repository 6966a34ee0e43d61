"""Avro serialization and broker-side schema validation costs.

1. Serialize / deserialize records/s: pluglog's AvroSerializer vs
   confluent-kafka's AvroSerializer / AvroDeserializer, both over a real
   broker's registry (``--http``); ids are cached after the first record, so
   the loop times the serializers, not HTTP.
2. Validation cost on the produce path, in process: ``Partition.append`` of
   the same batches with ``schema_check`` None (validation off) and on.
3. Validation cost end to end: a confluent-kafka producer (acks=1) sending
   framed records to a topic with ``confluent.value.schema.validation`` off
   and on.

Run: ``python3 bench/avro_bench.py [--records N]`` (keep N small on shared
machines: the default 100,000 runs in well under a minute).
"""

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "user", "type": "string"},
            {"name": "score", "type": "double"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }
)


def event(i):
    return {
        "id": i,
        "user": f"user-{i % 1000}",
        "score": i * 0.5,
        "tags": ["a", "b"],
        "note": None if i % 2 else "n",
    }


def rate(n, seconds):
    return f"{n / seconds:,.0f}"


def serializers(url, n):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from pluglog.serialization.avro import AvroSerializer as Ours
    from pluglog.serialization.client import RegistryClient

    values = [event(i) for i in range(n)]
    ours = Ours(RegistryClient(url), schema=SCHEMA)
    ctx = SerializationContext("bench", MessageField.VALUE)
    theirs = AvroSerializer(SchemaRegistryClient({"url": url}), SCHEMA)
    theirs_de = AvroDeserializer(SchemaRegistryClient({"url": url}))
    ours.serialize("bench", values[0])
    theirs(values[0], ctx)
    rows = []
    start = time.perf_counter()
    ours_data = [ours.serialize("bench", v) for v in values]
    rows.append(("serialize", "pluglog AvroSerializer", n, time.perf_counter() - start))
    start = time.perf_counter()
    theirs_data = [theirs(v, ctx) for v in values]
    rows.append(("serialize", "confluent-kafka AvroSerializer", n, time.perf_counter() - start))
    assert ours_data == theirs_data  # byte-identical framing and encoding
    start = time.perf_counter()
    decoded = [ours.deserialize("bench", d) for d in ours_data]
    rows.append(("deserialize", "pluglog AvroSerializer", n, time.perf_counter() - start))
    theirs_de(theirs_data[0], ctx)
    start = time.perf_counter()
    decoded2 = [theirs_de(d, ctx) for d in theirs_data]
    rows.append(
        ("deserialize", "confluent-kafka AvroDeserializer", n, time.perf_counter() - start)
    )
    assert decoded == decoded2 == values
    return rows, ours_data


def in_process(framed, batch_size):
    from types import SimpleNamespace

    from pluglog.broker.partition import Partition
    from pluglog.config import TopicConfig
    from pluglog.protocol.records import Record, build_batch
    from pluglog.serialization.framing import schema_id_of
    from pluglog.serialization.validation import SchemaCheck
    from pluglog.storage.memory import MemoryPartitionLog

    batches = [
        bytes(
            build_batch(
                [Record(None, v, (), 0) for v in framed[i : i + batch_size]], base_timestamp=0
            )
        )
        for i in range(0, len(framed), batch_size)
    ]
    registry = SimpleNamespace(ids={schema_id_of(framed[0]): None})
    out = []
    for label, check in (
        ("off (schema_check None)", None),
        ("on", SchemaCheck(SimpleNamespace(schema_registry=registry), "t", False, True)),
    ):
        best = None
        for _ in range(3):
            part = Partition("t", 0, MemoryPartitionLog("t", 0, TopicConfig()), TopicConfig())
            part.become_leader(0, (0,), (0,), 0)
            part.schema_check = check
            start = time.perf_counter()
            for b in batches:
                part.append(b, 0)
            elapsed = time.perf_counter() - start
            best = elapsed if best is None else min(best, elapsed)
        out.append((label, len(framed), len(batches), best))
    return out


def end_to_end(broker, framed):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    out = []
    for label, on in (("off", "false"), ("on", "true")):
        topic = f"bench-validation-{on}"
        admin.create_topics(
            [NewTopic(topic, 1, 1, config={"confluent.value.schema.validation": on})]
        )[topic].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "linger.ms": 5})
        failed = []

        def delivered(err, _msg, failed=failed):
            if err is not None:
                failed.append(err)

        start = time.perf_counter()
        for value in framed:
            while True:
                try:
                    producer.produce(topic, value, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.flush(120)
        elapsed = time.perf_counter() - start
        assert not failed, failed[:3]
        out.append((label, len(framed), elapsed))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=500)
    args = parser.parse_args()
    from tests.integration.registry_helpers import HttpBroker

    with tempfile.TemporaryDirectory() as tmp:
        broker = HttpBroker(os.path.join(tmp, "data")).start()
        try:
            rows, framed = serializers(broker.url, args.records)
            print("| operation | implementation | records | seconds | records/s |")
            print("|---|---|---|---|---|")
            for op, impl, n, s in rows:
                print(f"| {op} | {impl} | {n:,} | {s:.2f} | {rate(n, s)} |")
            print()
            print("| Partition.append, validation | records | batches | seconds | records/s |")
            print("|---|---|---|---|---|")
            for label, n, b, s in in_process(framed, args.batch_size):
                print(f"| {label} | {n:,} | {b:,} | {s:.3f} | {rate(n, s)} |")
            print()
            print(
                "| confluent-kafka producer (acks=1), validation | records | seconds | records/s |"
            )
            print("|---|---|---|---|")
            for label, n, s in end_to_end(broker, framed):
                print(f"| {label} | {n:,} | {s:.2f} | {rate(n, s)} |")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
