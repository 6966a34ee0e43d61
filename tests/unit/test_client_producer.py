"""Producer unit tests: batching, retries, reconnects and timeouts on task.Clock."""

import pytest
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from pluglog.client import Producer
from pluglog.client.errors import BrokerResponseError
from pluglog.client.producer import KafkaTimeoutError, RecordMetadata, RecordTooLargeError
from pluglog.errors import ConfigError
from pluglog.partitioners import murmur2, to_positive
from pluglog.protocol import PRODUCE
from pluglog.protocol.records import parse_batch
from tests.unit.client_harness import ScriptedCluster, produce_answer


def batches_of(body):
    out = []
    for t in body["topic_data"]:
        for p in t["partition_data"]:
            out.append((t["name"], p["index"], parse_batch(p["records"])))
    return out


class ProducerTests(SynchronousTestCase):
    def make(self, topics=None, **config):
        self.cluster = ScriptedCluster(topics)
        self.cluster.install(self)
        self.offsets = {}

        def on_produce(conn, version, body):
            base = {}
            for topic, partition, batch in batches_of(body):
                base[(topic, partition)] = self.offsets.get((topic, partition), 0)
                self.offsets[(topic, partition)] = base[(topic, partition)] + len(batch.records)
            return produce_answer(body, base)

        self.cluster.handlers[PRODUCE] = on_produce
        producer = Producer(self.cluster.clock, bootstrap_servers="b1:9092", **config)
        d = producer.start()
        self.cluster.pump()
        self.successResultOf(d)
        return producer

    def test_linger_batches_records_into_one_request(self):
        producer = self.make(linger_ms=10)
        ds = [producer.send("t", b"v%d" % i, key=b"k") for i in range(3)]
        self.cluster.pump()
        self.assertEqual(self.cluster.of(PRODUCE), [])
        self.cluster.clock.advance(0.011)
        self.cluster.pump()
        (body,) = self.cluster.of(PRODUCE)
        ((_, _, batch),) = batches_of(body)
        self.assertEqual([r.value for r in batch.records], [b"v0", b"v1", b"v2"])
        self.assertEqual((batch.producer_id, batch.base_sequence), (4000, 0))
        self.assertEqual(body["acks"], -1)
        metas = [self.successResultOf(d) for d in ds]
        self.assertEqual([m.offset for m in metas], [0, 1, 2])
        self.assertIsInstance(metas[0], RecordMetadata)

    def test_batch_size_sends_without_waiting(self):
        producer = self.make(linger_ms=60000, batch_size=300)
        for _ in range(4):
            producer.send("t", b"x" * 100)
        self.cluster.pump()
        # Two full batches left at once (one in flight per partition, then the next).
        self.assertGreaterEqual(len(self.cluster.of(PRODUCE)), 1)
        self.assertEqual(self.cluster.clock.seconds(), 1000)

    def test_keyed_records_follow_murmur2(self):
        producer = self.make(topics={"t": 5}, linger_ms=0)
        for key in (b"alpha", b"beta", b"gamma", b"delta"):
            d = producer.send("t", b"v", key=key)
            self.cluster.clock.advance(0)
            self.cluster.pump()
            meta = self.successResultOf(d)
            self.assertEqual(meta.partition, to_positive(murmur2(key)) % 5)

    def test_retriable_error_retries_same_sequence_after_metadata_refresh(self):
        producer = self.make(linger_ms=0, retry_backoff_ms=100)
        first = [True]
        handler = self.cluster.handlers[PRODUCE]

        def not_leader_once(conn, version, body):
            if first:
                first.clear()
                return produce_answer(body, {}, {("t", 0): 6})
            return handler(conn, version, body)

        self.cluster.handlers[PRODUCE] = not_leader_once
        d = producer.send("t", b"v", headers=[("h", b"1")])
        self.cluster.clock.advance(0)
        self.cluster.pump()
        self.assertNoResult(d)
        metadata_before = len(self.cluster.of(3))
        self.cluster.clock.advance(0.1)
        self.cluster.pump()
        self.assertGreater(len(self.cluster.of(3)), metadata_before)
        self.assertEqual(self.successResultOf(d).offset, 0)
        first_try, second_try = self.cluster.of(PRODUCE)
        # The resent batch is byte-identical: same producer id and sequence.
        self.assertEqual(
            bytes(first_try["topic_data"][0]["partition_data"][0]["records"]),
            bytes(second_try["topic_data"][0]["partition_data"][0]["records"]),
        )

    def test_connection_loss_reconnects_with_backoff_and_resends(self):
        producer = self.make(linger_ms=0, reconnect_backoff_ms=50, retry_backoff_ms=10)
        self.cluster.handlers[PRODUCE] = lambda conn, v, body: None  # never answer
        d = producer.send("t", b"v")
        self.cluster.clock.advance(0)
        self.cluster.pump()
        self.assertEqual(len(self.cluster.of(PRODUCE)), 1)
        self.cluster.refuse = 2
        for conn in list(self.cluster.conns):
            conn.drop()
        self.make_handler_answer()
        for _ in range(40):
            self.cluster.clock.advance(0.01)
            self.cluster.pump()
        self.assertEqual(self.successResultOf(d).offset, 0)
        attempts = [t for t, host, _ in self.cluster.connect_attempts if host == "b1"]
        # Refused twice, then connected; each retry waited for its backoff.
        gaps = [b - a for a, b in zip(attempts, attempts[1:])]
        self.assertTrue(all(g > 0.03 for g in gaps[-2:]), gaps)

    def make_handler_answer(self):
        def answer(conn, version, body):
            return produce_answer(body, {("t", 0): 0})

        self.cluster.handlers[PRODUCE] = answer

    def test_request_timeout_then_retry(self):
        producer = self.make(linger_ms=0, request_timeout_ms=1000, retry_backoff_ms=10)
        self.cluster.handlers[PRODUCE] = lambda conn, v, body: None
        d = producer.send("t", b"v")
        self.cluster.clock.advance(0)
        self.cluster.pump()
        self.make_handler_answer()
        self.cluster.clock.advance(1.0)
        for _ in range(5):
            self.cluster.clock.advance(0.02)
            self.cluster.pump()
        self.assertEqual(self.successResultOf(d).offset, 0)
        self.assertEqual(len(self.cluster.of(PRODUCE)), 2)

    def test_delivery_timeout_fails_the_record(self):
        producer = self.make(linger_ms=0, delivery_timeout_ms=500, retry_backoff_ms=100)
        self.cluster.handlers[PRODUCE] = lambda conn, v, body: produce_answer(
            body, {}, {("t", 0): 19}
        )
        d = producer.send("t", b"v")
        for _ in range(10):
            self.cluster.clock.advance(0.1)
            self.cluster.pump()
        failure = self.failureResultOf(d, BrokerResponseError)
        self.assertEqual(failure.value.name, "NOT_ENOUGH_REPLICAS")

    def test_fatal_error_fails_at_once(self):
        producer = self.make(linger_ms=0)
        self.cluster.handlers[PRODUCE] = lambda conn, v, body: produce_answer(
            body, {}, {("t", 0): 10}
        )
        d = producer.send("t", b"v")
        self.cluster.clock.advance(0)
        self.cluster.pump()
        self.assertEqual(self.failureResultOf(d, BrokerResponseError).value.error_code, 10)
        self.assertEqual(len(self.cluster.of(PRODUCE)), 1)

    def test_acks_zero_fires_without_answer(self):
        producer = self.make(linger_ms=0, acks=0)
        self.assertFalse(producer.idempotent)
        d = producer.send("t", b"v")
        self.cluster.clock.advance(0)
        self.cluster.pump()
        self.assertEqual(self.successResultOf(d).offset, -1)
        self.assertEqual(self.cluster.of(PRODUCE)[0]["acks"], 0)

    def test_buffer_memory_pushes_back(self):
        producer = self.make(linger_ms=0, buffer_memory=250, max_block_ms=1000)
        self.cluster.handlers[PRODUCE] = lambda conn, v, body: None
        first = producer.send("t", b"x" * 200)
        parked = producer.send("t", b"y" * 200)
        self.assertNoResult(producer.wait_for_room())
        self.cluster.clock.advance(0)
        self.cluster.pump()
        self.assertEqual(len(self.cluster.of(PRODUCE)), 1)  # only the first went out
        self.cluster.clock.advance(1.0)
        self.failureResultOf(parked, KafkaTimeoutError)
        self.assertNoResult(first)

    def test_parked_record_enters_when_room_frees(self):
        producer = self.make(linger_ms=0, buffer_memory=250)
        first = producer.send("t", b"x" * 200)
        second = producer.send("t", b"y" * 200)
        room = producer.wait_for_room()
        for _ in range(3):
            self.cluster.clock.advance(0)
            self.cluster.pump()
        self.assertEqual(self.successResultOf(first).offset, 0)
        self.assertEqual(self.successResultOf(second).offset, 1)
        self.successResultOf(room)

    def test_flush_and_stop(self):
        producer = self.make(linger_ms=60000)
        d = producer.send("t", b"v")
        flushed = producer.flush()
        self.cluster.pump()
        self.successResultOf(d)
        self.successResultOf(flushed)
        stopped = producer.stop()
        self.assertTrue(all(c.transport.disconnecting for c in self.cluster.conns))
        for conn in self.cluster.conns:
            conn.drop()
        self.successResultOf(stopped)
        self.failureResultOf(producer.send("t", b"v"))

    def test_record_too_large(self):
        producer = self.make(max_request_size=1000)
        self.failureResultOf(producer.send("t", b"x" * 2000), RecordTooLargeError)

    def test_unknown_topic_fails(self):
        producer = self.make()
        self.cluster.handlers[3] = lambda conn, v, body: {
            "brokers": [{"node_id": 1, "host": "b1", "port": 9092, "rack": None}],
            "cluster_id": "u",
            "controller_id": 1,
            "topics": [{"error_code": 3, "name": "nope", "partitions": []}],
        }
        d = producer.send("nope", b"v")
        self.cluster.pump()
        self.assertEqual(self.failureResultOf(d, BrokerResponseError).value.error_code, 3)

    def test_config_names_and_validation(self):
        self.cluster = ScriptedCluster()
        p = Producer(self.cluster.clock, **{"linger.ms": 7, "batch_size": 10, "acks": "1"})
        self.assertEqual((p.config["linger.ms"], p.config["batch.size"], p.acks), (7, 10, 1))
        self.assertFalse(p.idempotent)  # acks=1 turns the default idempotence off
        with self.assertRaises(ConfigError) as cm:
            Producer(self.cluster.clock, acks=1, enable_idempotence=True)
        self.assertIn("acks", str(cm.exception))
        with self.assertRaises(ConfigError) as cm:
            Producer(self.cluster.clock, linger_mss=3)
        self.assertIn("linger.mss", str(cm.exception))
        with self.assertRaises(ConfigError):
            Producer(self.cluster.clock, compression_type="brotli")
        with self.assertRaises(ConfigError):
            Producer(self.cluster.clock, partitioner="nope")


# -- serializers: plugin names with schema.registry.url, providers, callables --


def test_serializers_by_name_provider_or_callable():
    from pluglog.client import Consumer, plugins
    from pluglog.serialization.avro import AvroSerializer
    from pluglog.serializers import JsonSerializer

    producer = Producer(
        Clock(),
        bootstrap_servers="h:1",
        key_serializer="avro",
        value_serializer=lambda v: v.upper().encode(),
        schema_registry_url="http://registry.example:8081",
    )
    assert isinstance(producer.key_serializer, AvroSerializer)
    assert producer.key_serializer.is_key  # the <topic>-key subject
    assert producer.key_serializer.registry.url == "http://registry.example:8081"
    assert producer.value_serializer.serialize("t", "abc") == b"ABC"
    consumer = Consumer(
        Clock(),
        bootstrap_servers="h:1",
        value_deserializer="avro",
        key_deserializer=JsonSerializer(),
        schema_registry_url="http://registry.example:8081",
    )
    assert not consumer.value_deserializer.is_key
    assert consumer.value_deserializer.registry.url == "http://registry.example:8081"
    assert isinstance(consumer.key_deserializer, JsonSerializer)
    assert plugins.build_serializer(bytes.upper).deserialize("t", b"x") == b"X"


@pytest.mark.parametrize(
    "config, message",
    [
        ({"value_serializer": "avro", "schema_registry_url": "ftp://x"}, "ftp://x"),
        ({"value_serializer": "nosuch"}, "nosuch"),
        ({"value_serializer": 42}, "42"),
    ],
)
def test_bad_serializer_config_names_the_value(config, message):
    with pytest.raises(ConfigError, match=message):
        Producer(Clock(), bootstrap_servers="h:1", **config)


class PipelineTests(SynchronousTestCase):
    """Idempotent batches of one partition in flight together, retries in order."""

    def setUp(self):
        self.cluster = ScriptedCluster({"t": 1})
        self.cluster.install(self)
        self.held = []  # (conn, header, body) of unanswered Produce requests
        self.cluster.handlers[PRODUCE] = lambda conn, v, body: None

    def start(self, **config):
        producer = Producer(
            self.cluster.clock, bootstrap_servers="b1:9092", linger_ms=60000, **config
        )
        d = producer.start()
        self.cluster.pump()
        self.successResultOf(d)
        return producer

    def produce_requests(self):
        conn = next(c for c in self.cluster.conns if c.unanswered)
        headers = [h for h in conn.unanswered if h.api_key == PRODUCE]
        conn.unanswered = [h for h in conn.unanswered if h.api_key != PRODUCE]
        bodies = self.cluster.of(PRODUCE)[-len(headers) :]
        return conn, list(zip(headers, bodies))

    def sequences(self, bodies):
        return [batches_of(b)[0][2].base_sequence for b in bodies]

    def test_idempotent_batches_pipeline_and_retry_in_send_order(self):
        producer = self.start(batch_size=300, retry_backoff_ms=100)
        ds = [producer.send("t", b"x" * 100) for _ in range(8)]  # 2 per batch
        flushed = producer.flush()
        self.cluster.pump()
        conn, sent = self.produce_requests()
        # Four batches on the wire at once (max.in.flight 5), sequences 0, 2, 4, 6.
        self.assertEqual(self.sequences(b for _, b in sent), [0, 2, 4, 6])
        # The first fails retriably; the broker refuses the rest as out of order.
        self.cluster.answer(conn, sent[0][0], produce_answer(sent[0][1], {}, {("t", 0): 6}))
        for header, body in sent[1:]:
            self.cluster.answer(conn, header, produce_answer(body, {}, {("t", 0): 45}))
        for d in ds:
            self.assertNoResult(d)
        offset = 0
        for expected in (0, 2, 4, 6):
            self.cluster.clock.advance(0.1)
            self.cluster.pump()
            conn, again = self.produce_requests()
            # Retries go one at a time, oldest first, with their old sequence.
            self.assertEqual(self.sequences(b for _, b in again), [expected])
            self.cluster.answer(conn, again[0][0], produce_answer(again[0][1], {("t", 0): offset}))
            offset += 2
        metas = [self.successResultOf(d) for d in ds]
        self.assertEqual([m.offset for m in metas], list(range(8)))
        self.assertEqual(producer.unacked, 0)
        self.successResultOf(flushed)

    def test_without_idempotence_one_batch_per_partition_in_flight(self):
        producer = self.start(batch_size=300, acks=1)
        for _ in range(6):
            producer.send("t", b"x" * 100)
        self.cluster.pump()
        conn, sent = self.produce_requests()
        self.assertEqual(len(sent), 1)
        self.cluster.answer(conn, sent[0][0], produce_answer(sent[0][1], {("t", 0): 0}))
        self.cluster.pump()
        self.assertEqual(len(self.produce_requests()[1]), 1)
