"""``twistd pluglog --workers 2``: two broker processes on one host, one unit.

The supervisor (the twistd process) starts two workers, brokers 0 and 1 of
one ZooKeeper cluster on consecutive ports and their own data dirs under
``--data-dir``. A confluent-kafka producer and consumer bootstrapped from
worker 0 use both (partitions are led by each). A SIGKILLed worker is
started again by the supervisor and serves again, with every acknowledged
record still readable; SIGTERM to the supervisor stops both workers cleanly, then
the unit. Bad ``--workers`` values are one-line usage errors.
"""

import os
import re
import signal
import time

import confluent_kafka
import pytest

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from tests.broker_process import BrokerProcess, free_port
from tests.integration.clients import create_topic

TOPIC = "w"


def brokers(port, topic=None):
    """A Metadata answer from ``port``: every topic, or ``topic`` (never auto-created)."""
    body = {"topics": None if topic is None else [{"name": topic}]}
    body["allow_auto_topic_creation"] = False
    with BlockingClient("127.0.0.1", port, timeout=10) as client:
        return client.request(codec.METADATA, 4, body)


def wait_for(predicate, timeout=60, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def produce(bootstrap, values):
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(TOPIC, value)
    assert producer.flush(60) == 0


def consume_all(bootstrap, count):
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"w{time.monotonic()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([TOPIC])
    seen = []
    deadline = time.monotonic() + 60
    while len(seen) < count and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.5):
            if not msg.error():
                seen.append(msg.value())
    consumer.close()
    return seen


def worker_pid(parent, number):
    found = re.findall(rf"worker {number} started \(pid (\d+)\)", parent.log())
    return int(found[-1]) if found else None


def test_two_workers_serve_as_one_unit_and_come_back_when_killed(tmp_path, zk_connect):
    port = free_port()
    free_port()  # worker 1 takes port + 1: make sure nothing holds it
    parent = BrokerProcess(
        tmp_path / "data",
        port=port,
        settings={"zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": "4000"},
        extra_args=["--coordinator", "zookeeper", "--workers", "2"],
    ).start(timeout=60)
    try:
        meta = wait_for(
            lambda: (m := brokers(port)) and len(m["brokers"]) == 2 and m,
            what="both workers registered",
        )
        assert sorted((b["node_id"], b["port"]) for b in meta["brokers"]) == [
            (0, port),
            (1, port + 1),
        ]
        assert sorted(os.listdir(tmp_path / "data")) == ["worker-0", "worker-1"]
        create_topic(parent.bootstrap, TOPIC, partitions=4)
        leaders = wait_for(
            lambda: {p["leader_id"] for p in brokers(port, TOPIC)["topics"][0]["partitions"]},
            what="leaders",
        )
        assert leaders == {0, 1}  # both workers lead partitions
        first = [f"a{i}".encode() for i in range(400)]
        produce(parent.bootstrap, first)

        victim = worker_pid(parent, 1)
        os.kill(victim, signal.SIGKILL)
        wait_for(
            lambda: worker_pid(parent, 1) not in (None, victim),
            what="worker 1 restarted",
        )
        assert "worker 1 ended (signal 9)" in parent.log()
        wait_for(
            lambda: (
                all(p["leader_id"] in (0, 1) for p in brokers(port)["topics"][0]["partitions"])
                and len(brokers(port)["brokers"]) == 2
            ),
            timeout=90,
            what="worker 1 back in the cluster",
        )
        second = [f"b{i}".encode() for i in range(400)]
        produce(parent.bootstrap, second)
        assert sorted(consume_all(parent.bootstrap, 800)) == sorted(first + second)
    finally:
        parent.stop(timeout=90)
    # twistd ends with the signal that stopped it, after a clean shutdown;
    # each worker stopped cleanly first.
    assert parent.proc.returncode == -signal.SIGTERM
    log = parent.log()
    assert log.count("pluglog broker stopped cleanly") == 2
    assert "worker 0 stopped" in log and "worker 1 stopped" in log


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workers", "0"], "--workers: must be >= 1, got '0'"),
        (["--workers", "two"], "--workers: expected an integer, got 'two'"),
        (["--workers", "2"], "--workers 2 needs --coordinator zookeeper"),
    ],
)
def test_bad_workers_values_are_one_line_errors(tmp_path, args, message):
    exited = BrokerProcess(tmp_path / "data", extra_args=args).run_until_exit()
    assert exited.returncode == 2
    assert message in exited.stderr.strip().splitlines()[0]
    assert "Traceback" not in exited.stderr
