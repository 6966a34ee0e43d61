"""A consumer cycling through more partitions than the open-file budget holds.

The broker runs with ``log.max.open.files=40`` (a budget of 40 descriptors
for segment files) and serves a topic of 150 partitions: every fetch cycle
reopens files the budget closed. A real consumer (confluent-kafka, small
per-partition fetch sizes so it needs many fetch rounds over every
partition) reads every record back byte for byte, the broker's descriptors
stay bounded meanwhile, and its log shows no storage error.
"""

import os
import signal
import threading
import time

import confluent_kafka
import pytest

from tests.broker_process import BrokerProcess
from tests.integration.clients import create_topic, produce_confluent

pytestmark = pytest.mark.integration

PARTITIONS = 150
PER_PARTITION = 40
BUDGET = 40


SEGMENT_FILES = (".log", ".index", ".timeindex", ".txnindex")


def _stopped(pid):
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0] == "T"


def _segment_fds(pid, data_dir):
    """The broker's descriptors on segment files, counted with the broker
    stopped: listing /proc/PID/fd is not atomic, so a descriptor closed and
    another opened while the listing runs (every eviction here) can both be
    counted, one more than were ever open together."""
    os.kill(pid, signal.SIGSTOP)
    try:
        while not _stopped(pid):
            time.sleep(0.0005)
        count = 0
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{name}")
            except OSError:
                continue
            count += target.startswith(data_dir) and target.endswith(SEGMENT_FILES)
        return count
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_consumer_of_more_partitions_than_the_budget_reads_everything(tmp_path):
    broker = BrokerProcess(tmp_path / "data", settings={"log.max.open.files": str(BUDGET)})
    broker.start()
    try:
        create_topic(broker.bootstrap, "wide", partitions=PARTITIONS)
        expected = {
            p: [
                (f"k{p}-{i}".encode(), os.urandom(16) + f"p{p}i{i}".encode())
                for i in range(PER_PARTITION)
            ]
            for p in range(PARTITIONS)
        }
        records = [
            (p, key, value, [])
            for i in range(PER_PARTITION)
            for p in range(PARTITIONS)
            for key, value in [expected[p][i]]
        ]
        produce_confluent(broker.bootstrap, "wide", records, **{"linger.ms": 0})
        pid = broker.proc.pid
        data_dir = os.path.realpath(broker.data_dir)
        peak = [_segment_fds(pid, data_dir)]
        stop = threading.Event()

        def watch():
            while not stop.wait(0.02):
                peak[0] = max(peak[0], _segment_fds(pid, data_dir))

        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "open-files",
                "enable.auto.commit": False,
                # A few batches per partition per fetch: many rounds over
                # all 150 partitions, each past the 40-descriptor budget.
                "fetch.max.bytes": 10000,
                "message.max.bytes": 10000,
                "max.partition.fetch.bytes": 200,
                "log_level": 3,
            }
        )
        consumer.assign(
            [
                confluent_kafka.TopicPartition("wide", p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(PARTITIONS)
            ]
        )
        got = {}
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            count = 0
            while count < PARTITIONS * PER_PARTITION:
                msgs = consumer.consume(1000, 30)
                assert msgs, f"no record in 30 s after {count}"
                for msg in msgs:
                    assert msg.error() is None, msg.error()
                    got.setdefault(msg.partition(), []).append((msg.key(), msg.value()))
                    count += 1
        finally:
            consumer.close()
            stop.set()
            watcher.join()
        assert got == expected
        # The budget holds, and was used: segment files held at most 40
        # descriptors (queued answers hold none of their own), and the
        # cycle over 150 partitions filled it.
        assert BUDGET - 10 <= peak[0] <= BUDGET, peak[0]
        assert "Traceback" not in broker.log()
        assert "KafkaStorageError" not in broker.log()
    finally:
        broker.stop()
