"""Fetch sessions through the real Fetch handler on an in-process broker:
full and incremental answers, parked (long-poll) fetches, session errors."""

import shutil
import tempfile
from types import SimpleNamespace

import pytest
from twisted.internet import defer
from twisted.trial.unittest import SynchronousTestCase

from pluglog.errors import FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH
from pluglog.server.handlers.common import RequestContext
from pluglog.server.handlers.fetch import handle_fetch
from tests.unit.test_server_fastlane import batch, make_broker

pytestmark = pytest.mark.unit


def partitions(offsets):
    return [
        {
            "partition": index,
            "current_leader_epoch": -1,
            "fetch_offset": offset,
            "log_start_offset": -1,
            "partition_max_bytes": 1 << 20,
        }
        for index, offset in offsets.items()
    ]


def body(session_id, epoch, offsets, max_wait_ms=0, forgotten=()):
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [{"topic": "t", "partitions": partitions(offsets)}] if offsets else [],
        "forgotten_topics_data": [{"topic": "t", "partitions": list(forgotten)}]
        if forgotten
        else [],
        "rack_id": "",
    }


def answered(response):
    return {
        p["partition_index"]: (p["high_watermark"], len(p["records"] or b""))
        for t in response["responses"]
        for p in t["partitions"]
    }


class FetchSessionHandlerTests(SynchronousTestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pluglog-fsess-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.broker = make_broker(self.dir, "memory")
        self.ctx = RequestContext(self.broker, SimpleNamespace(api_version=11), "peer")

    def fetch(self, request):
        result = handle_fetch(self.ctx, request)
        if isinstance(result, defer.Deferred):
            return result
        return defer.succeed(result)

    def produce(self, index):
        part = self.broker.partitions[("t", index)]
        part.append(batch([b"v"]), self.broker.now_ms())

    def test_session_lifecycle_with_long_polls(self):
        self.produce(0)
        full = self.successResultOf(self.fetch(body(0, 0, {0: 0, 1: 0})))
        sid = full["session_id"]
        self.assertNotEqual(sid, 0)
        self.assertEqual(answered(full), {0: (1, len(batch([b"v"]))), 1: (0, 0)})
        self.assertEqual(self.broker.fetch_sessions.created, 1)

        # Partition 0 moved on; nothing new anywhere: the fetch parks.
        d = self.fetch(body(sid, 1, {0: 1}, max_wait_ms=500))
        self.assertNoResult(d)
        self.produce(1)  # wakes it: only partition 1 is news
        self.assertNoResult(d)  # the re-read is at the reactor's next turn
        self.broker.reactor.advance(0)
        response = self.successResultOf(d)
        self.assertEqual(response["session_id"], sid)
        self.assertEqual(answered(response), {1: (1, len(batch([b"v"])))})

        # A parked fetch that times out with nothing new answers nothing,
        # and what was not sent is not remembered as sent.
        d = self.fetch(body(sid, 2, {1: 1}, max_wait_ms=500))
        self.assertNoResult(d)
        self.broker.reactor.advance(0.6)
        self.assertEqual(self.successResultOf(d)["responses"], [])

        # Forgetting partition 0: its new data is no longer read.
        self.produce(0)
        response = self.successResultOf(self.fetch(body(sid, 3, {}, forgotten=[0])))
        self.assertEqual(answered(response), {})
        self.assertEqual(len(self.broker.fetch_sessions.sessions[sid]), 1)

    def test_bad_id_and_epoch_are_top_level_errors(self):
        sid = self.successResultOf(self.fetch(body(0, 0, {0: 0})))["session_id"]
        response = self.successResultOf(self.fetch(body(sid, 5, {})))
        self.assertEqual(response["error_code"], INVALID_FETCH_SESSION_EPOCH)
        self.assertEqual((response["session_id"], response["responses"]), (0, []))
        response = self.successResultOf(self.fetch(body(sid ^ 1, 1, {})))
        self.assertEqual(response["error_code"], FETCH_SESSION_ID_NOT_FOUND)
        # epoch -1 closes it: a full answer, no session.
        response = self.successResultOf(self.fetch(body(sid, -1, {0: 0})))
        self.assertEqual((response["session_id"], list(answered(response))), (0, [0]))
        self.assertNotIn(sid, self.broker.fetch_sessions.sessions)

    def test_sessionless_fetch_is_unchanged(self):
        # librdkafka's way: session 0, epoch -1, every partition answered.
        response = self.successResultOf(self.fetch(body(0, -1, {0: 0, 1: 0})))
        self.assertEqual((response["session_id"], sorted(answered(response))), (0, [0, 1]))
        self.assertEqual(len(self.broker.fetch_sessions), 0)


class HighWatermarkTrailingTests(SynchronousTestCase):
    """A new leader's high watermark can trail the log end (and the old
    leader's HW) until its followers fetch again: a consumer already past
    it waits, it is not told its offset is out of range."""

    storage = "segments"

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pluglog-hw-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.broker = make_broker(self.dir, self.storage)
        self.ctx = RequestContext(self.broker, SimpleNamespace(api_version=11), "peer")
        part = self.part = self.broker.partitions[("t", 0)]
        for _ in range(5):
            part.append(batch([b"v"]), self.broker.now_ms())
        part.high_watermark = 2  # log end 5

    def answer(self, offset, isolation_level=0):
        request = body(0, -1, {0: offset})
        request["isolation_level"] = isolation_level
        out = handle_fetch(self.ctx, request)
        (entry,) = out["responses"][0]["partitions"]
        return entry["error_code"], entry["high_watermark"], len(entry["records"] or b"")

    def test_between_the_high_watermark_and_the_log_end_is_empty_not_out_of_range(self):
        # read_committed (librdkafka's default) stops at the LSO, which trails
        # with the HW: that branch judged the range by the HW.
        for isolation_level in (0, 1):
            for offset in (2, 3, 5):
                self.assertEqual(self.answer(offset, isolation_level), (0, 2, 0))

    def test_below_the_high_watermark_reads_and_past_the_log_end_is_out_of_range(self):
        code, hw, size = self.answer(0)
        self.assertEqual((code, hw), (0, 2))
        self.assertGreater(size, 0)
        self.assertEqual(self.answer(6)[0], 1)  # OFFSET_OUT_OF_RANGE


class HighWatermarkTrailingMemoryTests(HighWatermarkTrailingTests):
    storage = "memory"
