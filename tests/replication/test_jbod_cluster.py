"""JBOD in a ZooKeeper cluster: a log dir failing on a partition's leader
moves that partition's leadership to another in-sync replica, and the
broker's other log dir keeps serving its partitions."""

import os
import time

from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from tests.chaos import ProducerThread, describe_duplicates, read_back

X = 1  # the broker with two log dirs


def _holding(directory, topic):
    return sorted(
        int(name.rsplit("-", 1)[1])
        for name in os.listdir(directory)
        if name.rsplit("-", 1)[0] == topic
    )


def _broker_log_lines(c, topic):
    """Each broker's log lines about the topic, log dirs, producers and leadership."""
    words = (topic, "log dir", "producer", "leader", "error", "warn", "Traceback")
    lines = []
    for n, broker in c.brokers.items():
        lines.append(f"--- broker {n} ({broker.log_path})")
        lines += [line for line in broker.log().splitlines() if any(w in line for w in words)]
    return lines


def test_failed_log_dir_on_the_leader_moves_leadership_and_the_other_dir_serves(
    cluster, tmp_path, zk_connect
):
    disks = [tmp_path / f"broker-{X}" / f"disk{i}" for i in range(2)]
    c = cluster(
        3,
        node_settings={
            X: {
                "log.dirs": ",".join(str(d) for d in disks),
                "log.flush.scheduler.interval.ms": "200",
            }
        },
    )
    topic = "jbodfail"
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    new = NewTopic(
        topic,
        num_partitions=2,
        replica_assignment=[[1, 2, 3], [1, 3, 2]],
        config={"min.insync.replicas": "2"},
    )
    admin.create_topics([new])[topic].result(30)
    c.wait_for_isr(topic, 2, 3)
    in0, in1 = _holding(disks[0], topic), _holding(disks[1], topic)
    assert len(in0) == len(in1) == 1, "one partition in each of X's log dirs"
    failing, serving = in0[0], in1[0]
    assert c.leader(topic, failing) == X and c.leader(topic, serving) == X
    epoch = c.partition(topic, failing)["leader_epoch"]
    producer = ProducerThread(c.bootstrap, topic, partitions=2, rate=1000, idempotent=True)
    producer.start()
    try:
        c.wait_for(lambda: min(producer.acked_per_partition) > 500, what="first acks")
        os.rename(disks[0], tmp_path / "disk0-gone")  # the disk goes away under X
        failed_at = time.monotonic()
        moved = c.wait_for(
            lambda: (
                c.partition(topic, failing)["leader"] not in (X, -1)
                and c.partition(topic, failing)
            ),
            timeout=15,
            what="leadership to move off the failed dir",
        )
        elapsed = time.monotonic() - failed_at
        assert moved["leader_epoch"] > epoch
        assert X not in moved["isr"] and len(moved["isr"]) == 2
        # Within a few seconds: the probe (0.2 s) plus one controller event,
        # far below the ZooKeeper session timeout a dead broker would need.
        assert elapsed < 8.0, f"leadership moved after {elapsed:.1f}s"
        acked = list(producer.acked_per_partition)
        c.wait_for(
            lambda: all(producer.acked_per_partition[p] > acked[p] + 1000 for p in (0, 1)),
            what="acks on both partitions after the failure",
        )
        # X keeps leading the partition in its healthy dir, with its followers in sync.
        other = c.partition(topic, serving)
        assert other["leader"] == X and sorted(other["isr"]) == [1, 2, 3]
        # X neither rejoins the ISR nor is elected again, even when asked for the
        # preferred leader (X is first in the assignment).
        zk = KazooClient(hosts=zk_connect)
        zk.start()
        try:
            events = zk.get_children("/log_dir_event_notification")
            raw, _ = zk.get(f"/pluglog/offline_replicas/{X}")
            assert f'["{topic}",{failing}]' in raw.decode()
            zk.create(
                "/admin/preferred_replica_election",
                b'{"version":1,"partitions":[{"topic":"%s","partition":%d}]}'
                % (topic.encode(), failing),
            )
        finally:
            zk.stop()
            zk.close()
        assert events == [], "the controller handles and deletes notifications"
        time.sleep(3.0)
        after = c.partition(topic, failing)
        assert after["leader"] not in (X, -1) and X not in after["isr"]
    finally:
        producer.stop()
    assert not producer.errors, producer.errors
    lost, duplicated, stored = read_back(c.bootstrap, topic, 2, producer.acked)
    if lost or duplicated:
        # Enough to tell a broker defect from a client's re-send afterwards:
        # where each value is, the batches (producer, epoch, sequences)
        # holding it in every replica, and what the brokers logged.
        dirs = {f"broker {n}": b.data_dir for n, b in c.brokers.items() if n != X}
        dirs[f"broker {X} disk1"] = disks[1]
        dirs[f"broker {X} disk0 (failed)"] = tmp_path / "disk0-gone"
        report = describe_duplicates(duplicated, stored, producer.acked, dirs, topic)
        report += _broker_log_lines(c, topic)
        print("\n".join(report))
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}"
    assert not duplicated, f"{len(duplicated)} records stored twice, e.g. {duplicated[:3]}"
    assert "Traceback" not in c.brokers[X].log()
    # Restarted with the disk back, X catches up, rejoins the ISR and has no
    # offline replicas left in ZooKeeper.
    os.rename(tmp_path / "disk0-gone", disks[0])
    c.restart(X)
    c.wait_for(
        lambda: sorted(c.partition(topic, failing)["isr"]) == [1, 2, 3],
        what="X back in the ISR of the partition of its repaired dir",
    )
    zk = KazooClient(hosts=zk_connect)
    zk.start()
    try:
        assert zk.exists(f"/pluglog/offline_replicas/{X}") is None
    finally:
        zk.stop()
        zk.close()
