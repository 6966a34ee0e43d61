"""Transactions across clients and the CLI, against the real broker process.

- kafka-python's transactional producer commits and aborts; confluent-kafka's
  and kafka-python's read_committed consumers see the committed records
  only, confluent-kafka's read_uncommitted consumer the aborted ones too, and
  kcat with ``-X isolation.level=read_committed`` agrees with the first.
- ``pluglog transactions list|describe --json`` show a transaction a
  confluent-kafka producer left open (its process exited without ending
  it); ``pluglog transactions abort`` ends it, after which a read_committed
  consumer gets past it to what was committed later, and
  ``pluglog consume --isolation-level`` prints what each isolation sees.
"""

import json
import subprocess
import sys
import time

import confluent_kafka
import kafka

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from tests.broker_process import ROOT
from tests.integration.clients import create_topic

#: A transaction this test leaves open must not time out while it runs.
OPEN_TIMEOUT_MS = 120_000


def read(bootstrap, topic, isolation, partitions=1, idle_polls=4, at_least=0):
    """Values confluent-kafka's consumer at ``isolation`` reads from the
    beginning: until ``at_least`` arrived and then ``idle_polls`` empty polls."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{topic}-{isolation}-{time.monotonic()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    idle = 0
    deadline = time.monotonic() + 30
    try:
        while idle < idle_polls and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                idle += len(got) >= at_least
                continue
            assert not msg.error(), msg.error()
            got.append(msg.value().decode())
    finally:
        consumer.close()
    return got


def read_kafka_python(bootstrap, topic, at_least):
    """Values kafka-python's read_committed consumer reads from the beginning."""
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    parts = [kafka.TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    got = []
    idle = 0
    deadline = time.monotonic() + 30
    try:
        while idle < 3 and time.monotonic() < deadline:
            batches = consumer.poll(timeout_ms=500)
            if not batches:
                idle += len(got) >= at_least
            for records in batches.values():
                got += [r.value.decode() for r in records]
    finally:
        consumer.close()
    return got


def cli(broker, *args):
    result = subprocess.run(
        [sys.executable, "-m", "pluglog.cli.main", "-b", broker.bootstrap, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=90,
        check=False,
    )
    return result


def test_kafka_python_commit_abort_seen_by_confluent_and_kcat(shared_broker):
    topic = "tx-kp"
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    producer = kafka.KafkaProducer(
        bootstrap_servers=shared_broker.bootstrap, transactional_id="kp-1", linger_ms=5
    )
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(20):
        producer.send(topic, f"kp-c{i}".encode(), partition=i % 2)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(7):
        producer.send(topic, f"kp-a{i}".encode(), partition=i % 2)
    producer.flush()  # in the log before the abort
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send(topic, b"kp-last", partition=0)
    producer.commit_transaction()
    producer.close()

    committed = sorted([f"kp-c{i}" for i in range(20)] + ["kp-last"])
    aborted = sorted(f"kp-a{i}" for i in range(7))
    boot = shared_broker.bootstrap
    assert sorted(read(boot, topic, "read_committed", 2, at_least=21)) == committed
    assert sorted(read(boot, topic, "read_uncommitted", 2, at_least=28)) == sorted(
        committed + aborted
    )
    assert sorted(read_kafka_python(boot, topic, at_least=21)) == committed
    kcat = subprocess.run(
        ["kcat", "-b", boot, "-C", "-t", topic, "-o", "beginning", "-e", "-q"]
        + ["-X", "isolation.level=read_committed"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert kcat.returncode == 0, kcat.stderr.decode(errors="replace")
    assert sorted(kcat.stdout.decode().splitlines()) == committed


# A producer that leaves its transaction open: it flushes (its records are in
# the log), then its process ends without EndTxn.
LEAVE_OPEN = """
import os, sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "left-open",
              "transaction.timeout.ms": int(sys.argv[3])})
p.init_transactions(30)
p.begin_transaction()
for i in range(5):
    p.produce(sys.argv[2], value=b"hanging-%d" % i, partition=0)
assert p.flush(30) == 0
os._exit(0)
"""


def test_cli_lists_describes_and_aborts_a_transaction_left_open(shared_broker):
    topic = "tx-open"
    boot = shared_broker.bootstrap
    create_topic(boot, topic, partitions=1)
    subprocess.run(
        [sys.executable, "-c", LEAVE_OPEN, boot, topic, str(OPEN_TIMEOUT_MS)],
        check=True,
        timeout=60,
        cwd=ROOT,
    )
    later = confluent_kafka.Producer({"bootstrap.servers": boot, "transactional.id": "later"})
    later.init_transactions(30)
    later.begin_transaction()
    for i in range(3):
        later.produce(topic, value=f"later-{i}".encode(), partition=0)
    later.commit_transaction(30)

    listed = cli(shared_broker, "transactions", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    states = {t["transactional_id"]: t for t in json.loads(listed.stdout)}
    assert states["left-open"]["state"] == "Ongoing"
    assert states["later"]["state"] in ("CompleteCommit", "PrepareCommit")
    only_open = cli(shared_broker, "transactions", "list", "--json", "--state", "Ongoing")
    assert [t["transactional_id"] for t in json.loads(only_open.stdout)] == ["left-open"]
    bogus = cli(shared_broker, "transactions", "list", "--state", "Bogus")
    assert bogus.returncode == 1
    assert "unknown --state Bogus" in bogus.stderr
    described = cli(
        shared_broker, "transactions", "describe", "--transactional-id", "left-open", "--json"
    )
    assert described.returncode == 0, described.stderr
    info = json.loads(described.stdout)
    assert info["state"] == "Ongoing"
    assert info["partitions"] == [f"{topic}-0"]
    assert info["timeout_ms"] == OPEN_TIMEOUT_MS
    assert info["duration_ms"] >= 0

    # The open transaction holds the last stable offset at its first record:
    # read_committed sees nothing, not even what "later" committed after it.
    assert read(boot, topic, "read_committed", idle_polls=3) == []
    aborted = cli(
        shared_broker, "transactions", "abort", "--transactional-id", "left-open", "--json"
    )
    assert aborted.returncode == 0, aborted.stderr
    result = json.loads(aborted.stdout)
    assert result["previous_state"] == "Ongoing"
    assert result["state"] in ("CompleteAbort", "Empty")
    assert result["producer_epoch"] > result["aborted_producer_epoch"]
    assert read(boot, topic, "read_committed", at_least=3) == [f"later-{i}" for i in range(3)]

    committed = cli(
        shared_broker, "consume", topic, "--from-beginning", "-e",
        "--isolation-level", "read_committed",
    )  # fmt: skip
    assert committed.returncode == 0, committed.stderr
    assert committed.stdout.splitlines() == [f"later-{i}" for i in range(3)]
    everything = cli(shared_broker, "consume", topic, "--from-beginning", "-e")
    assert everything.stdout.splitlines() == [f"hanging-{i}" for i in range(5)] + [
        f"later-{i}" for i in range(3)
    ]  # the markers are not records
    again = cli(shared_broker, "transactions", "abort", "--transactional-id", "left-open")
    assert again.returncode == 1
    assert "no open transaction" in again.stderr
    unknown = cli(shared_broker, "transactions", "describe", "--transactional-id", "nobody")
    assert (unknown.returncode, unknown.stderr.strip()) == (
        1,
        "pluglog: transactional id 'nobody' not found",
    )


def test_add_offsets_before_any_group_exists(broker):
    # The first transaction of a fresh broker may send its offsets before any
    # group made __consumer_offsets: the coordinator creates it.
    with BlockingClient("127.0.0.1", broker.port) as client:
        body = {
            "transactional_id": "offsets-first",
            "transaction_timeout_ms": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        }
        deadline = time.monotonic() + 20
        while True:  # the coordinator loads __transaction_state first
            init = client.request(codec.INIT_PRODUCER_ID, 4, body)
            if init["error_code"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert init["error_code"] == 0
        answer = client.request(
            codec.ADD_OFFSETS_TO_TXN,
            3,
            {
                "transactional_id": "offsets-first",
                "producer_id": init["producer_id"],
                "producer_epoch": init["producer_epoch"],
                "group_id": "no-group-yet",
            },
        )
    assert answer["error_code"] == 0
