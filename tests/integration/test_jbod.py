"""JBOD: a broker over several log dirs (``log.dirs``), each locked and
tied to the cluster on its own, each holding whole partitions with its own
checkpoints; new partitions go to the dir with the fewest."""

import os
import shutil
import threading
import time

import confluent_kafka
from kafka import TopicPartitionReplica as KpTopicPartitionReplica
from kafka import errors as kp_errors
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


def _wait_for(predicate, timeout=15, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
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


def _where(dirs, topic, partition):
    return [d for d in dirs if (d / f"{topic}-{partition}").is_dir()]


#: the copy rate of the moves below: a move of FILLER bytes takes >= 3 s
COPY_RATE = 8 * 1024 * 1024
FILLER = 24 * 1024 * 1024


def _future(directory, topic, partition):
    return list(directory.glob(f"{topic}-{partition}.*-future"))


def _described(admin):
    """``{log dir: {(topic, partition, is_future)}}`` from DescribeLogDirs."""
    (answer,) = admin.describe_log_dirs()
    return {
        d["log_dir"]: {
            (t["name"], p["partition_index"], p["is_future_key"])
            for t in d["topics"]
            for p in t["partitions"]
        }
        for d in answer["log_dirs"]
    }


def test_alter_replica_log_dirs_moves_a_partition_under_load_with_nothing_lost(tmp_path):
    """The copy runs off the reactor: acks=all writes to the partition being
    moved keep being acknowledged while its tens of MB are copied, and
    DescribeLogDirs shows the future replica meanwhile."""
    broker, (a, b) = _jbod(
        tmp_path, settings={"replica.alter.log.dirs.io.max.bytes.per.second": str(COPY_RATE)}
    )
    broker.start()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        create_topic(broker.bootstrap, "moving", partitions=2)
        (home,) = _where((a, b), "moving", 0)
        other = b if home == a else a
        filler = [os.urandom(1000) + b"%08d" % i for i in range(FILLER // 1008)]
        produce_confluent(
            broker.bootstrap, "moving", [(0, None, v, []) for v in filler], acks="all"
        )
        acked, failed, stop = [], [], threading.Event()

        def produce():
            producer = confluent_kafka.Producer(
                {"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 2}
            )

            def done(err, msg):
                (failed if err else acked).append(err or msg.value())

            i = 0
            while not stop.is_set():
                producer.produce(
                    "moving", value=f"r{i:06d}".encode(), partition=0, on_delivery=done
                )
                producer.poll(0)
                i += 1
                if i % 200 == 0:
                    time.sleep(0.01)
            producer.flush(30)

        def move_watching(destination, source):
            """Move partition 0 to ``destination``; the acks counted at each
            look while the move was in flight, and whether DescribeLogDirs
            showed the future replica there."""
            tpr = KpTopicPartitionReplica("moving", 0, 0)
            assert admin.alter_replica_log_dirs({tpr: str(destination)}) == {
                tpr: kp_errors.NoError
            }
            counts, described = [], False
            while _where((a, b), "moving", 0) != [destination] or _future(
                destination, "moving", 0
            ):
                if _future(destination, "moving", 0):
                    counts.append(len(acked))
                    dirs = _described(admin)
                    described = described or (
                        ("moving", 0, True) in dirs[str(destination)]
                        and ("moving", 0, False) in dirs[str(source)]
                    )
                time.sleep(0.05)
            return counts, described

        thread = threading.Thread(target=produce)
        thread.start()
        try:
            assert _wait_for(lambda: len(acked) > 2000)
            counts, described = move_watching(other, home)
            # The copy of FILLER bytes at COPY_RATE lasts >= 3 s: the producer
            # kept getting acks all along (a copy on the reactor thread would
            # have answered nothing until it was over).
            assert len(counts) >= 10, counts
            assert counts[-1] - counts[0] >= 200, counts
            assert described, "DescribeLogDirs did not show the future replica"
            assert _where((a, b), "moving", 0) == [other]
            count = len(acked)
            assert _wait_for(lambda: len(acked) > count + 2000)
            # And back again, still under load.
            counts, _ = move_watching(home, other)
            assert counts[-1] - counts[0] >= 200, counts
            count = len(acked)
            assert _wait_for(lambda: len(acked) > count + 2000)
        finally:
            stop.set()
            thread.join(60)
        assert failed == []
        assert _where((a, b), "moving", 0) == [home]
        held = _described(admin)
        assert ("moving", 0, False) in held[str(home)]
        assert not any(t == "moving" and p == 0 for t, p, _f in held[str(other)])
        expected = filler + acked
        got = consume_confluent(broker.bootstrap, "moving", 1, len(expected), timeout=90)
        assert sorted(v for _, _, v, _ in got) == sorted(expected)  # each once, none lost
        assert "moved moving-0 to log dir" in broker.log()
        # Bad requests: an unknown dir, a partition this broker does not host.
        tpr = KpTopicPartitionReplica("moving", 0, 0)
        bad = KpTopicPartitionReplica("moving", 9, 0)
        answer = admin.alter_replica_log_dirs({tpr: str(tmp_path / "nowhere"), bad: str(a)})
        assert answer[tpr] is kp_errors.LogDirNotFoundError
        assert answer[bad] is kp_errors.ReplicaNotAvailableError
        assert "Traceback" not in broker.log()
    finally:
        admin.close()
        broker.stop()


def test_sigkill_mid_move_leaves_exactly_one_complete_copy(tmp_path):
    # Paced, so the copy (about 31 MB) surely runs when the kill comes.
    broker, (a, b) = _jbod(
        tmp_path, settings={"replica.alter.log.dirs.io.max.bytes.per.second": str(COPY_RATE)}
    )
    broker.start()
    try:
        create_topic(broker.bootstrap, "big", partitions=1)
        (home,) = _where((a, b), "big", 0)
        other = b if home == a else a
        records = [(0, None, os.urandom(512) + f"{i:07d}".encode(), []) for i in range(60_000)]
        produce_confluent(broker.bootstrap, "big", records, acks="all")
        body = {"dirs": [{"path": str(other), "topics": [{"name": "big", "partitions": [0]}]}]}

        def move():
            try:
                with BlockingClient.from_bootstrap(broker.bootstrap) as client:
                    client.request(codec.ALTER_REPLICA_LOG_DIRS, 2, body)
            except Exception:  # the broker dies under it
                pass

        thread = threading.Thread(target=move)
        thread.start()
        # Kill while the copy runs: the future dir has appeared.
        assert _wait_for(lambda: list(other.glob("big-0.*-future")), timeout=10, interval=0)
        broker.kill()
        thread.join(10)
    finally:
        broker.stop()
    broker.start()
    try:
        assert len(_where((a, b), "big", 0)) == 1
        assert not list(a.glob("*-future")) and not list(b.glob("*-future"))
        got = consume_confluent(broker.bootstrap, "big", 1, len(records), timeout=60)
        assert sorted(v for _, _, v, _ in got) == sorted(v for _, _, v, _ in records)
    finally:
        broker.stop()


def test_moving_a_tiered_partition_keeps_its_remote_records_readable(tmp_path):
    """Tiered storage and JBOD together: after the move, offsets below the
    local log start are still read from the remote tier."""
    broker, (a, b) = _jbod(
        tmp_path,
        settings={
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "filesystem",
            "rsm.config.filesystem.root": str(tmp_path / "remote"),
            "remote.log.manager.task.interval.ms": "200",
            "remote.log.metadata.topic.num.partitions": "1",
        },
    )
    broker.start()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        config = {
            "remote.storage.enable": "true",
            "segment.bytes": "32768",
            "local.retention.bytes": "65536",
            "file.delete.delay.ms": "0",
        }
        create_topic(broker.bootstrap, "tiered", 1, config)
        records = make_records(15000, partitions=1)
        produce_confluent(broker.bootstrap, "tiered", records, **{"batch.num.messages": 200})
        (home,) = _where((a, b), "tiered", 0)
        other = b if home == a else a

        def first_local():
            names = sorted(n for n in os.listdir(home / "tiered-0") if n.endswith(".log"))
            return int(names[0].split(".")[0])

        assert _wait_for(lambda: first_local() > 3000, timeout=30)
        tpr = KpTopicPartitionReplica("tiered", 0, 0)
        assert admin.alter_replica_log_dirs({tpr: str(other)}) == {tpr: kp_errors.NoError}
        assert _wait_for(
            lambda: _where((a, b), "tiered", 0) == [other] and not _future(other, "tiered", 0)
        )
        got = consume_confluent(broker.bootstrap, "tiered", 1, len(records), timeout=60)
        assert [(k, v, h) for _p, k, v, h in got] == by_partition(records)[0]
        assert "Traceback" not in broker.log()
    finally:
        admin.close()
        broker.stop()
