"""pluglog.client.AdminClient against the real broker process (real reactor)."""

import os
import shutil
import tempfile

from twisted.internet import defer, reactor
from twisted.trial import unittest

from pluglog.client import (
    AdminClient,
    ConfigResource,
    Consumer,
    NewTopic,
    Producer,
    TopicPartition,
)
from pluglog.client.errors import BrokerResponseError
from tests.broker_process import BrokerProcess


class AdminAgainstBroker(unittest.TestCase):
    timeout = 90

    def setUp(self):
        # Not self.mktemp(): under pytest that is relative to the checkout.
        root = tempfile.mkdtemp(prefix="pluglog-admin-")
        self.addCleanup(shutil.rmtree, root, True)
        self.broker = BrokerProcess(os.path.join(root, "data")).start()
        self.addCleanup(self.broker.stop)

    @defer.inlineCallbacks
    def test_topics_configs_partitions(self):
        admin = AdminClient(reactor, bootstrap_servers=self.broker.bootstrap)
        yield admin.start()
        self.addCleanup(admin.close)
        result = yield admin.create_topics(
            [NewTopic("a1", 2, 1, {"retention.ms": "60000"}), NewTopic("a2", 1, 1)]
        )
        self.assertEqual(result, {"a1": 0, "a2": 0})
        with self.assertRaises(BrokerResponseError) as cm:
            yield admin.create_topics([NewTopic("a1", 2, 1)])
        self.assertEqual(cm.exception.name, "TOPIC_ALREADY_EXISTS")
        self.assertIn("a1", (yield admin.list_topics()))
        (desc,) = yield admin.describe_topics(["a1"])
        self.assertEqual([p["partition"] for p in desc["partitions"]], [0, 1])
        configs = yield admin.describe_configs([ConfigResource("topic", "a1")])
        self.assertEqual(configs[("topic", "a1")]["retention.ms"], "60000")
        yield admin.alter_configs([ConfigResource("topic", "a1", {"retention.ms": "120000"})])
        configs = yield admin.describe_configs([ConfigResource("topic", "a1", ["retention.ms"])])
        self.assertEqual(configs[("topic", "a1")]["retention.ms"], "120000")
        yield admin.create_partitions({"a1": 4})
        (desc,) = yield admin.describe_topics(["a1"])
        self.assertEqual(len(desc["partitions"]), 4)
        yield admin.delete_topics(["a2"])
        self.assertNotIn("a2", (yield admin.list_topics()))

    @defer.inlineCallbacks
    def test_groups_and_offsets(self):
        bootstrap = self.broker.bootstrap
        admin = AdminClient(reactor, bootstrap_servers=bootstrap)
        yield admin.start()
        self.addCleanup(admin.close)
        yield admin.create_topics([NewTopic("g1", 2, 1)])
        producer = Producer(reactor, bootstrap_servers=bootstrap)
        yield producer.start()
        yield defer.gatherResults(
            [producer.send("g1", b"v%d" % i, partition=i % 2) for i in range(10)]
        )
        yield producer.stop()
        offsets = yield admin.list_offsets(
            {TopicPartition("g1", 0): -1, TopicPartition("g1", 1): -2}
        )
        self.assertEqual(offsets, {TopicPartition("g1", 0): 5, TopicPartition("g1", 1): 0})
        consumer = Consumer(
            reactor, "g1", bootstrap_servers=bootstrap, group_id="ag", auto_offset_reset="earliest"
        )
        yield consumer.start()
        got = 0
        while got < 10:
            batch = yield consumer.getmany(timeout_ms=1000)
            got += sum(len(v) for v in batch.values())
        yield consumer.commit()
        self.assertIn(("ag", "consumer"), (yield admin.list_consumer_groups()))
        (group,) = yield admin.describe_consumer_groups(["ag"])
        self.assertEqual(group["state"], "Stable")
        self.assertEqual(
            sorted(group["members"][0]["assignment"]),
            [TopicPartition("g1", 0), TopicPartition("g1", 1)],
        )
        yield consumer.stop()
        committed = yield admin.list_consumer_group_offsets("ag")
        self.assertEqual(committed, {TopicPartition("g1", 0): 5, TopicPartition("g1", 1): 5})
        yield admin.alter_consumer_group_offsets("ag", {TopicPartition("g1", 0): 1})
        committed = yield admin.list_consumer_group_offsets("ag", [TopicPartition("g1", 0)])
        self.assertEqual(committed, {TopicPartition("g1", 0): 1})
        yield admin.delete_consumer_group_offsets("ag", [TopicPartition("g1", 1)])
        self.assertEqual(
            (yield admin.list_consumer_group_offsets("ag")), {TopicPartition("g1", 0): 1}
        )
        low = yield admin.delete_records({TopicPartition("g1", 0): 3})
        self.assertEqual(low, {TopicPartition("g1", 0): 3})
        yield admin.delete_consumer_groups(["ag"])
        self.assertNotIn(("ag", "consumer"), (yield admin.list_consumer_groups()))
