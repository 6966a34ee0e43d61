"""Run pluglog's Twisted client in a subprocess, for interop and group tests.

``python -m tests.integration.twisted_runner produce BOOTSTRAP TOPIC CODEC``
reads JSON records ``[partition, key, value, headers]`` (bytes as latin-1
strings) from stdin and produces them, every record acknowledged or exit 1;
``consume BOOTSTRAP TOPIC PARTITIONS EXPECTED`` prints what it reads the same
way; ``avro-produce BOOTSTRAP TOPIC URL SCHEMA|latest`` and ``avro-consume
BOOTSTRAP TOPIC URL EXPECTED`` do JSON values as Confluent-framed Avro
through the schema registry at URL; ``member BOOTSTRAP GROUP TOPIC OUT`` is
a group member that appends each record it consumes to OUT (``partition
offset value``), commits after every batch and runs until SIGTERM/SIGKILL
(see test_client_group.py).
Each subcommand runs its own reactor, so tests need no reactor in-process.
"""

import json
import os
import signal
import sys

from twisted.internet import defer, task

from pluglog.client import Consumer, Producer, TopicPartition
from pluglog.client.errors import BrokerResponseError


def _b(text):
    return None if text is None else text.encode("latin-1")


def _s(data):
    return None if data is None else bytes(data).decode("latin-1")


@defer.inlineCallbacks
def produce(reactor, bootstrap, topic, codec, *extra):
    config = dict(item.split("=", 1) for item in extra)
    producer = Producer(
        reactor, bootstrap_servers=bootstrap, compression_type=codec, linger_ms=5, **config
    )
    yield producer.start()
    sends = []
    for line in sys.stdin:
        partition, key, value, headers = json.loads(line)
        sends.append(
            producer.send(
                topic,
                _b(value),
                key=_b(key),
                partition=partition,
                headers=[(name, _b(v)) for name, v in headers],
            )
        )
    results = yield defer.DeferredList(sends, consumeErrors=True)
    yield producer.stop()
    failed = [r for ok, r in results if not ok]
    if failed:
        print(f"{len(failed)} records failed: {failed[0].value}", file=sys.stderr)
        raise SystemExit(1)
    print(json.dumps([[m.partition, m.offset] for _, m in results]))


@defer.inlineCallbacks
def consume(reactor, bootstrap, topic, partitions, expected, timeout="60"):
    consumer = Consumer(reactor, bootstrap_servers=bootstrap, enable_auto_commit=False)
    yield consumer.start()
    tps = [TopicPartition(topic, p) for p in range(int(partitions))]
    consumer.assign(tps)
    yield consumer.seek_to_beginning(*tps)
    count = 0
    deadline = reactor.seconds() + float(timeout)
    while count < int(expected) and reactor.seconds() < deadline:
        batches = yield consumer.getmany(timeout_ms=500)
        for records in batches.values():
            for r in records:
                count += 1
                out = [r.partition, _s(r.key), _s(r.value), [[k, _s(v)] for k, v in r.headers]]
                sys.stdout.write(json.dumps(out) + "\n")
    yield consumer.stop()


@defer.inlineCallbacks
def member(reactor, bootstrap, group, topic, out_path, *extra):
    config = dict(item.split("=", 1) for item in extra)
    consumer = Consumer(
        reactor,
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **config,
    )
    stopping = []
    finished = defer.Deferred()

    def on_shutdown():
        # twistd-style graceful stop: SIGTERM stops the reactor, which waits
        # for this Deferred (the loop leaving the group) before it exits.
        stopping.append(True)
        return finished

    reactor.addSystemEventTrigger("before", "shutdown", on_shutdown)
    yield consumer.start()
    with open(out_path, "a", buffering=1) as out:
        out.write("started\n")
        while not stopping:
            batches = yield consumer.getmany(timeout_ms=200)
            if not batches:
                continue
            lines = []
            offsets = {}
            for tp, records in batches.items():
                lines += [f"{r.partition} {r.offset} {_s(r.value)}\n" for r in records]
                offsets[tp] = records[-1].offset + 1
            # Commit first, then record: a kill between the two loses the
            # line (the test notices), never doubles it. A commit refused by
            # a rebalance records nothing; the next owner reads them again.
            try:
                yield consumer.commit(offsets)
            except BrokerResponseError:
                continue
            out.write("".join(lines))
            os.fsync(out.fileno())
        yield consumer.stop()
        out.write("left\n")
    finished.callback(None)


def confluent_member(bootstrap, group, topic, out_path, *extra):
    """The same member loop with confluent-kafka (no reactor)."""
    import confluent_kafka

    config = dict(item.split("=", 1) for item in extra)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **config,
        }
    )
    stopping = []
    signal.signal(signal.SIGTERM, lambda *a: stopping.append(True))
    with open(out_path, "a", buffering=1) as out:
        started = []

        def on_assign(_consumer, _partitions):
            # "started" once in the group, as the Twisted member writes it
            # after start() has joined: the test produces when every member
            # has started, and a member still joining then may see the
            # others consume everything first (and get no share).
            if not started:
                started.append(True)
                out.write("started\n")

        consumer.subscribe([topic], on_assign=on_assign)
        while not stopping:
            msgs = [m for m in consumer.consume(500, 0.2) if m.error() is None]
            # Only partitions still assigned after consume() (a rebalance
            # inside it may have revoked some; their next owner reads those
            # records again), committed by explicit offsets: commit() without
            # them would skip a revoked partition and still record its lines.
            assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
            msgs = [m for m in msgs if (m.topic(), m.partition()) in assigned]
            if not msgs:
                continue
            last = {(m.topic(), m.partition()): m.offset() for m in msgs}
            offsets = [confluent_kafka.TopicPartition(t, p, o + 1) for (t, p), o in last.items()]
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
            except confluent_kafka.KafkaException:
                continue
            out.write("".join(f"{m.partition()} {m.offset()} {_s(m.value())}\n" for m in msgs))
            os.fsync(out.fileno())
        consumer.close()
        out.write("left\n")


@defer.inlineCallbacks
def avro_produce(reactor, bootstrap, topic, url, schema):
    """JSON values from stdin, Avro in Confluent's framing: ``schema`` is the
    writer schema (a provider object), or ``latest`` for the serializer
    plugin by name (the subject's latest version)."""
    if schema == "latest":
        serializer = "avro"
    else:
        from pluglog.serialization.avro import AvroSerializer
        from pluglog.serialization.client import RegistryClient

        serializer = AvroSerializer(RegistryClient(url), schema=schema)
    producer = Producer(
        reactor,
        bootstrap_servers=bootstrap,
        value_serializer=serializer,
        schema_registry_url=url,
    )
    yield producer.start()
    sends = [producer.send(topic, json.loads(line)) for line in sys.stdin]
    metas = yield defer.gatherResults(sends, consumeErrors=True)
    yield producer.stop()
    print(json.dumps([m.offset for m in metas]))


@defer.inlineCallbacks
def avro_consume(reactor, bootstrap, topic, url, expected):
    """Print each value of partition 0 as JSON, read with the avro plugin."""
    consumer = Consumer(
        reactor,
        bootstrap_servers=bootstrap,
        value_deserializer="avro",
        schema_registry_url=url,
        auto_offset_reset="earliest",
    )
    yield consumer.start()
    consumer.assign([TopicPartition(topic, 0)])
    got = 0
    deadline = reactor.seconds() + 60
    while got < int(expected) and reactor.seconds() < deadline:
        batches = yield consumer.getmany(timeout_ms=500)
        for records in batches.values():
            for r in records:
                got += 1
                sys.stdout.write(json.dumps(r.value) + "\n")
    yield consumer.stop()


COMMANDS = {
    "produce": produce,
    "consume": consume,
    "member": member,
    "avro-produce": avro_produce,
    "avro-consume": avro_consume,
}

if __name__ == "__main__" and sys.argv[1] == "confluent_member":
    confluent_member(*sys.argv[2:])
    raise SystemExit(0)

if __name__ == "__main__":
    task.react(COMMANDS[sys.argv[1]], sys.argv[2:])
