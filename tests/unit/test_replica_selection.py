"""Fetching from followers (KIP-392): the selectors, the config key, and a
follower's answer to a consumer through the real Fetch handler."""

import shutil
import tempfile
from types import SimpleNamespace

import pytest
from twisted.trial.unittest import SynchronousTestCase

from pluglog.broker.replica_selection import LeaderSelector, RackAwareSelector, ReplicaView
from pluglog.config import parse_settings
from pluglog.config_keys import REPLICA_SELECTOR_CLASSES
from pluglog.errors import ConfigError
from pluglog.interfaces import IReplicaSelector
from pluglog.plugins import make_plugin_manager
from pluglog.registry import Registry
from pluglog.server.handlers.common import RequestContext
from pluglog.server.handlers.fetch import handle_fetch
from tests.unit.test_fetch_session_handler import body
from tests.unit.test_server_fastlane import batch, make_broker

pytestmark = pytest.mark.unit

LEADER = ReplicaView(1, "r1", 100)


def test_rack_aware_picks_the_most_caught_up_replica_in_the_clients_rack():
    selector = RackAwareSelector()
    candidates = [
        LEADER,
        ReplicaView(2, "r2", 90),
        ReplicaView(3, "r2", 95),
        ReplicaView(4, "r3", 100),
    ]
    assert selector.select("t", 0, "r2", LEADER, candidates) == 3
    assert selector.select("t", 0, "r3", LEADER, candidates) == 4


def test_rack_aware_keeps_the_leader_when_it_is_local_or_nothing_is():
    selector = RackAwareSelector()
    candidates = [LEADER, ReplicaView(2, "r1", 100), ReplicaView(3, "r2", 100)]
    assert selector.select("t", 0, "r1", LEADER, candidates) is None  # the leader is local
    assert selector.select("t", 0, "r9", LEADER, candidates) is None  # no replica there
    assert selector.select("t", 0, "", LEADER, candidates) is None  # no client.rack
    assert LeaderSelector().select("t", 0, "r2", LEADER, candidates) is None


@pytest.mark.parametrize(
    "value, name",
    [
        ("org.apache.kafka.common.replica.RackAwareReplicaSelector", "rack-aware"),
        ("org.apache.kafka.common.replica.LeaderSelector", "leader"),
        ("rack-aware", "rack-aware"),
        ("", ""),
    ],
)
def test_replica_selector_class_takes_kafkas_class_names(value, name):
    config = parse_settings({"replica.selector.class": value})
    assert config.replica_selector_class == name


def test_every_kafka_class_name_maps_to_a_registered_selector():
    registry = Registry(make_plugin_manager(autoload=False))
    for name in REPLICA_SELECTOR_CLASSES.values():
        assert IReplicaSelector.providedBy(registry.build("replica_selector", name, None, None))


def test_a_bad_selector_name_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="replica.selector.class"):
        parse_settings({"replica.selector.class": "no selector!"})


class FollowerReadTests(SynchronousTestCase):
    """A follower replica here answers a consumer's v11+ fetch below its own
    high watermark; older versions are told NOT_LEADER_OR_FOLLOWER."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pluglog-follower-read-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.broker = make_broker(self.dir, "segments")
        part = self.part = self.broker.partitions[("t", 0)]
        for _ in range(5):
            part.append(batch([b"v" * 50]), self.broker.now_ms())
        node = self.broker.node_id
        part.become_follower(node + 1, part.leader_epoch + 1, (node + 1, node), (node + 1, node))

    def fetch(self, version, offset=0, epoch=-1):
        ctx = RequestContext(self.broker, SimpleNamespace(api_version=version), "peer")
        request = body(0, -1, {0: offset})
        request["topics"][0]["partitions"][0]["current_leader_epoch"] = epoch
        request["rack_id"] = "r1"
        out = handle_fetch(ctx, request)
        (entry,) = out["responses"][0]["partitions"]
        return entry

    def test_reads_stop_at_the_followers_high_watermark(self):
        self.part.high_watermark = 5
        everything = self.fetch(11)
        self.part.high_watermark = 2
        below = self.fetch(11)
        self.assertEqual((everything["error_code"], below["error_code"]), (0, 0))
        self.assertEqual(below["high_watermark"], 2)
        # Five identical batches: two of them are below the HW.
        self.assertEqual(len(below["records"]) * 5, len(everything["records"]) * 2)
        self.assertEqual(below["preferred_read_replica"], -1)
        past = self.fetch(11, offset=2)
        self.assertEqual((past["error_code"], len(past["records"] or b"")), (0, 0))

    def test_only_v11_consumers_and_the_current_epoch_read_here(self):
        self.assertEqual(self.fetch(10)["error_code"], 6)  # NOT_LEADER_OR_FOLLOWER
        stale = self.part.leader_epoch - 1
        self.assertEqual(self.fetch(11, epoch=stale)["error_code"], 74)  # FENCED_LEADER_EPOCH
        self.assertEqual(self.fetch(11, epoch=self.part.leader_epoch)["error_code"], 0)
