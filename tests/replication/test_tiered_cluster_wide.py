"""Tiered storage on 4 brokers: a leader with no replica of its metadata.

``__remote_log_metadata`` lives on brokers 1-3 only; the data's leader is
broker 4, which reads the metadata from its leader as a consumer and writes
it with Produce. Uploads, local retention and reads from offset 0 work the
same, and broker 1 (which hosts the metadata) continues after broker 4 is
killed.
"""

from tests.integration.clients import CONSUMERS, by_partition, make_records, produce_confluent
from tests.replication.test_tiered_cluster import (
    check_metadata,
    local_logs,
    tiered_cluster,
    trimmed,
)

TOPIC = "tiered-cluster"


def test_a_leader_without_a_metadata_replica_reads_and_writes_it_remotely(cluster, tmp_path):
    c = tiered_cluster(cluster, tmp_path, 4, TOPIC, [4, 1, 2])
    assert c.leader(TOPIC) == 4
    first = make_records(6000, partitions=1)
    produce_confluent(c.bootstrap, TOPIC, first, acks="all", **{"batch.num.messages": 200})
    c.wait_for(lambda: trimmed(c.brokers[4]), what="broker 4's uploads")
    before = check_metadata(c.bootstrap)
    assert {s.broker_id for s in before} == {4}
    assert int(local_logs(c.brokers[4])[0].split(".")[0]) > 0
    got = CONSUMERS["confluent"](c.bootstrap, TOPIC, 1, len(first))
    assert [(k, v, h) for _p, k, v, h in got] == by_partition(first)[0]

    c.kill(4)
    c.wait_for(lambda: c.leader(TOPIC) not in (4, -1), what="a new leader")
    second = make_records(4000, partitions=1, seed=6000)
    produce_confluent(c.bootstrap, TOPIC, second, acks="all", **{"batch.num.messages": 200})
    new_leader = c.leader(TOPIC)
    c.wait_for(lambda: trimmed(c.brokers[new_leader]), what="the new leader's uploads")
    after = check_metadata(c.bootstrap)
    assert after[0].segment_id == before[0].segment_id
    everything = by_partition(first + second)[0]
    got = CONSUMERS["confluent"](c.bootstrap, TOPIC, 1, len(everything))
    assert [(k, v, h) for _p, k, v, h in got] == everything
