"""The Twisted client against a 3-broker pluglog cluster (ZooKeeper) while a
partition leader is SIGKILLed: the idempotent producer retries to the new
leader without losing or doubling a record, and the consumer reads every
partition from whichever broker leads it now."""

import shutil
import tempfile
from pathlib import Path

import pytest
from twisted.internet import defer, reactor, task
from twisted.trial import unittest

from pluglog.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from tests.cluster import Cluster
from tests.zookeeper import ZooKeeperProcess, new_chroot

# its own ZooKeeper and three brokers, started in setUp, not by a fixture
pytestmark = pytest.mark.cluster

COUNT = 3000


class ClientAgainstCluster(unittest.TestCase):
    timeout = 240

    def setUp(self):
        # Not self.mktemp(): under pytest that is relative to the checkout.
        root = Path(tempfile.mkdtemp(prefix="pluglog-client-cluster-"))
        self.addCleanup(shutil.rmtree, root, True)
        self.zk = ZooKeeperProcess(root / "zk").start()
        self.addCleanup(self.zk.stop)
        self.cluster = Cluster(root, self.zk.connect_string(new_chroot()), brokers=3).start()
        self.addCleanup(self.cluster.stop)

    @defer.inlineCallbacks
    def test_leader_killed_mid_stream(self):
        bootstrap = self.cluster.bootstrap
        admin = AdminClient(reactor, bootstrap_servers=bootstrap)
        yield admin.start()
        yield admin.create_topics([NewTopic("ha", 3, 3, {"min.insync.replicas": "2"})])
        yield admin.close()
        self.cluster.wait_for_isr("ha", 3, 3)
        producer = Producer(
            reactor,
            bootstrap_servers=bootstrap,
            linger_ms=2,
            request_timeout_ms=5000,
            retry_backoff_ms=200,
        )
        yield producer.start()
        sent = []
        victim = None
        for i in range(COUNT):
            sent.append(producer.send("ha", b"v%d" % i, key=b"k%d" % i))
            if i % 50 == 0:
                yield task.deferLater(reactor, 0.005, lambda: None)
            if i == COUNT // 3:
                yield defer.gatherResults(sent)
                victim = self.cluster.leader("ha", 0)
                self.cluster.kill(victim)
        metas = yield defer.gatherResults(sent)
        yield producer.stop()
        self.assertNotEqual(self.cluster.leader("ha", 0), victim)

        consumer = Consumer(reactor, bootstrap_servers=self.cluster.bootstrap)
        yield consumer.start()
        tps = [TopicPartition("ha", p) for p in range(3)]
        consumer.assign(tps)
        yield consumer.seek_to_beginning(*tps)
        got = {}
        deadline = reactor.seconds() + 60
        while sum(map(len, got.values())) < COUNT and reactor.seconds() < deadline:
            batches = yield consumer.getmany(timeout_ms=500)
            for tp, records in batches.items():
                got.setdefault(tp.partition, []).extend(records)
        yield consumer.stop()
        values = sorted(r.value for records in got.values() for r in records)
        self.assertEqual(values, sorted(b"v%d" % i for i in range(COUNT)))  # none lost or doubled
        for records in got.values():
            self.assertEqual([r.offset for r in records], list(range(len(records))))
        placed = {(m.partition, m.offset) for m in metas}
        self.assertEqual(placed, {(p, r.offset) for p, rs in got.items() for r in rs})
