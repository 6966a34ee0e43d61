"""Topic ids (KIP-516) on a ZooKeeper cluster of broker processes.

The creating broker writes the id into ``/brokers/topics/<t>`` as Kafka 2.8+
does (``version`` 3, ``topic_id`` in URL-safe base64); every broker answers
it and stamps it into its replicas' ``partition.metadata``. A topic znode
written without an id (a cluster from before ids) gets one from the
controller, once, and the brokers adopt it.
"""

import json
import os
import uuid

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from pluglog import topicids
from pluglog.client.blocking import BlockingClient
from pluglog.protocol import api_keys


def zk_topic(zk_connect, name):
    client = KazooClient(hosts=zk_connect)
    client.start(10)
    try:
        raw, _ = client.get(f"/brokers/topics/{name}")
        return json.loads(raw)
    finally:
        client.stop()
        client.close()


def answered_id(cluster, node, name):
    """The id broker ``node`` answers for ``name`` in Metadata v12 (hex)."""
    body = {
        "topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    with BlockingClient("127.0.0.1", cluster.brokers[node].port, timeout=5) as client:
        (topic,) = client.request(api_keys.METADATA, 12, body)["topics"]
    return topic["topic_id"].hex if topic["error_code"] == 0 else None


def files(cluster, name, partitions):
    """``{(node, partition): hex id}`` of the replicas' partition.metadata."""
    out = {}
    for node, broker in cluster.brokers.items():
        for p in range(partitions):
            path = os.path.join(broker.data_dir, f"{name}-{p}")
            if os.path.isdir(path):
                out[(node, p)] = topicids.read_partition_metadata(path)
    return out


def test_zookeeper_holds_the_id_every_broker_answers_it(cluster, zk_connect):
    c = cluster(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("ids", 3, 2)])["ids"].result(timeout=30)
    body = zk_topic(zk_connect, "ids")
    assert body["version"] == 3 and len(body["topic_id"]) == 22
    hex_id = topicids.from_base64(body["topic_id"])
    assert topicids.to_base64(hex_id) == body["topic_id"]  # URL-safe, unpadded
    described = admin.describe_topics(TopicCollection(["ids"]))["ids"].result(timeout=20)
    high = described.topic_id.get_most_significant_bits() & (2**64 - 1)
    low = described.topic_id.get_least_significant_bits() & (2**64 - 1)
    assert f"{high:016x}{low:016x}" == hex_id
    c.wait_for(
        lambda: all(answered_id(c, n, "ids") == hex_id for n in c.brokers),
        what="every broker to answer the id",
    )
    c.wait_for(lambda: len(files(c, "ids", 3)) == 6, what="the six replicas' files")
    assert set(files(c, "ids", 3).values()) == {hex_id}
    # A restart keeps it.
    c.restart(2)
    c.wait_for(lambda: answered_id(c, 2, "ids") == hex_id, what="broker 2 after its restart")
    assert zk_topic(zk_connect, "ids")["topic_id"] == body["topic_id"]


def test_a_topic_from_before_ids_gets_one_from_the_controller(cluster, zk_connect):
    c = cluster(3)
    # What Kafka < 2.8's tools wrote: version 2, no topic_id.
    client = KazooClient(hosts=zk_connect)
    client.start(10)
    try:
        assignment = {"0": [1, 2], "1": [2, 3]}
        client.create(
            "/config/topics/legacy",
            json.dumps({"version": 1, "config": {}}).encode(),
            makepath=True,
        )
        client.create(
            "/brokers/topics/legacy",
            json.dumps({"version": 2, "partitions": assignment}).encode(),
            makepath=True,
        )
    finally:
        client.stop()
        client.close()
    c.wait_for(
        lambda: zk_topic(zk_connect, "legacy").get("topic_id"),
        what="the controller to give the topic an id",
    )
    body = zk_topic(zk_connect, "legacy")
    assert body["partitions"] == {"0": [1, 2], "1": [2, 3]} and body["version"] == 3
    hex_id = topicids.from_base64(body["topic_id"])
    c.wait_for(
        lambda: all(answered_id(c, n, "legacy") == hex_id for n in c.brokers),
        what="every broker to adopt the id",
    )
    c.wait_for(lambda: len(files(c, "legacy", 2)) == 4, what="the replicas' files")
    c.wait_for(
        lambda: set(files(c, "legacy", 2).values()) == {hex_id}, what="the ids in the files"
    )
    # Assigned once: a controller change does not give it another.
    old = c.controller()
    c.restart(old)
    c.wait_for(lambda: c.controller() not in (-1, None), what="a controller")
    assert zk_topic(zk_connect, "legacy")["topic_id"] == body["topic_id"]
