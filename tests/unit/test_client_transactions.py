"""The transactional producer on task.Clock against a scripted coordinator:
the order of its requests, retries of the coordinator's retriable errors,
fencing, abortable errors and the calls refused in the wrong state."""

from twisted.trial.unittest import SynchronousTestCase

from pluglog import errors as codes
from pluglog.client import (
    Producer,
    ProducerFencedError,
    TopicPartition,
    TransactionAbortedError,
    TransactionStateError,
)
from pluglog.client.errors import BrokerResponseError
from pluglog.errors import ConfigError
from pluglog.protocol import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    PRODUCE,
    TXN_OFFSET_COMMIT,
)
from pluglog.protocol.records import parse_batch
from tests.unit.client_harness import ScriptedCluster, produce_answer


def scripted(codes_list):
    """A handler part: the next code of ``codes_list`` (0 once it is empty)."""
    return lambda: codes_list.pop(0) if codes_list else 0


class TransactionalProducerTests(SynchronousTestCase):
    def make(self, topics=None, **config):
        self.cluster = cluster = ScriptedCluster(topics or {"t": 2})
        cluster.install(self)
        self.init_codes, self.add_codes, self.end_codes = [], [], []
        self.produce_codes = {}
        self.offsets = {}
        h = cluster.handlers
        h[FIND_COORDINATOR] = lambda conn, v, body: {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "node_id": 1,
            "host": "b1",
            "port": 9092,
        }
        init_code = scripted(self.init_codes)
        h[INIT_PRODUCER_ID] = lambda conn, v, body: {
            "throttle_time_ms": 0,
            "error_code": (code := init_code()),
            "producer_id": -1 if code else 7,
            "producer_epoch": -1 if code else 3,
        }
        add_code = scripted(self.add_codes)

        def on_add(conn, version, body):
            code = add_code()
            return {
                "throttle_time_ms": 0,
                "results_by_topic_v3_and_below": [
                    {
                        "name": t["name"],
                        "results_by_partition": [
                            {"partition_index": p, "partition_error_code": code}
                            for p in t["partitions"]
                        ],
                    }
                    for t in body["v3_and_below_topics"]
                ],
            }

        h[ADD_PARTITIONS_TO_TXN] = on_add
        end_code = scripted(self.end_codes)
        h[END_TXN] = lambda conn, v, body: {"throttle_time_ms": 0, "error_code": end_code()}
        h[ADD_OFFSETS_TO_TXN] = lambda conn, v, body: {"throttle_time_ms": 0, "error_code": 0}
        h[TXN_OFFSET_COMMIT] = lambda conn, v, body: {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": p["partition_index"], "error_code": 0}
                        for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ],
        }

        def on_produce(conn, version, body):
            base = {}
            for t in body["topic_data"]:
                for p in t["partition_data"]:
                    key = (t["name"], p["index"])
                    base[key] = self.offsets.get(key, 0)
                    self.offsets[key] = base[key] + len(parse_batch(p["records"]).records)
            return produce_answer(body, base, self.produce_codes)

        h[PRODUCE] = on_produce
        return Producer(
            cluster.clock,
            bootstrap_servers="b1:9092",
            transactional_id="tx",
            linger_ms=5,
            **config,
        )

    def run_until(self, d, seconds=5.0):
        """Pump and advance the clock until ``d`` has a result."""
        done = []
        d.addBoth(lambda result: (done.append(True), result)[1])
        for _ in range(int(seconds / 0.01)):
            self.cluster.pump()
            if done:
                break
            self.cluster.clock.advance(0.01)
        return d

    def keys(self):
        return [key for key, _, _ in self.cluster.requests if key not in (3, 18)]

    def test_requests_in_order_with_coordinator_retries(self):
        producer = self.make()
        self.init_codes += [codes.CONCURRENT_TRANSACTIONS, codes.COORDINATOR_LOAD_IN_PROGRESS]
        self.successResultOf(self.run_until(producer.init_transactions()))
        (find,) = [b for b in self.cluster.of(FIND_COORDINATOR)]
        self.assertEqual((find["key"], find["key_type"]), ("tx", 1))
        inits = self.cluster.of(INIT_PRODUCER_ID)
        self.assertEqual(len(inits), 3)  # two retriable answers, then the id
        self.assertEqual(inits[-1]["transactional_id"], "tx")
        self.assertEqual((producer.producer_id, producer.producer_epoch), (7, 3))

        self.successResultOf(producer.begin_transaction())
        # NOT_COORDINATOR: found again, then the same request again.
        self.add_codes += [codes.NOT_COORDINATOR, codes.CONCURRENT_TRANSACTIONS]
        sent = [producer.send("t", b"v%d" % i, partition=i % 2) for i in range(4)]
        commit = self.run_until(producer.commit_transaction())
        self.successResultOf(commit)
        self.assertEqual([self.successResultOf(d).offset for d in sent], [0, 0, 1, 1])
        order = self.keys()
        self.assertEqual(order.count(FIND_COORDINATOR), 2)
        self.assertEqual(order.count(ADD_PARTITIONS_TO_TXN), 3)
        # Every Produce after the partitions were added, EndTxn after every ack.
        last_add = len(order) - 1 - order[::-1].index(ADD_PARTITIONS_TO_TXN)
        self.assertGreater(order.index(PRODUCE), last_add)
        self.assertEqual(order[-1], END_TXN)
        add = self.cluster.of(ADD_PARTITIONS_TO_TXN)[-1]
        self.assertEqual(add["v3_and_below_topics"], [{"name": "t", "partitions": [0, 1]}])
        self.assertEqual(
            (add["v3_and_below_producer_id"], add["v3_and_below_producer_epoch"]), (7, 3)
        )
        (end,) = self.cluster.of(END_TXN)
        self.assertEqual((end["transactional_id"], end["committed"]), ("tx", True))
        for body in self.cluster.of(PRODUCE):
            self.assertEqual(body["transactional_id"], "tx")
            for t in body["topic_data"]:
                for p in t["partition_data"]:
                    batch = parse_batch(p["records"])
                    self.assertTrue(batch.attributes & 0x10)  # the transactional bit
                    self.assertEqual((batch.producer_id, batch.producer_epoch), (7, 3))

        # The next transaction adds its partitions again.
        self.successResultOf(producer.begin_transaction())
        producer.send("t", b"again", partition=0)
        self.successResultOf(self.run_until(producer.commit_transaction()))
        self.assertEqual(
            self.cluster.of(ADD_PARTITIONS_TO_TXN)[-1]["v3_and_below_topics"],
            [{"name": "t", "partitions": [0]}],
        )
        self.assertEqual(len(self.cluster.of(END_TXN)), 2)

    def test_offsets_go_to_both_coordinators(self):
        producer = self.make()
        self.successResultOf(self.run_until(producer.init_transactions()))
        self.successResultOf(producer.begin_transaction())
        d = producer.send_offsets_to_transaction({TopicPartition("in", 2): 42}, "g1")
        self.successResultOf(self.run_until(d))
        (add,) = self.cluster.of(ADD_OFFSETS_TO_TXN)
        self.assertEqual((add["group_id"], add["producer_id"]), ("g1", 7))
        (commit,) = self.cluster.of(TXN_OFFSET_COMMIT)
        self.assertEqual(commit["group_id"], "g1")
        self.assertEqual(commit["topics"][0]["partitions"][0]["committed_offset"], 42)
        self.successResultOf(self.run_until(producer.commit_transaction()))
        (end,) = self.cluster.of(END_TXN)  # offsets alone make a transaction
        self.assertTrue(end["committed"])

    def test_fenced_producer_fails_with_a_clear_error(self):
        producer = self.make()
        self.successResultOf(self.run_until(producer.init_transactions()))
        self.successResultOf(producer.begin_transaction())
        self.produce_codes[("t", 0)] = codes.PRODUCER_FENCED
        d = producer.send("t", b"zombie", partition=0)
        commit = self.run_until(producer.commit_transaction())
        failure = self.failureResultOf(d, ProducerFencedError)
        self.assertIn("transactional.id 'tx'", str(failure.value))
        self.failureResultOf(commit, ProducerFencedError)
        self.failureResultOf(producer.begin_transaction(), ProducerFencedError)
        self.failureResultOf(producer.send("t", b"more"), ProducerFencedError)

    def test_fenced_on_init_and_on_end(self):
        producer = self.make()
        self.init_codes.append(codes.INVALID_PRODUCER_EPOCH)
        self.failureResultOf(self.run_until(producer.init_transactions()), ProducerFencedError)
        other = self.make()
        self.successResultOf(self.run_until(other.init_transactions()))
        self.successResultOf(other.begin_transaction())
        other.send("t", b"x", partition=1)
        self.end_codes.append(codes.PRODUCER_FENCED)
        self.failureResultOf(self.run_until(other.commit_transaction()), ProducerFencedError)

    def test_abortable_error_then_abort(self):
        producer = self.make()
        self.successResultOf(self.run_until(producer.init_transactions()))
        self.successResultOf(producer.begin_transaction())
        self.produce_codes[("t", 1)] = codes.TOPIC_AUTHORIZATION_FAILED
        ok = producer.send("t", b"fine", partition=0)
        bad = producer.send("t", b"refused", partition=1)
        failure = self.failureResultOf(self.run_until(producer.commit_transaction()))
        self.assertEqual(failure.value.error_code, codes.TOPIC_AUTHORIZATION_FAILED)
        self.failureResultOf(bad, BrokerResponseError)
        self.successResultOf(ok)
        self.assertEqual(self.cluster.of(END_TXN), [])  # not committed
        self.failureResultOf(producer.send("t", b"x"), BrokerResponseError)
        self.failureResultOf(self.run_until(producer.commit_transaction()), TransactionStateError)
        self.successResultOf(self.run_until(producer.abort_transaction()))
        (end,) = self.cluster.of(END_TXN)
        self.assertFalse(end["committed"])
        self.successResultOf(producer.begin_transaction())  # usable again

    def test_the_fast_send_path_stops_with_the_transaction(self):
        producer = self.make({"t": 2, "one": 1})
        self.successResultOf(self.run_until(producer.init_transactions()))
        self.successResultOf(producer.begin_transaction())
        answer_produce = self.cluster.handlers[PRODUCE]
        self.cluster.handlers[PRODUCE] = lambda conn, v, body: None  # held
        self.produce_codes[("t", 0)] = codes.TOPIC_AUTHORIZATION_FAILED
        doomed = producer.send("t", b"refused", partition=0)
        self.run_until(producer.send("one", b"a"), seconds=0.05)  # its metadata, then sent
        ((conn, header),) = [(c, h) for c in self.cluster.conns for h in c.unanswered]
        for value in (b"b", b"c", b"d"):  # one-partition topic, open batch: send()'s lane
            producer.send("one", value)
        self.assertIn("one", producer._lanes)
        body = [b for k, _, b in self.cluster.requests if k == PRODUCE][-1]
        self.cluster.answer(conn, header, answer_produce(conn, header.api_version, body))
        self.failureResultOf(doomed, BrokerResponseError)
        # The transaction must be aborted now: no record may join it, not even
        # through the C fast path of a lane that was open.
        self.assertEqual(producer._lanes, {})
        failure = self.failureResultOf(producer.send("one", b"late"), BrokerResponseError)
        self.assertEqual(failure.value.error_code, codes.TOPIC_AUTHORIZATION_FAILED)

    def test_abort_drops_records_not_sent(self):
        producer = self.make()
        self.successResultOf(self.run_until(producer.init_transactions()))
        self.successResultOf(producer.begin_transaction())
        waiting = producer.send("t", b"lingering", partition=0)
        self.successResultOf(self.run_until(producer.abort_transaction()))
        self.failureResultOf(waiting, TransactionAbortedError)
        # Nothing reached the coordinator or a partition: nothing to end.
        self.assertEqual(self.cluster.of(PRODUCE), [])
        self.assertEqual(self.cluster.of(END_TXN), [])
        self.assertEqual(producer.buffered_bytes, 0)
        self.assertEqual(producer.unacked, 0)

    def test_abort_while_partitions_are_being_added_still_ends_the_transaction(self):
        producer = self.make()
        self.successResultOf(self.run_until(producer.init_transactions()))
        self.successResultOf(producer.begin_transaction())
        answer_add = self.cluster.handlers[ADD_PARTITIONS_TO_TXN]
        self.cluster.handlers[ADD_PARTITIONS_TO_TXN] = lambda conn, v, body: None
        record = producer.send("t", b"x", partition=0)
        self.cluster.clock.advance(0.01)  # linger: the batch waits for AddPartitionsToTxn
        self.cluster.pump()
        (conn,) = [c for c in self.cluster.conns if c.unanswered]
        (header,) = conn.unanswered
        abort = producer.abort_transaction()
        self.cluster.pump()
        self.failureResultOf(record, TransactionAbortedError)
        self.assertNoResult(abort)
        self.assertEqual(self.cluster.of(END_TXN), [])  # not before the answer
        (body,) = self.cluster.of(ADD_PARTITIONS_TO_TXN)
        self.cluster.answer(conn, header, answer_add(conn, header.api_version, body))
        self.successResultOf(self.run_until(abort))
        (end,) = self.cluster.of(END_TXN)  # the coordinator has the partition: ended
        self.assertFalse(end["committed"])
        self.assertEqual(self.cluster.of(PRODUCE), [])

    def test_calls_in_the_wrong_state(self):
        producer = self.make()
        self.failureResultOf(producer.send("t", b"x"), TransactionStateError)
        self.failureResultOf(producer.begin_transaction(), TransactionStateError)
        self.successResultOf(self.run_until(producer.init_transactions()))
        failure = self.failureResultOf(producer.send("t", b"x"), TransactionStateError)
        self.assertIn("begin_transaction()", str(failure.value))
        self.failureResultOf(producer.commit_transaction(), TransactionStateError)
        self.failureResultOf(producer.abort_transaction(), TransactionStateError)
        self.successResultOf(producer.begin_transaction())
        self.failureResultOf(producer.begin_transaction(), TransactionStateError)
        self.failureResultOf(producer.init_transactions(), TransactionStateError)  # once only
        plain = Producer(self.cluster.clock, bootstrap_servers="b1:9092")
        self.failureResultOf(plain.init_transactions(), TransactionStateError)

    def test_config_rules(self):
        with self.assertRaisesRegex(ConfigError, "acks=all"):
            Producer(None, transactional_id="x", acks=1)
        with self.assertRaisesRegex(ConfigError, "enable.idempotence"):
            Producer(None, transactional_id="x", enable_idempotence=False)
        with self.assertRaisesRegex(ConfigError, "transaction.timeout.ms"):
            Producer(None, transactional_id="x", transaction_timeout_ms="soon")

    def test_stop_aborts_the_open_transaction(self):
        producer = self.make()
        self.successResultOf(self.run_until(producer.init_transactions()))
        self.successResultOf(producer.begin_transaction())
        d = producer.send("t", b"sent", partition=0)
        self.run_until(producer.flush())
        self.successResultOf(d)
        stopped = producer.stop()
        for _ in range(20):
            self.cluster.pump()
            if self.cluster.of(END_TXN):
                break
            self.cluster.clock.advance(0.01)
        (end,) = self.cluster.of(END_TXN)
        self.assertFalse(end["committed"])
        for conn in self.cluster.conns:
            conn.drop()
        self.successResultOf(stopped)
