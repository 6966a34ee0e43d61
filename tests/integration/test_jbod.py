"""JBOD: a broker over several log dirs (``log.dirs``), each locked and
tied to the cluster on its own, each holding whole partitions with its own
checkpoints; new partitions go to the dir with the fewest."""

import os
import shutil
import time

from kafka.admin import KafkaAdminClient

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from pluglog.datadir import meta_properties, read_meta_properties
from pluglog.errors import KAFKA_STORAGE_ERROR
from pluglog.protocol.records import Record, build_batch
from pluglog.storage.filenames import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from pluglog.storage.manager import read_checkpoint
from tests.broker_process import BrokerProcess, assert_refused
from tests.integration.clients import (
    by_partition,
    consume_confluent,
    create_topic,
    make_records,
    produce_confluent,
)


def _jbod(tmp_path, count=2, **kwargs):
    dirs = [tmp_path / f"disk{i}" for i in range(count)]
    settings = {"log.dirs": ",".join(str(d) for d in dirs), **kwargs.pop("settings", {})}
    return BrokerProcess(dirs[0], settings=settings, **kwargs), dirs


def _partitions(directory, topic):
    return sorted(
        int(name.rsplit("-", 1)[1])
        for name in os.listdir(directory)
        if name.rsplit("-", 1)[0] == topic and os.path.isdir(os.path.join(directory, name))
    )


def test_partitions_spread_over_log_dirs_and_come_back_after_restart(tmp_path):
    broker, (a, b) = _jbod(tmp_path)
    broker.start()
    try:
        create_topic(broker.bootstrap, "spread", partitions=4)
        records = make_records(400, partitions=4)
        produce_confluent(broker.bootstrap, "spread", records)
        # The fewest-partitions rule alternates between two empty dirs.
        in_a, in_b = _partitions(a, "spread"), _partitions(b, "spread")
        assert len(in_a) == 2 and len(in_b) == 2
        assert sorted(in_a + in_b) == [0, 1, 2, 3]
        broker.stop()
        # Each dir: its own lock, the same identity, checkpoints naming its logs only.
        metas = [read_meta_properties(str(d)) for d in (a, b)]
        assert metas[0]["cluster.id"] and metas[0] == {**metas[1]}
        for directory, parts in ((a, in_a), (b, in_b)):
            assert (directory / ".lock").exists()
            assert (directory / ".pluglog_cleanshutdown").exists()
            for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT):
                entries = read_checkpoint(str(directory / name))
                assert sorted(p for (t, p) in entries if t == "spread") == parts
        broker.start()
        got = consume_confluent(broker.bootstrap, "spread", 4, len(records), timeout=30)
        assert by_partition(got) == by_partition(records)
        assert _partitions(a, "spread") == in_a and _partitions(b, "spread") == in_b
    finally:
        broker.stop()


def test_log_dir_of_another_cluster_is_refused(tmp_path):
    broker, (a, b) = _jbod(tmp_path)
    os.makedirs(b)
    (b / "meta.properties").write_text(meta_properties("someOtherCluster", 0, "local"))
    exited = broker.run_until_exit()
    assert_refused(exited, f"data dir {b} belongs to the single-node cluster someOtherCluster")
    assert not list(a.glob("*-0"))


def test_partition_in_two_log_dirs_is_refused_in_one_line(tmp_path):
    broker, (a, b) = _jbod(tmp_path)
    broker.start()
    try:
        create_topic(broker.bootstrap, "twice", partitions=1)
        produce_confluent(broker.bootstrap, "twice", make_records(10, partitions=1))
    finally:
        broker.stop()
    (held,) = [d for d in (a, b) if (d / "twice-0").is_dir()]
    other = b if held == a else a
    shutil.copytree(held / "twice-0", other / "twice-0")
    exited = broker.run_until_exit()
    first, second = sorted([str(a), str(b)])
    assert_refused(exited, "partition twice-0 is in two log dirs", first, second)


def test_a_second_broker_on_any_of_the_log_dirs_is_refused(tmp_path):
    broker, (a, b) = _jbod(tmp_path)
    broker.start()
    try:
        exited = BrokerProcess(tmp_path / "other", settings={"log.dirs": str(b)}).run_until_exit()
        assert_refused(exited, f"data dir {b} is in use by another broker process")
    finally:
        broker.stop()


def _sizes_on_disk(directory, topic):
    out = {}
    for part in _partitions(directory, topic):
        folder = directory / f"{topic}-{part}"
        out[part] = sum(f.stat().st_size for f in folder.glob("*.log"))
    return out


def test_kafka_python_describe_log_dirs_reports_each_dir(tmp_path):
    broker, (a, b) = _jbod(tmp_path)
    broker.start()
    admin = None
    try:
        create_topic(broker.bootstrap, "sizes", partitions=4)
        produce_confluent(broker.bootstrap, "sizes", make_records(200, partitions=4))
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        (answer,) = admin.describe_log_dirs()
        dirs = {d["log_dir"]: d for d in answer["log_dirs"]}
        assert sorted(dirs) == sorted([str(a), str(b)])
        for directory in (a, b):
            entry = dirs[str(directory)]
            assert entry["error_code"] == 0
            assert entry["total_bytes"] >= entry["usable_bytes"] > 0
            sizes = {
                p["partition_index"]: p["partition_size"]
                for t in entry["topics"]
                if t["name"] == "sizes"
                for p in t["partitions"]
            }
            on_disk = _sizes_on_disk(directory, "sizes")
            assert len(sizes) == 2 and sizes == on_disk and all(on_disk.values())
    finally:
        if admin is not None:
            admin.close()
        broker.stop()


def _wait_for(predicate, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _produce(client, topic, partition, values):
    body = {
        "transactional_id": None,
        "acks": -1,
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
    return response["responses"][0]["partition_responses"][0]["error_code"]


def test_failed_log_dir_takes_its_partitions_offline_and_the_others_are_served(tmp_path):
    broker, (a, b) = _jbod(tmp_path)
    broker.start()
    admin = None
    try:
        create_topic(broker.bootstrap, "disks", partitions=4)
        records = make_records(200, partitions=4)
        produce_confluent(broker.bootstrap, "disks", records)
        in_a, in_b = _partitions(a, "disks"), _partitions(b, "disks")
        # The disk under b goes away while the broker runs.
        gone = tmp_path / "disk1-gone"
        os.rename(b, gone)
        assert _wait_for(lambda: f"log dir {b} failed" in broker.log())
        line = next(x for x in broker.log().splitlines() if f"log dir {b} failed" in x)
        assert "2 partition(s) offline" in line
        with BlockingClient.from_bootstrap(broker.bootstrap) as client:
            meta = client.request(codec.METADATA, 8, {"topics": [{"name": "disks"}]})
            parts = {p["partition_index"]: p for p in meta["topics"][0]["partitions"]}
            for index in in_b:
                assert parts[index]["error_code"] == KAFKA_STORAGE_ERROR
                assert parts[index]["offline_replicas"] == [0]
                assert _produce(client, "disks", index, [b"lost?"]) == KAFKA_STORAGE_ERROR
                (fetched,) = client.fetch("disks", {index: 0})
                assert fetched["error_code"] == KAFKA_STORAGE_ERROR
            for index in in_a:
                assert parts[index]["error_code"] == 0 and parts[index]["offline_replicas"] == []
                assert _produce(client, "disks", index, [b"still-served"]) == 0
        # A real client keeps producing to and consuming from the good dir.
        more = [(p, None, f"after-{p}-{i}".encode(), []) for p in in_a for i in range(20)]
        produce_confluent(broker.bootstrap, "disks", more)
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        (answer,) = admin.describe_log_dirs()
        codes = {d["log_dir"]: d["error_code"] for d in answer["log_dirs"]}
        assert codes == {str(a): 0, str(b): KAFKA_STORAGE_ERROR}
        # New partitions go to the dir still in service.
        create_topic(broker.bootstrap, "later", partitions=2)
        assert _partitions(a, "later") == [0, 1]
        assert "Traceback" not in broker.log()
        broker.stop()
        # The disk comes back: every record of both dirs is there.
        os.rename(gone, b)
        broker.start()
        expected = records + more + [(p, None, b"still-served", []) for p in in_a]
        got = consume_confluent(broker.bootstrap, "disks", 4, len(expected), timeout=30)
        assert sorted((p, repr(v)) for p, _, v, _ in got) == sorted(
            (p, repr(v)) for p, _, v, _ in expected
        ), "lost or doubled records"
    finally:
        if admin is not None:
            admin.close()
        broker.stop()
