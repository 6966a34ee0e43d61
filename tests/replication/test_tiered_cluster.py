"""Tiered storage on a 3-broker cluster (real ZooKeeper, real broker processes).

The remote tier is the ``filesystem`` provider on a directory all three
brokers share, as a network mount would be. A leader SIGKILLed while it
uploads is replaced by one that continues where ``__remote_log_metadata``
says (no duplicate, no partial segment); a replica whose data dir is wiped
copies only the local tail from the leader (KIP-405's follower bootstrap),
and consumers from offset 0 still get every record.
"""

import os
import shutil
import time

from confluent_kafka.admin import AdminClient, NewTopic

from pluglog.errors import NONE
from tests.integration.clients import CONSUMERS, by_partition, make_records, produce_confluent
from tests.integration.test_tiered_latest import list_offsets
from tests.integration.test_tiered_storage import (
    LOCAL_RETENTION,
    SEGMENT_BYTES,
    TOPIC_CONFIG,
    latest_segments,
    metadata_states,
)

TOPIC = "tiered-cluster"


def local_logs(broker):
    directory = os.path.join(broker.data_dir, f"{TOPIC}-0")
    if not os.path.isdir(directory):
        return []
    return sorted(n for n in os.listdir(directory) if n.endswith(".log"))


def local_bytes(broker):
    directory = os.path.join(broker.data_dir, f"{TOPIC}-0")
    return sum(os.path.getsize(os.path.join(directory, n)) for n in local_logs(broker))


def trimmed(broker):
    return local_bytes(broker) <= LOCAL_RETENTION + 2 * SEGMENT_BYTES


def check_metadata(bootstrap):
    """The finished segments are contiguous from the first and never overlap;
    returns them. Uploads still running (the leader rolls and copies while
    the test looks) may only be of segments after the last finished one."""
    latest = latest_segments(metadata_states(bootstrap, partitions=2))
    states = sorted((s for s in latest.values() if s), key=lambda s: s.base_offset)
    live = [s for s in states if s.state == "COPY_SEGMENT_FINISHED"]
    assert live
    copying = [s for s in states if s.state != "COPY_SEGMENT_FINISHED"]
    assert {s.state for s in copying} <= {"COPY_SEGMENT_STARTED"}, copying
    assert all(s.base_offset >= live[-1].next_offset for s in copying), (live[-1], copying)
    for older, newer in zip(live, live[1:], strict=False):
        assert newer.base_offset == older.next_offset, (older, newer)
    return live


def tiered_cluster(cluster, tmp_path, brokers, topic, data_replicas):
    """A cluster with tiered storage on a shared filesystem root, the
    metadata topic on brokers 1-3 (led by broker 1) and ``topic`` placed on
    ``data_replicas`` (its first is the leader), both fully in sync."""
    root = str(tmp_path / "shared-remote")
    c = cluster(
        brokers,
        settings={
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "filesystem",
            "rsm.config.filesystem.root": root,
            "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200",
            "remote.log.metadata.topic.num.partitions": "2",
        },
    )
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    topics = [
        NewTopic(
            "__remote_log_metadata",
            num_partitions=2,
            replica_assignment=[[1, 2, 3], [1, 2, 3]],
            config={"cleanup.policy": "compact", "min.insync.replicas": "2"},
        ),
        NewTopic(
            topic,
            num_partitions=1,
            replica_assignment=[data_replicas],
            config={**TOPIC_CONFIG, "min.insync.replicas": "2"},
        ),
    ]
    for future in admin.create_topics(topics).values():
        future.result(30)
    c.wait_for_isr(topic, 1, 3)
    c.wait_for_isr("__remote_log_metadata", 2, 3)
    return c


def test_a_new_leader_continues_uploads_and_a_wiped_replica_copies_only_the_tail(
    cluster, tmp_path
):
    # Broker 1 leads the metadata and broker 2 the data: the data's leader
    # writes its segment states through another broker.
    c = tiered_cluster(cluster, tmp_path, 3, TOPIC, [2, 3, 1])
    assert c.leader(TOPIC) == 2 and c.leader("__remote_log_metadata", 1) == 1
    first = make_records(6000, partitions=1)
    produce_confluent(c.bootstrap, TOPIC, first, acks="all", **{"batch.num.messages": 200})
    leader = c.leader(TOPIC)
    c.wait_for(lambda: trimmed(c.brokers[leader]), what="the first leader's uploads")
    before = check_metadata(c.bootstrap)

    c.kill(leader)
    c.wait_for(lambda: c.leader(TOPIC) not in (leader, -1), what="a new leader")
    second_leader = c.leader(TOPIC)
    # ListOffsets LATEST_TIERED on the new leader: the last uploaded offset,
    # with the epoch it was written in (the first leader's), not the new one.
    answers = []

    def latest_tiered_agrees():
        answer = list_offsets(c.brokers[second_leader], TOPIC, -5)
        if answer[0] != NONE:
            return False  # the new leader is still reading the metadata
        last = check_metadata(c.bootstrap)[-1]
        answers.append((answer, last))
        return answer[1] == last.end_offset

    c.wait_for(latest_tiered_agrees, what="LATEST_TIERED on the new leader")
    (_error, _offset, epoch, timestamp), last = answers[-1]
    assert (epoch, timestamp) == (last.leader_epochs[-1][0], -1)
    current = list_offsets(c.brokers[second_leader], TOPIC, -1)[2]
    assert epoch < current  # a failover happened since those records
    second = make_records(6000, partitions=1, seed=6000)
    produce_confluent(c.bootstrap, TOPIC, second, acks="all", **{"batch.num.messages": 200})
    c.wait_for(lambda: trimmed(c.brokers[second_leader]), what="the new leader's uploads")
    # The surviving follower follows the leader's local start: its copies go too.
    follower = next(n for n in c.live() if n != second_leader)
    c.wait_for(lambda: trimmed(c.brokers[follower]), what="the follower's local retention")
    after = check_metadata(c.bootstrap)
    assert after[0].segment_id == before[0].segment_id  # kept, not uploaded again
    assert after[-1].next_offset > before[-1].next_offset
    assert {s.broker_id for s in after} >= {leader, second_leader}

    # The killed broker comes back with an empty data dir.
    shutil.rmtree(c.brokers[leader].data_dir)
    started = time.monotonic()
    wiped = c.restart(leader)
    c.wait_for_isr(TOPIC, 1, 3, timeout=60)
    caught_up_s = time.monotonic() - started
    first_local = int(local_logs(wiped)[0].split(".")[0])
    assert first_local > 0  # no history copied: it starts at the leader's local start
    assert local_bytes(wiped) < local_bytes(c.brokers[second_leader]) + 2 * SEGMENT_BYTES
    everything = by_partition(first + second)[0]
    got = CONSUMERS["confluent"](c.bootstrap, TOPIC, 1, len(everything))
    assert [(k, v, h) for _p, k, v, h in got] == everything
    print(f"wiped replica in sync after {caught_up_s:.1f} s from offset {first_local}")
