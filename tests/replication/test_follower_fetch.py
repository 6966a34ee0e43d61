"""A consumer with ``client.rack`` reads from the follower in its rack (KIP-392).

Three broker processes in racks r1, r2 and r3 coordinated by a real
ZooKeeper, ``replica.selector.class`` set to Kafka's
RackAwareReplicaSelector class name, one partition led by broker 1 and
replicated to all three. A confluent-kafka consumer in rack r3 is sent to
broker 3 by the leader's first answer (``preferred_read_replica``) and
reads everything there: broker 3's ``pluglog_bytes_out_total`` carries the
records, the leader's and broker 2's stay at zero. A consumer without a
rack reads from the leader. Every record read was acknowledged (acks=all),
in order, once.
"""

import re
import urllib.request

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess, assert_refused

TOPIC = "ff"
COUNT = 3000
RACKS = {1: "r1", 2: "r2", 3: "r3"}
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def bytes_out(cluster, node):
    with urllib.request.urlopen(cluster.url(node) + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = re.search(r'^pluglog_bytes_out_total\{topic="ff"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def produce(bootstrap):
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    acked = []

    def on_delivery(err, msg):
        assert err is None, err
        acked.append((msg.offset(), msg.value()))

    for i in range(COUNT):
        producer.produce(TOPIC, f"value-{i}".encode(), callback=on_delivery)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return sorted(acked)


def consume(bootstrap, rack):
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": f"ff-{rack or 'none'}",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
    }
    if rack:
        conf["client.rack"] = rack
    consumer = confluent_kafka.Consumer(conf)
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
    seen = []
    try:
        for _ in range(600):
            for msg in consumer.consume(500, 0.2):
                assert not msg.error(), msg.error()
                seen.append((msg.offset(), msg.value()))
            if len(seen) >= COUNT:
                break
    finally:
        consumer.close()
    return seen


def test_a_consumer_reads_from_the_follower_in_its_rack(cluster):
    cluster = cluster(3, racks=RACKS, http=True, settings={"replica.selector.class": SELECTOR})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(
        TOPIC,
        num_partitions=1,
        replica_assignment=[[1, 2, 3]],
        config={"min.insync.replicas": "2"},
    )
    admin.create_topics([topic])[TOPIC].result(30)
    cluster.wait_for_isr(TOPIC, 1, 3)
    assert cluster.partition(TOPIC, 0)["leader"] == 1
    acked = produce(cluster.bootstrap)
    assert len(acked) == COUNT

    assert consume(cluster.bootstrap, "r3") == acked
    served = {node: bytes_out(cluster, node) for node in RACKS}
    # All record bytes came from broker 3 (the follower in r3); the leader
    # answered with the preferred replica and no records.
    assert served[1] == 0 and served[2] == 0, served
    assert served[3] >= sum(len(v) for _o, v in acked), served

    # Without a rack the leader serves.
    assert consume(cluster.bootstrap, None) == acked
    assert bytes_out(cluster, 1) > 0
    assert bytes_out(cluster, 2) == 0


def test_an_unknown_replica_selector_is_refused_at_start_up(tmp_path):
    exited = BrokerProcess(
        tmp_path / "data", settings={"replica.selector.class": "nearest-moon"}
    ).run_until_exit()
    assert_refused(exited, "nearest-moon")
