"""Start-up never dies on its own data (offline partitions, corruption at a
clean start) and never touches another broker's: the data dir's lock and its
cluster identity (meta.properties) refuse, in one line, and write nothing."""

import glob
import json
import os
import shutil

import confluent_kafka

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from pluglog.datadir import meta_properties
from pluglog.errors import KAFKA_STORAGE_ERROR
from pluglog.protocol.records import Record, build_batch
from tests.broker_process import BrokerProcess, assert_refused
from tests.integration.clients import (
    consume_confluent,
    create_topic,
    make_records,
    produce_confluent,
)


def _produce(client, topic, partition, values):
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [
                    {
                        "index": partition,
                        "records": build_batch([Record(value=v) for v in values], 1),
                    }
                ],
            }
        ],
    }
    response = client.request(codec.PRODUCE, 7, body)
    return response["responses"][0]["partition_responses"][0]


def _latest(client, topic, partition):
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}
        ],
    }
    response = client.request(codec.LIST_OFFSETS, 2, body)
    return response["topics"][0]["partitions"][0]["offset"]


def test_unopenable_partition_is_offline_and_the_rest_are_served(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    create_topic(broker.bootstrap, "split", partitions=2)
    produce_confluent(broker.bootstrap, "split", make_records(100, partitions=2))
    broker.stop()
    # Partition 1's segment file becomes something the broker cannot open.
    (segment,) = glob.glob(os.path.join(broker.data_dir, "split-1", "*.log"))
    os.unlink(segment)
    os.mkdir(segment)
    broker.start()
    try:
        assert "split-1 is offline" in broker.log()
        with BlockingClient.from_bootstrap(broker.bootstrap) as client:
            meta = client.request(codec.METADATA, 8, {"topics": [{"name": "split"}]})
            parts = {p["partition_index"]: p for p in meta["topics"][0]["partitions"]}
            assert parts[0]["error_code"] == 0
            assert parts[1]["error_code"] == KAFKA_STORAGE_ERROR
            assert parts[1]["offline_replicas"] == [0]
            assert _produce(client, "split", 1, [b"x"])["error_code"] == KAFKA_STORAGE_ERROR
            (fetched,) = client.fetch("split", {1: 0})
            assert fetched["error_code"] == KAFKA_STORAGE_ERROR
            assert _produce(client, "split", 0, [b"y"])["error_code"] == 0
            (fetched,) = client.fetch("split", {0: 0})
            assert fetched["error_code"] == 0 and fetched["high_watermark"] == 51
        # Fix the cause: the partition comes back on the next start, empty
        # (its only segment was destroyed), and the data of partition 0 is intact.
        broker.stop()
        os.rmdir(segment)
        broker.start()
        with BlockingClient.from_bootstrap(broker.bootstrap) as client:
            assert _produce(client, "split", 1, [b"z"])["error_code"] == 0
            assert _latest(client, "split", 0) == 51
    finally:
        broker.stop()


def test_corrupt_byte_mid_segment_after_clean_stop_is_cut_and_logged(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    create_topic(broker.bootstrap, "rot", partitions=1)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1}
    )
    for i in range(10_000):
        producer.produce("rot", value=f"record-{i:05d}".encode(), partition=0)
        if i % 500 == 0:
            producer.flush(30)
    assert producer.flush(30) == 0
    broker.stop()
    (segment,) = glob.glob(os.path.join(broker.data_dir, "rot-0", "*.log"))
    size = os.path.getsize(segment)
    with open(segment, "r+b") as handle:
        handle.seek(size // 2)
        byte = handle.read(1)
        handle.seek(size // 2)
        handle.write(bytes([byte[0] ^ 0xFF]))
    shutil.copy(segment, str(tmp_path / "damaged.log"))
    broker.start()
    try:
        log = broker.log()
        assert "recovered rot-0 at a clean start" in log
        with BlockingClient.from_bootstrap(broker.bootstrap) as client:
            end = _latest(client, "rot", 0)
        assert 4000 < end < 6000  # the batch holding the damaged byte and all after it
        # Consumers read everything up to the high watermark, none stall short of it.
        got = consume_confluent(broker.bootstrap, "rot", 1, end, timeout=30)
        assert [v for _, _, v, _ in got] == [f"record-{i:05d}".encode() for i in range(end)]
        # And the partition takes new records right after the cut.
        produce_confluent(broker.bootstrap, "rot", [(0, None, b"after", [])])
        with BlockingClient.from_bootstrap(broker.bootstrap) as client:
            assert _latest(client, "rot", 0) == end + 1
    finally:
        broker.stop()


def test_thousands_of_partitions_under_a_small_descriptor_limit(tmp_path):
    """2,000 partitions need ~6,000 descriptors if every segment stays open;
    under a 1,024 hard limit the broker creates, serves and restarts them."""
    broker = BrokerProcess(tmp_path / "data", nofile=(1024, 1024)).start()
    try:
        create_topic(broker.bootstrap, "wide", partitions=2000)
        records = [(p, None, f"v{p}".encode(), []) for p in range(0, 2000, 7)]
        produce_confluent(broker.bootstrap, "wide", records)
        open_fds = len(os.listdir(f"/proc/{broker.proc.pid}/fd"))
        assert open_fds < 700, open_fds
        broker.stop()
        broker.start()
        assert "Too many open files" not in broker.log()
        with BlockingClient.from_bootstrap(broker.bootstrap) as client:
            assert [_latest(client, "wide", p) for p in (0, 7, 1995, 1999)] == [1, 1, 1, 0]
            (fetched,) = client.fetch("wide", {1995: 0})
            assert fetched["error_code"] == 0 and fetched["records"]
    finally:
        broker.stop()


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one(tmp_path):
    """A soft limit of 1,024 (a common default) would leave segment files
    512 descriptors; the broker takes the hard limit, as the JVM does for Kafka."""
    broker = BrokerProcess(tmp_path / "data", nofile=(1024, 4096)).start()
    try:
        with open(f"/proc/{broker.proc.pid}/limits") as handle:
            (line,) = [x for x in handle if x.startswith("Max open files")]
        assert line.split()[3:5] == ["4096", "4096"], line
        assert "open-file limit raised from 1024 to 4096" in broker.log()
    finally:
        broker.stop()


def _snapshot(directory):
    return {
        os.path.relpath(os.path.join(root, name), directory): os.stat(
            os.path.join(root, name)
        ).st_mtime_ns
        for root, dirs, files in os.walk(directory)
        for name in dirs + files
    }


def test_second_broker_on_a_data_dir_is_refused_and_writes_nothing(tmp_path):
    data = tmp_path / "data"
    first = BrokerProcess(data).start()
    try:
        create_topic(first.bootstrap, "held", partitions=1)
        produce_confluent(first.bootstrap, "held", make_records(50, partitions=1))
        before = _snapshot(data)
        exited = BrokerProcess(data).run_until_exit()
        assert_refused(
            exited,
            f"data dir {data} is in use by another broker process (lock {data}/.lock held",
        )
        assert _snapshot(data) == before
        # The first broker still serves.
        produce_confluent(first.bootstrap, "held", [(0, None, b"after", [])])
        with BlockingClient.from_bootstrap(first.bootstrap) as client:
            assert _latest(client, "held", 0) == 51
    finally:
        first.kill()
    # Crashed: no clean-shutdown marker, so the next start recovers the log.
    assert not (data / ".pluglog_cleanshutdown").exists()
    again = BrokerProcess(data, port=first.port).start()
    try:
        assert "recovered held-0 after an unclean shutdown" in again.log()
    finally:
        again.stop()


def test_local_broker_refuses_a_cluster_members_data_dir(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.properties").write_text(meta_properties("zkClusterId", 1))
    exited = BrokerProcess(data).run_until_exit()
    last = assert_refused(
        exited, f"data dir {data} belongs to cluster zkClusterId (--coordinator zookeeper)"
    )
    assert "start it with --coordinator zookeeper" in last
    assert f"remove {data}/meta.properties" in last
    # Nothing of its own written: no metadata, checkpoints or marker.
    assert sorted(os.listdir(data)) == [".lock", "meta.properties"]


def test_local_data_dir_carries_its_cluster_id(tmp_path):
    """A dir without meta.properties (older versions) starts and gets one; the
    cluster id stays the one in pluglog-metadata.json."""
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    broker.stop()
    meta = (data / "meta.properties").read_text()
    cluster_id = json.loads((data / "pluglog-metadata.json").read_text())["cluster_id"]
    assert f"cluster.id={cluster_id}" in meta and "pluglog.coordinator=local" in meta
    (data / "meta.properties").unlink()
    broker.start()
    try:
        assert f"cluster.id={cluster_id}" in (data / "meta.properties").read_text()
    finally:
        broker.stop()
