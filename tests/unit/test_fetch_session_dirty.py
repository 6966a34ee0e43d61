"""Incremental fetches read only their session's dirty partitions.

Through the real Fetch handler on an in-process broker (memory storage):
which partitions a fetch looks at (a counting partition map: the handler
finds each partition it reads there), what it answers, parked fetches
woken through the session, and a follower's fetch state for the
partitions its session omits (ISR lag as Kafka keeps it)."""

import collections
import shutil
import tempfile
import uuid
from types import SimpleNamespace

import pytest
from twisted.internet import defer
from twisted.trial.unittest import SynchronousTestCase

from pluglog.broker.fetch_sessions import SWEEP_MS
from pluglog.errors import NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION
from pluglog.server.handlers.common import RequestContext
from pluglog.server.handlers.fetch import handle_fetch
from tests.unit.test_server_fastlane import batch, make_broker

pytestmark = pytest.mark.unit

TOPIC = "many"
COUNT = 20
LAG_MS = 30000  # replica.lag.time.max.ms's default


class CountingPartitions(dict):
    """The broker's partition map, counting the look-ups of each partition."""

    def __init__(self, items):
        super().__init__(items)
        self.looked = collections.Counter()

    def get(self, key, default=None):
        self.looked[key] += 1
        return super().get(key, default)

    def take(self):
        """Indexes of the TOPIC partitions looked at since the last take."""
        seen = sorted(k[1] for k in self.looked if k[0] == TOPIC)
        self.looked.clear()
        return seen


def body(session_id, epoch, offsets=None, max_wait_ms=0, replica_id=-1, max_bytes=1 << 20):
    wants = [
        {
            "partition": index,
            "current_leader_epoch": -1,
            "fetch_offset": offset,
            "log_start_offset": -1,
            "partition_max_bytes": 1 << 20,
        }
        for index, offset in (offsets or {}).items()
    ]
    return {
        "replica_id": replica_id,
        "max_wait_ms": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [{"topic": TOPIC, "partitions": wants}] if wants else [],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def answered(response):
    """{index: (error, hw, log start, record bytes)} of the answer's TOPIC partitions."""
    return {
        p["partition_index"]: (
            p["error_code"],
            p["high_watermark"],
            p["log_start_offset"],
            len(p["records"] or b""),
        )
        for t in response["responses"]
        for p in t["partitions"]
    }


class Base(SynchronousTestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pluglog-dirty-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.broker = make_broker(self.dir, "memory")
        self.broker.create_topic(TOPIC, COUNT)
        self.parts = self.broker.partitions = CountingPartitions(self.broker.partitions)
        self.ctx = RequestContext(self.broker, SimpleNamespace(api_version=11), "peer")
        self.size = len(batch([b"v"]))

    def part(self, index):
        return dict.__getitem__(self.parts, (TOPIC, index))

    def fetch(self, request):
        result = handle_fetch(self.ctx, request)
        return result if isinstance(result, defer.Deferred) else defer.succeed(result)

    def answer(self, request):
        return answered(self.successResultOf(self.fetch(request)))

    def produce(self, index, n=1):
        for _ in range(n):
            self.part(index).append(batch([b"v"]), self.broker.now_ms())

    def open_session(self, offsets=None, replica_id=-1):
        offsets = offsets or dict.fromkeys(range(COUNT), 0)
        full = self.successResultOf(self.fetch(body(0, 0, offsets, replica_id=replica_id)))
        self.assertEqual(len(answered(full)), len(offsets))
        self.parts.take()
        self.epoch = 1
        return full["session_id"]

    def next(self, sid, offsets=None, **kw):
        request = body(sid, self.epoch, offsets, **kw)
        self.epoch += 1
        return request


class ConsumerSessionTests(Base):
    def test_only_changed_partitions_are_read_and_answered(self):
        sid = self.open_session()
        # Idle: nothing listed, nothing changed, nothing looked at.
        self.assertEqual(self.answer(self.next(sid)), {})
        self.assertEqual(self.parts.take(), [])
        # An append to partition 3 makes it, and only it, read and answered.
        self.produce(3)
        self.assertEqual(self.answer(self.next(sid)), {3: (0, 1, 0, self.size)})
        self.assertEqual(self.parts.take(), [3])
        # The consumer moves on: 3 is listed (read), answers nothing new.
        self.assertEqual(self.answer(self.next(sid, {3: 1})), {})
        self.assertEqual(self.parts.take(), [3])
        self.assertEqual(self.answer(self.next(sid)), {})
        self.assertEqual(self.parts.take(), [])

    def test_a_partition_cut_by_the_byte_limit_is_read_again(self):
        sid = self.open_session()
        self.produce(1)
        self.produce(2)
        # Room for one batch only: 2 comes back empty, the client's offset
        # for it does not change, yet the next fetch reads it.
        first = self.answer(self.next(sid, max_bytes=self.size))
        self.assertEqual(first[1][3], self.size)
        self.assertEqual(first[2], (0, 1, 0, 0))
        self.assertEqual(self.answer(self.next(sid, {1: 1})), {2: (0, 1, 0, self.size)})
        self.assertEqual(self.parts.take(), [1, 2])
        # Both consumed: idle again.
        self.answer(self.next(sid, {2: 1}))
        self.parts.take()
        self.assertEqual(self.answer(self.next(sid)), {})
        self.assertEqual(self.parts.take(), [])

    def test_log_start_move_is_answered(self):
        sid = self.open_session()
        self.produce(4, 3)
        self.answer(self.next(sid, {4: 0}))
        self.answer(self.next(sid, {4: 3}))
        self.assertEqual(self.answer(self.next(sid)), {})
        self.part(4).delete_records(2)
        self.assertEqual(self.answer(self.next(sid)), {4: (0, 3, 2, 0)})

    def test_leader_change_and_deletion_answer_the_error(self):
        sid = self.open_session()
        # Moved to brokers 1 and 2 (not a replica here: no KIP-392 read either).
        self.part(5).become_follower(1, 7, (1, 2), (1, 2))
        self.assertEqual(self.answer(self.next(sid))[5][0], NOT_LEADER_OR_FOLLOWER)
        # An error is answered on every fetch until it clears.
        self.assertEqual(self.answer(self.next(sid))[5][0], NOT_LEADER_OR_FOLLOWER)
        self.broker.delete_topic(TOPIC)
        gone = self.answer(self.next(sid))
        self.assertEqual(len(gone), COUNT)
        self.assertEqual(
            {code for code, _hw, _start, _size in gone.values()}, {UNKNOWN_TOPIC_OR_PARTITION}
        )

    def test_a_topic_created_again_is_watched_in_its_new_partitions(self):
        sid = self.open_session()
        session = self.broker.fetch_sessions.sessions[sid]
        old = self.part(3)
        self.assertIn(session, old.fetch_sessions)
        # Dropped and created again between two fetches: new Partitions at
        # the same keys (the session is keyed by name, v11).
        self.broker.delete_topic(TOPIC)
        self.broker.create_topic(TOPIC, COUNT)
        self.broker.reactor.advance(1)
        new = self.part(3)
        self.assertIsNot(new, old)
        self.answer(self.next(sid))
        # The drop marked the session; its next fetch finds the new
        # Partition and watches it, and the old one no longer.
        self.assertEqual(old.fetch_sessions, {})
        self.assertIn(session, new.fetch_sessions)
        self.assertEqual(self.answer(self.next(sid)), {})
        self.produce(3)
        self.assertEqual(self.answer(self.next(sid)), {3: (0, 1, 0, self.size)})

    def test_long_poll_waits_on_the_session_and_wakes_on_any_partition(self):
        sid = self.open_session()
        d = self.fetch(self.next(sid, max_wait_ms=500))
        self.assertNoResult(d)
        # One waiter, on the session; none on the 20 partitions.
        self.assertEqual(len(self.broker.fetch_sessions.parked()), 1)
        self.assertEqual([p for i in range(COUNT) for p in self.part(i).parked_fetches], [])
        self.produce(17)
        self.broker.reactor.advance(0)  # the re-read is at the reactor's next turn
        self.assertEqual(answered(self.successResultOf(d)), {17: (0, 1, 0, self.size)})
        self.assertEqual(self.parts.take(), [17])
        self.assertEqual(self.broker.fetch_sessions.parked(), [])
        # Timing out with nothing new reads nothing at all.
        d = self.fetch(self.next(sid, {17: 1}, max_wait_ms=500))
        self.broker.reactor.advance(0.6)
        self.assertEqual(self.successResultOf(d)["responses"], [])
        self.assertEqual(self.parts.take(), [17])

    def test_wake_ups_of_one_turn_cost_one_re_read(self):
        # An ISR or leadership change over every partition wakes a parked
        # fetch once per partition; re-reading on each wake-up cost
        # 1 + 2 + ... + n partition reads (10,000 partitions froze a leader).
        sid = self.open_session()
        d = self.fetch(self.next(sid, max_wait_ms=500))
        self.parts.take()
        for index in range(COUNT):
            self.part(index)._wake()  # a change that brings no records
        self.assertEqual(sum(self.parts.looked.values()), 0, "nothing read during the turn")
        self.broker.reactor.advance(0)
        looked = {k[1]: n for k, n in self.parts.looked.items() if k[0] == TOPIC}
        self.assertEqual(looked, dict.fromkeys(range(COUNT), 1))
        self.assertNoResult(d)  # still nothing to answer: parked again
        self.parts.take()
        self.produce(3)
        self.broker.reactor.advance(0)
        self.assertEqual(answered(self.successResultOf(d)), {3: (0, 1, 0, self.size)})

    def test_a_change_while_parked_is_not_lost_when_the_fetch_goes_away(self):
        sid = self.open_session()
        d = self.fetch(self.next(sid, max_wait_ms=500))
        d.addErrback(lambda _f: None)
        d.cancel()  # the connection closed
        self.produce(9)
        self.assertEqual(self.answer(self.next(sid)), {9: (0, 1, 0, self.size)})

    def test_every_partition_is_read_now_and_then(self):
        sid = self.open_session()
        self.answer(self.next(sid))
        self.assertEqual(self.parts.take(), [])
        self.broker.reactor.advance(SWEEP_MS / 1000)
        self.assertEqual(self.answer(self.next(sid)), {})
        self.assertEqual(self.parts.take(), list(range(COUNT)))


class FollowerSessionTests(Base):
    """Broker 0 leads every partition with replicas (0, 1, 2); followers 1
    and 2 fetch with replica_id 1 and 2."""

    def setUp(self):
        super().setUp()
        now = self.broker.now_ms()
        for index in range(COUNT):
            self.part(index).become_leader(3, (0, 1, 2), (0, 1, 2), now)
        self.updates = collections.Counter()
        for index in range(COUNT):
            part = self.part(index)

            def counted(broker_id, offset, now_ms, clock=None, _i=index, _f=part.update_follower):
                self.updates[_i] += 1
                return _f(broker_id, offset, now_ms, clock)

            part.update_follower = counted

    def lagging(self):
        now = self.broker.now_ms()
        return {
            i: self.part(i).lagging_followers(now, LAG_MS)
            for i in range(COUNT)
            if self.part(i).lagging_followers(now, LAG_MS)
        }

    def test_only_changed_partitions_update_the_follower_state(self):
        sid = self.open_session(replica_id=1)
        self.updates.clear()
        self.answer(self.next(sid, replica_id=1))
        self.assertEqual(self.updates, {})
        self.produce(6)
        self.assertEqual(self.answer(self.next(sid, replica_id=1)), {6: (0, 0, 0, self.size)})
        self.assertEqual(dict(self.updates), {6: 1})

    def test_a_high_watermark_move_alone_is_answered(self):
        sid = self.open_session(replica_id=1)
        self.produce(2)
        self.answer(self.next(sid, replica_id=1))  # the record, HW still 0
        self.answer(self.next(sid, {2: 1}, replica_id=1))  # follower 1 has it
        self.assertEqual(self.answer(self.next(sid, replica_id=1)), {})
        # Follower 2 catches up (sessionless): the HW moves to 1, which
        # follower 1's session must hear of, without records.
        self.answer(body(0, -1, {2: 1}, replica_id=2))
        self.assertEqual(self.part(2).high_watermark, 1)
        self.assertEqual(self.answer(self.next(sid, replica_id=1)), {2: (0, 1, 0, 0)})

    def test_omitted_caught_up_partitions_stay_in_sync_while_the_session_fetches(self):
        sid = self.open_session(replica_id=1)
        self.answer(body(0, -1, dict.fromkeys(range(COUNT), 0), replica_id=2))
        for _ in range(8):  # 40 s of idle session fetches, over the 30 s lag time
            self.broker.reactor.advance(5)
            self.answer(self.next(sid, replica_id=1))
            self.answer(body(0, -1, dict.fromkeys(range(COUNT), 0), replica_id=2))
        self.assertEqual(self.lagging(), {})
        # Follower 1 stops fetching, 2 goes on: every partition lags in 1
        # once the time is up.
        for _ in range(2):
            self.broker.reactor.advance(LAG_MS / 2000)
            self.answer(body(0, -1, dict.fromkeys(range(COUNT), 0), replica_id=2))
        self.assertEqual(self.lagging(), {})
        self.broker.reactor.advance(1)
        self.assertEqual(self.lagging(), {i: [1] for i in range(COUNT)})

    def test_a_sessionless_fetch_by_the_follower_keeps_its_session_clock(self):
        # Follower 1 also fetches outside its session (epoch -1, as a tool
        # naming its replica id could), at the log end. That fetch unclocks
        # partition 4 while the session still omits it; the session's sweep
        # (every SWEEP_MS, under the lag time) reads it and clocks it again,
        # so it must not fall out of sync (with no sweep it does).
        sid = self.open_session(replica_id=1)
        self.answer(body(0, -1, dict.fromkeys(range(COUNT), 0), replica_id=2))
        self.answer(body(0, -1, {4: 0}, replica_id=1))
        for _ in range(8):  # 40 s of idle session fetches, over the 30 s lag time
            self.broker.reactor.advance(5)
            self.answer(self.next(sid, replica_id=1))
            self.answer(body(0, -1, dict.fromkeys(range(COUNT), 0), replica_id=2))
        self.assertEqual(self.lagging(), {})

    def test_a_follower_behind_an_append_lags_from_its_last_fetch(self):
        # Kafka's rule: behind the leader's end, the follower was caught up
        # as of its previous fetch if that fetch reached the end then.
        sid = self.open_session(replica_id=1)
        self.answer(body(0, -1, dict.fromkeys(range(COUNT), 0), replica_id=2))
        self.broker.reactor.advance(20)
        self.answer(self.next(sid, replica_id=1))  # t=20: idle, caught up
        self.broker.reactor.advance(1)
        self.produce(8)
        self.broker.reactor.advance(20)
        # t=41: the fetch answers the record; partition 8 was caught up at t=20.
        self.answer(self.next(sid, replica_id=1))
        remote = self.part(8).remotes[1]
        self.assertEqual(remote.caught_up_ms, self.broker.now_ms() - 21000)
        self.broker.reactor.advance(10)  # t=51: 31 s since t=20
        self.assertIn(1, self.part(8).lagging_followers(self.broker.now_ms(), LAG_MS))
        # The others were omitted from the t=41 fetch, caught up: in sync.
        self.assertNotIn(1, self.part(7).lagging_followers(self.broker.now_ms(), LAG_MS))

    def test_a_forgotten_partition_lags_from_its_last_fetch(self):
        sid = self.open_session(replica_id=1)
        self.broker.reactor.advance(10)
        request = self.next(sid, replica_id=1)
        request["forgotten_topics_data"] = [{"topic": TOPIC, "partitions": [0]}]
        self.answer(request)
        self.broker.reactor.advance(25)
        self.answer(self.next(sid, replica_id=1))
        now = self.broker.now_ms()
        self.assertIn(1, self.part(0).lagging_followers(now, LAG_MS))
        self.assertNotIn(1, self.part(1).lagging_followers(now, LAG_MS))

    def test_a_follower_out_of_the_isr_is_read_until_it_is_back(self):
        writes = []
        for index in range(COUNT):
            self.part(index).isr_writer = lambda part, isr: writes.append((part.index, isr))
        sid = self.open_session(replica_id=1)
        self.part(3).isr_changed((0, 2))  # follower 1 was dropped
        self.updates.clear()
        writes.clear()
        for _ in range(2):
            self.answer(self.next(sid, replica_id=1))
            self.part(3).isr_change_pending = False  # the write failed
        # Each fetch asked for follower 1 to be added back.
        self.assertEqual(self.updates, {3: 2})
        self.assertEqual(writes, [(3, (0, 2, 1)), (3, (0, 2, 1))])
        self.part(3).isr_changed((0, 2, 1))
        self.updates.clear()
        self.answer(self.next(sid, replica_id=1))
        self.answer(self.next(sid, replica_id=1))
        self.assertEqual(self.updates, {3: 1})  # the ISR change marked it once


class TopicIdSessionTests(Base):
    """A v13+ session names topics by id: its partitions are watched too."""

    def test_only_changed_partitions_are_read_by_id(self):
        self.ctx = RequestContext(self.broker, SimpleNamespace(api_version=13), "peer")
        tid = uuid.UUID(self.broker.coordinator.topics()[TOPIC].topic_id)

        def by_id(request):
            for topic in request["topics"]:
                topic["topic_id"] = tid
                del topic["topic"]
            return request

        full = self.successResultOf(self.fetch(by_id(body(0, 0, dict.fromkeys(range(COUNT), 0)))))
        sid = full["session_id"]
        self.assertNotEqual(sid, 0)
        self.parts.take()
        self.epoch = 1
        self.assertEqual(self.answer(self.next(sid)), {})
        self.assertEqual(self.parts.take(), [])
        self.produce(11)
        self.assertEqual(self.answer(self.next(sid)), {11: (0, 1, 0, self.size)})
        self.assertEqual(self.parts.take(), [11])
