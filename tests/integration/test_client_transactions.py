"""The Twisted client's transactional producer and read_committed consumer
against the real broker process.

A transaction committed, one aborted after its records reached the log
(flush before abort) and one committed with offsets: the Twisted
read_committed consumer and confluent-kafka's read_committed consumer see
the same records (the committed ones), a read_uncommitted consumer sees the
aborted ones too, and the offsets sent with the transaction are the group's;
with a group member's ``group_metadata()`` a stale generation is refused
(KIP-447) and only abort is left.
A second producer with the same transactional id fences the first, whose
late records never become visible; ``stop()`` aborts an open transaction.
"""

import os
import shutil
import tempfile
import time

import confluent_kafka
from twisted.internet import defer, reactor, threads
from twisted.trial import unittest

from pluglog.client import (
    AdminClient,
    Consumer,
    ConsumerGroupMetadata,
    NewTopic,
    Producer,
    ProducerFencedError,
    TopicPartition,
    TransactionStateError,
)
from pluglog.client.errors import BrokerResponseError
from tests.broker_process import BrokerProcess

TOPIC = "tx-out"
PARTITIONS = 2


def confluent_read(bootstrap, isolation, expected_count):
    """Values a confluent-kafka consumer at ``isolation`` reads from the
    beginning (until it has ``expected_count`` and one more idle poll)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"confluent-{isolation}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got = []
    idle = 0
    deadline = time.monotonic() + 30
    try:
        # Two seconds without a record once enough arrived.
        while idle < 4 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                idle += len(got) >= expected_count
                continue
            assert not msg.error(), msg.error()
            got.append(msg.value())
    finally:
        consumer.close()
    return got


class TransactionsAgainstBroker(unittest.TestCase):
    timeout = 120

    def setUp(self):
        # Not self.mktemp(): under pytest that is relative to the checkout.
        root = tempfile.mkdtemp(prefix="pluglog-txclient-")
        self.addCleanup(shutil.rmtree, root, True)
        self.broker = BrokerProcess(os.path.join(root, "data")).start()
        self.addCleanup(self.broker.stop)
        self.bootstrap = self.broker.bootstrap

    @defer.inlineCallbacks
    def _topic(self):
        admin = AdminClient(reactor, bootstrap_servers=self.bootstrap)
        yield admin.start()
        yield admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        yield admin.close()

    def _producer(self, txn_id, **config):
        producer = Producer(
            reactor, bootstrap_servers=self.bootstrap, transactional_id=txn_id, **config
        )
        self.addCleanup(producer.stop)
        return producer

    @defer.inlineCallbacks
    def _read(self, isolation, group_id=None):
        """Values a Twisted consumer at ``isolation`` reads from the beginning
        up to the end offsets ListOffsets gives at that isolation."""
        consumer = Consumer(
            reactor,
            bootstrap_servers=self.bootstrap,
            isolation_level=isolation,
            group_id=group_id,
            enable_auto_commit=False,  # the group's offsets are the transaction's
        )
        yield consumer.start()
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        ends = yield consumer.list_offsets(tps, -1)
        yield consumer.seek_to_beginning(*tps)
        got = []
        deadline = reactor.seconds() + 20
        while reactor.seconds() < deadline:
            batches = yield consumer.getmany(timeout_ms=200)
            for records in batches.values():
                got += [r.value for r in records]
            positions = yield defer.gatherResults([consumer.position(tp) for tp in tps])
            if all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                break
        committed = None
        if group_id is not None:
            committed = yield consumer.committed_offsets(tps)
        yield consumer.stop()
        return got, ends, committed

    @defer.inlineCallbacks
    def test_commit_abort_and_what_each_isolation_sees(self):
        yield self._topic()
        producer = self._producer("tw-1", linger_ms=5)
        yield producer.init_transactions()
        self.assertGreaterEqual(producer.producer_id, 0)

        yield producer.begin_transaction()
        sent = [producer.send(TOPIC, b"c1-%d" % i, key=b"%d" % i) for i in range(10)]
        yield producer.commit_transaction()
        metas = yield defer.gatherResults(sent)
        self.assertEqual({m.partition for m in metas}, {0, 1})  # both partitions in it

        yield producer.begin_transaction()
        aborted = [producer.send(TOPIC, b"a-%d" % i, key=b"%d" % i) for i in range(6)]
        yield producer.flush()  # in the log before the abort: read_uncommitted sees them
        yield defer.gatherResults(aborted)
        yield producer.abort_transaction()

        yield producer.begin_transaction()
        for i in range(4):
            producer.send(TOPIC, b"c2-%d" % i, key=b"%d" % i)
        yield producer.send_offsets_to_transaction({TopicPartition(TOPIC, 0): 7}, "tw-group")
        yield producer.commit_transaction()
        yield producer.stop()

        committed = sorted([b"c1-%d" % i for i in range(10)] + [b"c2-%d" % i for i in range(4)])
        everything = sorted(committed + [b"a-%d" % i for i in range(6)])
        got, ends, offsets = yield self._read("read_committed", group_id="tw-group")
        self.assertEqual(sorted(got), committed)
        self.assertEqual(offsets[TopicPartition(TOPIC, 0)], 7)  # committed with the txn
        uncommitted, uncommitted_ends, _ = yield self._read("read_uncommitted")
        self.assertEqual(sorted(uncommitted), everything)
        # Nothing is open: the last stable offset is the high watermark.
        self.assertEqual(ends, uncommitted_ends)
        for isolation, expected in (("read_committed", committed), ("read_uncommitted", None)):
            values = yield threads.deferToThread(
                confluent_read, self.bootstrap, isolation, len(expected or everything)
            )
            self.assertEqual(sorted(values), expected or everything, isolation)

    @defer.inlineCallbacks
    def test_second_producer_fences_the_first(self):
        yield self._topic()
        first = self._producer("tw-fence")
        yield first.init_transactions()
        yield first.begin_transaction()
        yield first.send(TOPIC, b"zombie-1", partition=0)
        second = self._producer("tw-fence")
        yield second.init_transactions()  # aborts the first one's transaction
        self.assertEqual(second.producer_id, first.producer_id)
        self.assertGreater(second.producer_epoch, first.producer_epoch)

        late = first.send(TOPIC, b"zombie-2", partition=0)
        with self.assertRaises(ProducerFencedError) as cm:
            yield late
        self.assertIn("tw-fence", str(cm.exception))
        with self.assertRaises(ProducerFencedError):
            yield first.commit_transaction()
        with self.assertRaises(ProducerFencedError):  # fatal: nothing works any more
            yield first.begin_transaction()

        yield second.begin_transaction()
        yield second.send(TOPIC, b"live", partition=1)
        yield second.commit_transaction()
        got, _, _ = yield self._read("read_committed")
        self.assertEqual(got, [b"live"])

    @defer.inlineCallbacks
    def test_stop_aborts_an_open_transaction(self):
        yield self._topic()
        too_long = self._producer("tw-stop", transaction_timeout_ms=10**9)
        with self.assertRaises(BrokerResponseError) as cm:  # above transaction.max.timeout.ms
            yield too_long.init_transactions()
        self.assertEqual(cm.exception.name, "INVALID_TRANSACTION_TIMEOUT")
        producer = self._producer("tw-stop")
        yield producer.init_transactions()
        yield producer.begin_transaction()
        yield producer.send(TOPIC, b"never", partition=0)
        yield producer.stop()
        got, ends, _ = yield self._read("read_committed")
        self.assertEqual(got, [])
        _, uncommitted_ends, _ = yield self._read("read_uncommitted")
        # Aborted, not left open: the last stable offset moved past it.
        self.assertEqual(ends, uncommitted_ends)
        self.assertEqual(ends[TopicPartition(TOPIC, 0)], 2)  # the record and its marker

    @defer.inlineCallbacks
    def test_offsets_with_group_metadata_and_a_stale_generation(self):
        yield self._topic()
        seed = Producer(reactor, bootstrap_servers=self.bootstrap)
        yield seed.start()
        yield defer.gatherResults([seed.send(TOPIC, b"in-%d" % i, partition=0) for i in range(5)])
        yield seed.stop()
        consumer = Consumer(
            reactor,
            TOPIC,
            bootstrap_servers=self.bootstrap,
            group_id="tw-eos",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        yield consumer.start()
        self.addCleanup(consumer.stop)
        got = []
        while len(got) < 5:
            batches = yield consumer.getmany(timeout_ms=500)
            got += [r for records in batches.values() for r in records]
        meta = consumer.group_metadata()
        self.assertEqual(meta.group_id, "tw-eos")
        self.assertGreaterEqual(meta.generation_id, 1)
        self.assertTrue(meta.member_id)

        producer = self._producer("tw-eos-0")
        yield producer.init_transactions()
        yield producer.begin_transaction()
        producer.send(TOPIC, b"out", partition=1)
        tp = TopicPartition(TOPIC, 0)
        yield producer.send_offsets_to_transaction({tp: got[-1].offset + 1}, meta)
        yield producer.commit_transaction()
        committed = yield consumer.committed_offsets([tp])
        self.assertEqual(committed[tp], 5)

        yield producer.begin_transaction()
        stale = ConsumerGroupMetadata("tw-eos", meta.generation_id + 1, meta.member_id)
        with self.assertRaises(BrokerResponseError) as cm:
            yield producer.send_offsets_to_transaction({tp: 1}, stale)
        self.assertEqual(cm.exception.name, "ILLEGAL_GENERATION")
        with self.assertRaises(TransactionStateError) as cm:  # abortable: commit refuses
            yield producer.commit_transaction()
        self.assertIn("ILLEGAL_GENERATION", str(cm.exception))
        yield producer.abort_transaction()
        committed = yield consumer.committed_offsets([tp])
        self.assertEqual(committed[tp], 5)  # the stale commit never happened
