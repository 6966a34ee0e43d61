"""The follower's side of fetch sessions through a real LeaderFetcher and a
real leader-side FetchSessionCache: an idle fetch does work only for the
partitions whose fetch state changed, and every change (fetch offset, log
start, leader epoch, added, removed, session reset) still reaches the leader."""

from types import SimpleNamespace

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock

from pluglog import protocol as codec
from pluglog.broker.fetch_sessions import FetchSessionCache
from pluglog.replication.fetcher import RECHECK_MS, LeaderFetcher
from pluglog.replication.throttle import UNLIMITED, ReplicationThrottle

pytestmark = pytest.mark.unit

MAX_BYTES = 1 << 20


class Counter:
    def __init__(self):
        self.n = 0


class FakeLog:
    def __init__(self, counter, end=0, start=0):
        self._counter = counter
        self._end, self._start = end, start

    @property
    def log_end_offset(self):
        self._counter.n += 1
        return self._end

    @property
    def log_start_offset(self):
        self._counter.n += 1
        return self._start

    def delete_records_before(self, offset):
        self._start = offset


class FakeEpochs:
    def latest_epoch(self):
        return 0

    def end_offset_for(self, epoch, end):
        return epoch, end


class FakePartition:
    """What LeaderFetcher reads of a Partition, with every log read counted."""

    def __init__(self, counter, topic, index, leader_epoch=0):
        self.topic, self.index = topic, index
        self.leader_epoch = leader_epoch
        self.log = FakeLog(counter)
        self.epochs = FakeEpochs()
        self.high_watermark = 0
        self.fetch_sessions = {}
        self.isr = (0, 1)

    def append_replicated(self, records, leader_hw, now_ms):
        self.log._end += len(records)
        self.high_watermark = min(leader_hw, self.log._end)

    def truncate_to(self, offset):
        self.log._end = min(self.log._end, offset)

    def log_start_moved(self):
        # As Partition._wake: the sessions holding this partition are marked.
        for session, key in list(self.fetch_sessions.items()):
            session.mark(key)


class CountingDict(dict):
    """The fetcher's partition map, counting every look-up and walk."""

    def __init__(self, counter):
        super().__init__()
        self._counter = counter

    def __getitem__(self, key):
        self._counter.n += 1
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._counter.n += 1
        return super().get(key, default)

    def __iter__(self):
        self._counter.n += len(self)
        return super().__iter__()

    def items(self):
        self._counter.n += len(self)
        return super().items()

    def values(self):
        self._counter.n += len(self)
        return super().values()


class Leader:
    """A leader's Fetch and OffsetForLeaderEpoch answers, over a real session cache."""

    def __init__(self):
        self.cache = FetchSessionCache(10)
        self.requests = []
        #: (topic, index) -> answer overrides for the next fetch
        self.news = {}
        self.fail = False

    def request(self, api, version, body):
        if api == codec.OFFSET_FOR_LEADER_EPOCH:
            return defer.succeed(
                {
                    "topics": [
                        {
                            "topic": t["topic"],
                            "partitions": [
                                {
                                    "partition": p["partition"],
                                    "error_code": 0,
                                    "leader_epoch": p["leader_epoch"],
                                    "end_offset": 1 << 40,
                                }
                                for p in t["partitions"]
                            ],
                        }
                        for t in body["topics"]
                    ]
                }
            )
        if self.fail:
            self.fail = False
            return defer.fail(ConnectionError("lost"))
        self.requests.append(body)
        ctx = self.cache.context(body, 11, 0)
        if isinstance(ctx, int):
            return defer.succeed({"error_code": ctx, "session_id": 0, "responses": []})
        topics, total = [], 0
        for topic in ctx.request["topics"]:
            out = []
            for w in topic["partitions"]:
                a = {
                    "partition_index": w["partition"],
                    "error_code": 0,
                    "high_watermark": w["fetch_offset"],
                    "last_stable_offset": 0,
                    "log_start_offset": 0,
                    "records": b"",
                }
                a.update(self.news.pop((topic["topic"], w["partition"]), {}))
                total += len(a["records"])
                out.append(a)
            topics.append({"topic": topic["topic"], "partitions": out})
        session_id, responses = ctx.respond(topics, total)
        return defer.succeed({"error_code": 0, "session_id": session_id, "responses": responses})


def make_fetcher(count, rate=UNLIMITED):
    counter = Counter()
    config = SimpleNamespace(
        replica_fetch_max_bytes=MAX_BYTES, replica_fetch_wait_max_ms=0, replica_fetch_backoff_ms=10
    )
    broker = SimpleNamespace(node_id=1, now_ms=lambda: broker.time_ms, time_ms=0)
    manager = SimpleNamespace(
        broker=broker,
        reactor=Clock(),
        config=config,
        follower_throttle=ReplicationThrottle(rate),
        refresh=None,
    )
    fetcher = LeaderFetcher(manager, 0)
    fetcher.partitions = CountingDict(counter)
    fetcher.running = True  # the loop is driven by hand here
    for index in range(count):
        fetcher.add(FakePartition(counter, "t", index))
    return fetcher, counter, Leader()


def round_trip(fetcher, leader):
    """What _run does once: truncate the new partitions, then one Fetch."""
    if fetcher._truncating:
        fetcher._truncate(leader, list(fetcher._truncating))
    results = []
    fetcher._fetch(leader, fetcher._fetchable).addBoth(results.append)
    body = leader.requests[-1] if leader.requests else None
    return results[0], body


def listed(body):
    return {(t["topic"], p["partition"]): p for t in body["topics"] for p in t["partitions"]}


def forgotten(body):
    return sorted((t["topic"], i) for t in body["forgotten_topics_data"] for i in t["partitions"])


@pytest.mark.parametrize("count", [100, 2000])
def test_an_idle_fetch_does_work_only_for_what_changed(count):
    fetcher, counter, leader = make_fetcher(count)
    ok, body = round_trip(fetcher, leader)
    assert ok and body["session_epoch"] == 0 and len(listed(body)) == count
    round_trip(fetcher, leader)  # the answers of the full fetch looked at once
    counter.n = 0
    for _ in range(5):
        ok, body = round_trip(fetcher, leader)
        assert ok and body["topics"] == [] and body["forgotten_topics_data"] == []
    assert counter.n == 0  # no partition read or walked while idle
    # Three partitions get records: work for those three, whatever the count.
    for index in (3, 50, 99):
        leader.news[("t", index)] = {"records": b"xxxx", "high_watermark": 4}
    round_trip(fetcher, leader)
    counter.n = 0
    ok, body = round_trip(fetcher, leader)
    assert {k: p["fetch_offset"] for k, p in listed(body).items()} == {
        ("t", 3): 4,
        ("t", 50): 4,
        ("t", 99): 4,
    }
    assert 0 < counter.n <= 3 * 6
    counter.n = 0
    round_trip(fetcher, leader)
    assert counter.n == 0


def test_every_kind_of_change_reaches_the_leader():
    fetcher, counter, leader = make_fetcher(10)
    round_trip(fetcher, leader)
    round_trip(fetcher, leader)
    session = leader.cache.sessions[fetcher.session.session_id]
    # A changed fetch offset.
    leader.news[("t", 2)] = {"records": b"xx", "high_watermark": 2}
    round_trip(fetcher, leader)
    _ok, body = round_trip(fetcher, leader)
    assert listed(body)[("t", 2)]["fetch_offset"] == 2 and len(listed(body)) == 1
    # The log start moved by retention here (Partition._wake marks the fetcher).
    part = fetcher.partitions[("t", 4)][0]
    part.log._start = 1
    part.log_start_moved()
    _ok, body = round_trip(fetcher, leader)
    assert listed(body)[("t", 4)]["log_start_offset"] == 1 and len(listed(body)) == 1
    # The leader's log start moved past ours: sent on the fetch after.
    part.log._end = 10
    fetcher.mark(("t", 4))
    round_trip(fetcher, leader)
    leader.news[("t", 4)] = {"log_start_offset": 6, "high_watermark": 10}
    round_trip(fetcher, leader)
    _ok, body = round_trip(fetcher, leader)
    assert listed(body)[("t", 4)]["log_start_offset"] == 6
    # A removed partition is forgotten; it leaves the partition's hooks too.
    seventh = fetcher.partitions[("t", 7)][0]
    assert seventh.fetch_sessions == {fetcher: ("t", 7)}
    fetcher.remove(("t", 7))
    _ok, body = round_trip(fetcher, leader)
    assert forgotten(body) == [("t", 7)] and body["topics"] == []
    assert seventh.fetch_sessions == {}
    # A new partition, and a new leader epoch: truncated first, then listed.
    fetcher.add(FakePartition(counter, "u", 0))
    bumped = FakePartition(counter, "t", 1, leader_epoch=3)
    fetcher.add(bumped)
    _ok, body = round_trip(fetcher, leader)
    assert sorted(listed(body)) == [("t", 1), ("u", 0)]
    assert listed(body)[("t", 1)]["current_leader_epoch"] == 3
    assert sorted(session.entries) == sorted(set(fetcher.partitions))
    # Idle again.
    _ok, body = round_trip(fetcher, leader)
    assert body["topics"] == [] and body["forgotten_topics_data"] == []


def expect_full(fetcher, leader):
    ok, body = round_trip(fetcher, leader)
    assert body["session_epoch"] == 0
    wanted = {key: entry[0].log._end for key, entry in fetcher.partitions.items()}
    assert {k: p["fetch_offset"] for k, p in listed(body).items()} == wanted
    assert fetcher.session.session_id in leader.cache.sessions
    _ok, body = round_trip(fetcher, leader)
    assert body["session_epoch"] > 0


def test_a_session_error_or_a_lost_answer_lists_everything_again():
    fetcher, _counter, leader = make_fetcher(50)
    round_trip(fetcher, leader)
    leader.news[("t", 9)] = {"records": b"xxx", "high_watermark": 3}
    round_trip(fetcher, leader)
    fetcher.remove(("t", 1))
    # The leader restarted: its session is gone (FETCH_SESSION_ID_NOT_FOUND).
    leader.cache.sessions.clear()
    ok, body = round_trip(fetcher, leader)
    assert ok and body["session_epoch"] > 0
    assert fetcher.session.epoch == 0 and fetcher.session.session_id == 0
    expect_full(fetcher, leader)
    # A wrong epoch.
    fetcher.session.epoch += 5
    round_trip(fetcher, leader)
    assert fetcher.session.epoch == 0
    expect_full(fetcher, leader)
    # A lost answer: the partitions marked before it are not lost.
    leader.news[("t", 20)] = {"records": b"xx", "high_watermark": 2}
    round_trip(fetcher, leader)
    leader.fail = True
    results = []
    fetcher._fetch(leader, fetcher._fetchable).addBoth(results.append)
    assert isinstance(results[0].value, ConnectionError)
    expect_full(fetcher, leader)


def test_a_throttled_partition_is_left_out_and_comes_back():
    fetcher, _counter, leader = make_fetcher(4, rate=1)
    parts = {key: entry[0] for key, entry in fetcher.partitions.items()}
    for part in parts.values():
        part.isr = (0,)  # not in sync: throttled
        part.config = SimpleNamespace(throttled=lambda kind, index, node: index == 2)
    round_trip(fetcher, leader)
    leader.news[("t", 2)] = {"records": b"x" * 100, "high_watermark": 100}
    round_trip(fetcher, leader)  # over a 1 byte/s rate now
    _ok, body = round_trip(fetcher, leader)
    assert forgotten(body) == [("t", 2)]
    fetcher.manager.follower_throttle.rate = UNLIMITED
    _ok, body = round_trip(fetcher, leader)
    assert listed(body)[("t", 2)]["fetch_offset"] == 100


def test_a_change_no_mark_reported_is_sent_within_the_recheck_interval():
    fetcher, counter, leader = make_fetcher(20)
    round_trip(fetcher, leader)
    round_trip(fetcher, leader)
    fetcher.partitions[("t", 5)][0].log._end = 7  # behind the fetcher's back
    fetcher.broker.time_ms = RECHECK_MS - 1
    _ok, body = round_trip(fetcher, leader)
    assert body["topics"] == []
    fetcher.broker.time_ms = RECHECK_MS
    counter.n = 0
    _ok, body = round_trip(fetcher, leader)
    assert {k: p["fetch_offset"] for k, p in listed(body).items()} == {("t", 5): 7}
    assert counter.n >= 20  # this one looked at every partition
