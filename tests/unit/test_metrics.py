"""pluglog.metrics on an in-process broker: what a request bumps, what a scrape reads.

A real Broker (memory storage, a Clock) behind a real KafkaServerProtocol on
a StringTransport; the registry's page is parsed back with prometheus_client.
"""

import shutil
import tempfile

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from pluglog import protocol as codec
from pluglog.metrics.recorder import RequestMetrics
from pluglog.metrics.registry import broker_registry
from pluglog.server.protocol import KafkaServerFactory
from tests.unit.test_server_fastlane import batch, make_broker, one_partition, produce_request


def fetch_body(max_wait_ms):
    """Fetch v11 of t-0 from offset 0 by a consumer, MinBytes 1."""
    partition = {
        "partition": 0,
        "current_leader_epoch": -1,
        "fetch_offset": 0,
        "log_start_offset": -1,
        "partition_max_bytes": 1 << 20,
    }
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": "t", "partitions": [partition]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


class MetricsTests(SynchronousTestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pluglog-metrics-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.broker = make_broker(self.dir, "memory")
        self.metrics = RequestMetrics()
        self.registry = broker_registry(self.broker, self.metrics)
        factory = KafkaServerFactory(self.broker, None, self.metrics)
        self.proto = factory.buildProtocol(None)
        self.transport = StringTransport()
        self.proto.makeConnection(self.transport)

    def samples(self):
        text = generate_latest(self.registry).decode("utf-8")
        found = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return found

    def test_fast_lane_counts_per_request_and_batch(self):
        records = batch([b"a", b"b", b"c"])
        for cid in range(4):
            self.proto.dataReceived(produce_request(one_partition(records), cid=cid))
        self.assertTrue(self.transport.value())
        found = self.samples()
        self.assertEqual(found[("pluglog_messages_in_total", (("topic", "t"),))], 12)
        self.assertEqual(found[("pluglog_bytes_in_total", (("topic", "t"),))], 4 * len(records))
        self.assertEqual(found[("pluglog_requests_total", (("api", "Produce"),))], 4)
        self.assertEqual(
            found[("pluglog_request_duration_seconds_count", (("api", "Produce"),))], 4
        )
        self.assertEqual(found[("pluglog_connections", (("listener", "PLAINTEXT"),))], 1)

    def test_errors_by_code_on_both_paths(self):
        # Fast lane: one unknown partition. General path: two partitions, one unknown.
        self.proto.dataReceived(produce_request(one_partition(batch(), index=9), cid=1))
        topic_data = [
            {
                "name": "t",
                "partition_data": [
                    {"index": 0, "records": batch()},
                    {"index": 7, "records": batch()},
                ],
            }
        ]
        self.proto.dataReceived(produce_request(topic_data, cid=2))
        found = self.samples()
        key = (
            "pluglog_request_errors_total",
            (("api", "Produce"), ("error", "UNKNOWN_TOPIC_OR_PARTITION")),
        )
        self.assertEqual(found[key], 2)
        self.assertEqual(found[("pluglog_messages_in_total", (("topic", "t"),))], 1)

    def test_fetch_bytes_out_and_partition_gauges(self):
        records = batch([b"x" * 50])
        self.proto.dataReceived(produce_request(one_partition(records), cid=1))
        body = fetch_body(max_wait_ms=0)
        self.proto.dataReceived(codec.encode_request(codec.FETCH, 11, 2, "c", body))
        found = self.samples()
        self.assertEqual(found[("pluglog_bytes_out_total", (("topic", "t"),))], len(records))
        self.assertEqual(found[("pluglog_requests_total", (("api", "Fetch"),))], 1)
        labels = (("partition", "0"), ("topic", "t"))
        self.assertEqual(found[("pluglog_log_end_offset", labels)], 1)
        self.assertEqual(found[("pluglog_partition_high_watermark", labels)], 1)
        self.assertEqual(found[("pluglog_log_size_bytes", labels)], len(records))
        self.assertEqual(found[("pluglog_log_segments", labels)], 1)
        self.assertEqual(found[("pluglog_under_replicated_partitions", ())], 0)
        self.assertEqual(found[("pluglog_controller", ())], 1)

    def test_parked_fetch_is_in_purgatory_until_answered(self):
        body = fetch_body(max_wait_ms=5000)
        self.proto.dataReceived(codec.encode_request(codec.FETCH, 11, 1, "c", body))
        purgatory = ("pluglog_purgatory_size", (("purgatory", "fetch"),))
        self.assertEqual(self.samples()[purgatory], 1)
        self.assertNotIn(("pluglog_requests_total", (("api", "Fetch"),)), self.samples())
        self.proto.dataReceived(produce_request(one_partition(batch()), cid=2))
        self.broker.reactor.advance(0)  # the parked fetch re-reads at the next turn
        found = self.samples()
        self.assertEqual(found[purgatory], 0)
        self.assertEqual(found[("pluglog_requests_total", (("api", "Fetch"),))], 1)

    def test_no_recorder_no_request_counting(self):
        proto = KafkaServerFactory(self.broker).buildProtocol(None)
        proto.makeConnection(StringTransport())
        proto.dataReceived(produce_request(one_partition(batch()), cid=1))
        self.assertEqual(sum(stats.count for stats in self.metrics.apis), 0)

    def test_follower_lag_and_cleaner_progress(self):
        records = batch([b"a", b"b", b"c"])
        for cid in range(2):
            self.proto.dataReceived(produce_request(one_partition(records), cid=cid))
        part = self.broker.partitions[("t", 0)]
        now = self.broker.now_ms()
        # The leader of t-0 with two followers: one fetched up to offset 2, one never.
        part.become_leader(part.leader_epoch + 1, (0, 1, 2), (0,), now)
        part.update_follower(1, 2, now)
        found = self.samples()
        lag = "pluglog_follower_lag_messages"
        base = (("partition", "0"), ("topic", "t"))
        self.assertEqual(found[(lag, (("follower", "1"), *base))], 6 - 2)
        self.assertEqual(found[(lag, (("follower", "2"), *base))], 6)
        # No cleaner service: no cleaner series. With one, its stats.
        self.assertNotIn(("pluglog_cleaner_passes_total", ()), found)
        self.broker.cleaner = type("Cleaner", (), {"stats": {"passes": 3, "records_removed": 7}})
        found = self.samples()
        self.assertEqual(found[("pluglog_cleaner_passes_total", ())], 3)
        self.assertEqual(found[("pluglog_cleaner_removed_records_total", ())], 7)
        self.assertEqual(found[("pluglog_cleaner_read_bytes_total", ())], 0)

    def test_the_built_in_cleaner_is_the_one_metrics_read(self):
        from pluglog.broker.log_cleaner import make_log_cleaner

        self.assertIsNone(self.broker.cleaner)
        cleaner = make_log_cleaner(self.broker)
        self.assertIs(self.broker.cleaner, cleaner)
        cleaner.stats["passes"] += 2
        self.assertEqual(self.samples()[("pluglog_cleaner_passes_total", ())], 2)

    def test_offline_replicas_are_logs_that_could_not_be_opened(self):
        from pluglog.broker.partition import Partition
        from pluglog.storage.offline import OfflineLog

        self.proto.dataReceived(produce_request(one_partition(batch()), cid=1))
        config = self.broker.partitions[("t", 0)].config
        self.broker.partitions[("bad", 0)] = Partition(
            "bad", 0, OfflineLog("bad", 0, "unreadable"), config
        )
        # A partition refusing clients while the ZooKeeper session is lost
        # still has its log: not an offline replica, and its gauges stay.
        self.broker.partitions[("t", 0)].go_offline()
        found = self.samples()
        self.assertEqual(found[("pluglog_offline_replicas", ())], 1)
        self.assertIn(("pluglog_log_end_offset", (("partition", "0"), ("topic", "t"))), found)
        self.assertNotIn(("pluglog_log_end_offset", (("partition", "0"), ("topic", "bad"))), found)
