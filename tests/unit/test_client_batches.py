"""The producer's record buffer and RecordDeferreds, C and Python alike.

``Batch.add`` (send()'s common case) must encode exactly what
``records.encode_record_fields`` does and keep the producer's counters; the
Deferreds it makes sit outside the cyclic garbage collector until a callback
list is made or they get their result, and ``fire_acks`` must leave each one
as ``callback()`` would -- whether it had callbacks when acknowledged, got
them afterwards, was paused, cancelled, awaited or made under Deferred
debugging -- while one nobody holds may be left unfired. Both the C
implementation and the Python one run every test.
"""

import gc
import weakref

import pytest
from twisted.internet import defer
from twisted.trial.unittest import SynchronousTestCase

from pluglog.client import Producer, batches
from pluglog.client.batches import Batch, RecordMetadata
from pluglog.client.cluster import TopicPartition
from pluglog.protocol import PRODUCE
from pluglog.protocol.records import encode_record_fields
from tests.unit.client_harness import ScriptedCluster, produce_answer


class PyBatch(batches.PyRecordBuffer):
    __slots__ = ()

    def __init__(self, base_ts, limit):
        self.records, self.deferreds = [], []
        self.size, self.base_ts, self.max_ts, self.limit = (
            batches.BATCH_OVERHEAD,
            base_ts,
            base_ts,
            limit,
        )


def c_batch(base_ts, limit):
    return Batch(TopicPartition("t", 0), base_ts, 0.0, limit)


class Account:
    """What add() reads and updates on the producer."""

    def __init__(self, memory=1 << 30):
        self.buffered_bytes = 0
        self.unacked = 0
        self._buffer_memory = memory


IMPLS = {
    "c": (c_batch, batches.fire_acks),
    "python": (
        PyBatch,
        lambda ds, *a: batches.py_fire_acks(ds, *a, RecordMetadata),
    ),
}


@pytest.fixture(params=sorted(IMPLS))
def impl(request):
    if request.param == "c":
        assert batches._RecordBuffer is not batches.PyRecordBuffer, (
            "pluglog._producerbuffer is not built"
        )
    return IMPLS[request.param]


def test_add_encodes_like_the_reference_and_keeps_the_counters(impl):
    make, _ = impl
    batch, account = make(1000, 1 << 20), Account()
    values = [b"", b"v" * 200, b"w" * 70000]
    ds = [batch.add(v, 1000 + 5 * i, account) for i, v in enumerate(values)]
    assert batch.records == [
        encode_record_fields(None, v, (), 5 * i, i) for i, v in enumerate(values)
    ]
    assert batch.deferreds == ds and all(isinstance(d, defer.Deferred) for d in ds)
    size = sum(map(len, batch.records))
    assert (batch.size, account.buffered_bytes, account.unacked) == (61 + size, size, 3)
    assert batch.max_ts == 1010
    assert batch.add(b"x", 900, account) is not None and batch.max_ts == 1010  # earlier ts


def test_add_refuses_past_the_batch_limit_and_buffer_memory(impl):
    make, _ = impl
    one = len(encode_record_fields(None, b"x" * 100, (), 0, 0))
    batch, account = make(0, 61 + one), Account()
    assert batch.add(b"x" * 100, 0, account) is not None
    assert batch.add(b"y", 0, account) is None  # the batch is full
    other, small = make(0, 1 << 20), Account(memory=one + 5)
    assert other.add(b"x" * 100, 0, small) is not None
    assert other.add(b"z" * 10, 0, small) is None  # buffer.memory is full
    assert (len(other.records), small.unacked, small.buffered_bytes) == (1, 1, one)


def fired(make, fire, setup, base_offset=7):
    """Deferreds from add(), ``setup(ds)`` on them, then acknowledged."""
    batch, account = make(0, 1 << 20), Account()
    ds = [batch.add(b"v%d" % i, 0, account) for i in range(4)]
    extra = setup(ds)
    fire(batch.deferreds, "t", 3, base_offset, 42)
    return ds, extra


def test_acked_with_and_without_callbacks_and_callbacks_added_after(impl):
    make, fire = impl
    got = []

    def setup(ds):
        ds[1].addCallback(lambda meta: got.append(meta) or "chained")

    ds, _ = fired(make, fire, setup)
    assert got == [RecordMetadata("t", 3, 8, 42)]
    assert ds[1].result == "chained"
    late = []
    ds[2].addCallback(late.append)  # added after the ack: runs at once
    assert late == [RecordMetadata("t", 3, 9, 42)] and type(late[0]) is RecordMetadata
    assert ds[0].called and ds[0].result == RecordMetadata("t", 3, 7, 42)
    with pytest.raises(defer.AlreadyCalledError):
        ds[3].callback(None)
    assert [SynchronousTestCase().successResultOf(d).offset for d in (ds[0], ds[3])] == [7, 10]


def test_acks_0_paused_cancelled_and_awaited(impl):
    make, fire = impl
    failures = []

    @defer.inlineCallbacks
    def waiter(d):
        meta = yield d
        return meta.offset

    def setup(ds):
        ds[0].pause()
        ds[1].cancel()
        ds[1].addErrback(failures.append)
        return waiter(ds[2])

    ds, waiting = fired(make, fire, setup, base_offset=-1)
    assert not hasattr(ds[0], "result") or ds[0].paused
    ds[0].unpause()
    assert ds[0].result == RecordMetadata("t", 3, -1, 42)
    assert failures[0].check(defer.CancelledError)  # a cancelled one stays cancelled
    assert waiting.result == -1
    assert ds[3].result.offset == -1


def test_a_deferred_only_the_batch_holds_still_runs_its_callbacks(impl):
    make, fire = impl
    batch, account = make(0, 1 << 20), Account()
    got = []
    batch.add(b"a", 0, account).addCallback(got.append)  # then dropped by the caller
    batch.add(b"b", 0, account)  # dropped with no callbacks: nobody can see it
    ref = weakref.ref(batch.add(b"c", 0, account))  # a weak reference sees it
    fire(batch.deferreds, "t", 0, 5, 1)
    assert got == [RecordMetadata("t", 0, 5, 1)]
    assert ref().result == RecordMetadata("t", 0, 7, 1)


def test_record_deferreds_leave_the_collector_until_they_can_form_cycles():
    assert batches._RecordBuffer is not batches.PyRecordBuffer
    batch, account = c_batch(0, 1 << 20), Account()
    waiting, with_callback, cyclic = (batch.add(b"v", 0, account) for _ in range(3))
    assert not gc.is_tracked(waiting)
    with_callback.addCallback(lambda meta: meta)
    assert gc.is_tracked(with_callback)
    cyclic.me = cyclic  # a cycle through an attribute: tracked again on ack
    batches.fire_acks(batch.deferreds, "t", 0, 0, 0)
    assert gc.is_tracked(waiting) and gc.is_tracked(cyclic)
    assert waiting.result.offset == 0 and with_callback.result.offset == 1
    ref = weakref.ref(cyclic)
    batch.deferreds = []
    del cyclic
    gc.collect()
    assert ref() is None  # the collector found the cycle


def test_a_cycle_through_a_callback_is_collected():
    batch, account = c_batch(0, 1 << 20), Account()
    d = batch.add(b"v", 0, account)
    d.addCallback(lambda meta, d=d: meta)  # d -> its callbacks -> d
    ref = weakref.ref(d)
    batch.deferreds = []
    del d
    gc.collect()
    assert ref() is None


def test_deferred_debugging_goes_through_init():
    defer.setDebugging(True)
    try:
        batch, account = c_batch(0, 1 << 20), Account()
        d = batch.add(b"v", 0, account)
        assert d._debugInfo is not None and d._debugInfo.creator
    finally:
        defer.setDebugging(False)
    batches.fire_acks(batch.deferreds, "t", 0, 4, 0)
    assert d.result.offset == 4


class ProducerAckTests(SynchronousTestCase):
    """Through send() and a scripted broker: what the application sees."""

    def test_deferreds_fire_with_their_metadata_with_or_without_callbacks(self):
        cluster = ScriptedCluster({"t": 1})
        cluster.install(self)
        cluster.handlers[PRODUCE] = lambda conn, v, body: produce_answer(body, {("t", 0): 100})

        producer = Producer(cluster.clock, bootstrap_servers="b1:9092", linger_ms=5)
        self.successResultOf(self._started(producer, cluster))
        early = []
        ds = [producer.send("t", b"r%d" % i) for i in range(5)]
        self.assertIs(producer._lanes.get("t"), producer._open[TopicPartition("t", 0)])
        ds[0].addCallback(lambda meta: early.append(meta) or meta)
        for _ in range(1000):  # dropped by the application: never observed
            producer.send("t", b"unheld")
        cluster.clock.advance(0.006)
        cluster.pump()
        self.assertEqual(early, [RecordMetadata("t", 0, 100, 1_000_000)])  # the clock: 1000 s
        late = []
        ds[4].addCallback(late.append)  # after the ack: runs at once
        self.assertEqual(late, [RecordMetadata("t", 0, 104, 1_000_000)])
        offsets = [self.successResultOf(d).offset for d in ds[:4]]
        self.assertEqual(offsets, [100, 101, 102, 103])
        self.assertEqual((producer.unacked, producer.buffered_bytes), (0, 0))
        self.successResultOf(producer.flush())

    def _started(self, producer, cluster):
        d = producer.start()
        cluster.pump()
        return d


def test_a_bare_record_buffer_refuses_add_instead_of_crashing():
    from pluglog import _producerbuffer

    with pytest.raises(TypeError, match="records and deferreds"):
        _producerbuffer.RecordBuffer().add(b"v", 0, Account())
    with pytest.raises(TypeError, match="bytes"):
        c_batch(0, 1 << 20).add(bytearray(b"v"), 0, Account())


class FastSendTests(SynchronousTestCase):
    """Producer.send's common case in C: the same results as the method."""

    def make(self, producer_class=Producer, topics=None):
        cluster = ScriptedCluster(topics or {"t": 1, "u": 2})
        cluster.install(self)
        cluster.handlers[PRODUCE] = lambda conn, v, body: produce_answer(
            body,
            {(t["name"], p["index"]): 0 for t in body["topic_data"] for p in t["partition_data"]},
        )
        producer = producer_class(cluster.clock, bootstrap_servers="b1:9092", linger_ms=5)
        d = producer.start()
        cluster.pump()
        self.successResultOf(d)
        return cluster, producer

    def test_send_is_the_c_short_path_and_reads_as_producer_send(self):
        import inspect

        _, producer = self.make()
        self.assertIsInstance(producer.send, batches.FastSend)
        self.assertEqual(
            inspect.signature(producer.send), inspect.signature(Producer.send.__get__(producer))
        )
        self.assertEqual(producer.send.__doc__, Producer.send.__doc__)

    def test_every_kind_of_send_lands_where_the_method_puts_it(self):
        cluster, producer = self.make()
        ds = [
            producer.send("t", b"a"),  # no lane yet: the method
            producer.send("t", b"b"),  # the lane, in C
            producer.send("t", b"c", key=b"k"),  # a keyword: the method
            producer.send("t", bytearray(b"d")),  # not bytes: the method
            producer.send("u", b"e"),  # two partitions: never a lane
            producer.send("t", b"f", None, None, [("h", b"1")]),  # positional headers
        ]
        cluster.clock.advance(0.006)
        cluster.pump()
        metas = [self.successResultOf(d) for d in ds]
        self.assertEqual(
            [(m.topic, m.offset) for m in metas if m.topic == "t"], [("t", i) for i in range(5)]
        )
        sent = [r for body in cluster.of(PRODUCE) for r in _records(body, "t")]
        self.assertEqual(
            [(r.key, r.value, r.headers) for r in sent],
            [
                (None, b"a", []),
                (None, b"b", []),
                (b"k", b"c", []),
                (None, b"d", []),
                (None, b"f", [("h", b"1")]),
            ],
        )
        with self.assertRaises(TypeError):
            producer.send("t")  # the method's own error for a missing value

    def test_a_subclass_send_is_not_shadowed_and_a_dropped_producer_is_collected(self):
        calls = []

        class Counting(Producer):
            def send(self, topic, value, **kw):
                calls.append(topic)
                return super().send(topic, value, **kw)

        _, producer = self.make(Counting)
        producer.send("t", b"x")
        self.assertEqual(calls, ["t"])
        _, plain = self.make()
        ref = weakref.ref(plain)
        del plain
        gc.collect()
        self.assertIsNone(ref())  # producer <-> its FastSend is a collectable cycle


def _records(body, topic):
    from pluglog.protocol.records import parse_batch

    for t in body["topic_data"]:
        if t["name"] == topic:
            for p in t["partition_data"]:
                yield from parse_batch(p["records"]).records
