"""JBOD: a broker over several log dirs (``log.dirs``), each locked and
tied to the cluster on its own, each holding whole partitions with its own
checkpoints; new partitions go to the dir with the fewest."""

import os
import shutil

from kafka.admin import KafkaAdminClient

from pluglog.datadir import meta_properties, read_meta_properties
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
