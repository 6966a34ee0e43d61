"""format("pluglog") reads a topic whose partitions are led by three different brokers.

The driver's control plane must ask each partition's leader for offsets, and
executors (confluent-kafka) must follow the leaders; a real ZooKeeper and
three broker processes stand behind it."""

import confluent_kafka

from tests.chaos import create_topic
from tests.cluster import Cluster
from tests.zookeeper import new_chroot, zookeeper_process  # noqa: F401


def test_batch_read_of_a_topic_spread_over_three_brokers(spark, zookeeper_process, tmp_path):  # noqa: F811
    cluster = Cluster(tmp_path, zookeeper_process.connect_string(new_chroot())).start()
    try:
        topic = "spread"
        create_topic(cluster.bootstrap, topic, partitions=3, rf=2, min_isr=1)
        cluster.wait_for_isr(topic, 3, 2)
        assert {cluster.leader(topic, p) for p in range(3)} == {1, 2, 3}
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": cluster.bootstrap, "acks": "all"}
        )
        for i in range(300):
            producer.produce(topic, value=b"v%d" % i, key=b"k%d" % i, partition=i % 3)
        assert producer.flush(30) == 0
        frame = (
            spark.read.format("pluglog")
            .option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("subscribe", topic)
            .load()
        )
        rows = sorted((r.partition, r.offset, bytes(r.value)) for r in frame.collect())
        assert rows == sorted((i % 3, i // 3, b"v%d" % i) for i in range(300))
    finally:
        cluster.stop()
