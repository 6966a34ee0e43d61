"""A follower's session remembers empty answers too (pluglog.server.handlers.fetch
and fetch_follower): a partition behind the log end
whose read returned nothing for lack of room in the answer is answered, in
the session's later fetches, without a read and with only the follower's
fetch time updated, while nothing changed. Held to byte equality with the
same fetches answered by reading every partition, and to equality of every
partition's follower state (the ISR lag check's inputs) and high watermark,
on segment files, with a second follower moving the high watermark and the
ISR shrinking and growing as Kafka's lag rule says."""

import collections
import random
from types import SimpleNamespace
from unittest import mock

import pytest

from pluglog.broker.partition import Partition
from pluglog.broker.remote_replica import RemoteReplica
from pluglog.server.handlers import fetch as fetch_handler
from pluglog.server.handlers.common import RequestContext
from pluglog.storage.segment_log import SegmentPartitionLog
from tests.unit.test_fetch_session_empty import (
    PARTITIONS,
    _append,
    _Consumer,
    _frame,
    _read_all,
    _reading_everything,
)
from tests.unit.test_fetch_session_empty import _broker as _plain_broker
from tests.unit.test_server_fastlane import batch

pytestmark = pytest.mark.unit

EPOCH = 3
LAG_MS = 4000


def _broker(path):
    broker = _plain_broker(path)
    now = broker.now_ms()
    for index in range(PARTITIONS):
        part = broker.partitions[("t", index)]
        part.become_leader(EPOCH, (0, 1, 2), (0, 1, 2), now)
        # The coordinator's answer at once: an ISR change made inside a read.
        part.isr_writer = lambda part, isr: part.isr_changed(isr)
    return broker


class _Follower(_Consumer):
    """Broker ``replica_id``'s fetches of topic ``t`` (as LeaderFetcher's),
    in a session or (``sessionless``) listing every partition each time."""

    def __init__(self, broker, replica_id, version, sessionless=False):
        super().__init__(broker)
        self.replica_id = replica_id
        self.version = version
        self.sessionless = sessionless
        self.ctx = RequestContext(broker, SimpleNamespace(api_version=version), "peer")

    def fetch(self, max_bytes, parked=None):
        """One Fetch (``parked`` as :meth:`_Consumer.fetch`); returns the
        encoded answer, session id zeroed."""
        listed = set(self.offsets) if self.sessionless else self.changed
        wants = [
            {
                "partition": p,
                "current_leader_epoch": EPOCH,
                "fetch_offset": self.offsets[p],
                "last_fetched_epoch": EPOCH if self.offsets[p] else -1,
                "log_start_offset": 0,
                "partition_max_bytes": 1 << 20,
            }
            for p in sorted(listed)
        ]
        body = {
            "replica_id": self.replica_id,
            "max_wait_ms": 0 if parked is None else 100,
            "min_bytes": 1 if parked is None else 1 << 30,
            "max_bytes": max_bytes,
            "isolation_level": 0,
            "session_id": self.session_id,
            "session_epoch": -1 if self.sessionless else self.epoch,
            "topics": [{"topic": "t", "partitions": wants}] if wants else [],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        answer = self.send(body, parked)
        if not self.sessionless:
            self.session_id, self.epoch = answer["session_id"], self.epoch + 1
        for topic in answer["responses"]:
            for part in topic["partitions"]:
                assert part["error_code"] == 0, part
        self.advance(answer)
        return _frame(answer, self.version)


def _state(broker):
    """Per partition: HW, ISR and each follower's state as the lag check,
    the HW and follower fetching read it."""
    now = broker.now_ms()
    out = []
    for index in range(PARTITIONS):
        part = broker.partitions[("t", index)]
        remotes = tuple(
            (
                node,
                r.leo,
                r.last_fetch_ms,
                r.last_caught_up_ms,
                r.last_fetch_leader_leo,
                r.caught_up_ms,
                None if r.clock is None else r.clock.fetch_ms,
            )
            for node, r in sorted(part.remotes.items())
        )
        out.append((part.high_watermark, part.isr, remotes, part.lagging_followers(now, LAG_MS)))
    return out


def _shrink_isr(broker):
    """The leader's periodic check (ReplicaManager's): lagging followers leave."""
    now = broker.now_ms()
    for index in range(PARTITIONS):
        part = broker.partitions[("t", index)]
        lagging = part.lagging_followers(now, LAG_MS)
        if lagging:
            part.isr_changed(tuple(b for b in part.isr if b not in lagging))


def _counting():
    """Counts of log reads and update_follower calls while patched."""
    counts = collections.Counter()
    read, update = SegmentPartitionLog.read, Partition.update_follower

    def counted_read(self, *args, **kwargs):
        counts["reads"] += 1
        return read(self, *args, **kwargs)

    def counted_update(self, *args, **kwargs):
        counts["updates"] += 1
        return update(self, *args, **kwargs)

    patches = (
        mock.patch.object(SegmentPartitionLog, "read", counted_read),
        mock.patch.object(Partition, "update_follower", counted_update),
    )
    return counts, patches


@pytest.mark.parametrize("version", [11, 12])
def test_follower_answers_and_state_equal_reading_every_partition(tmp_path, version):
    totals = collections.Counter()
    for seed in range(1, 6):
        made = [_broker(tmp_path / f"{seed}-{i}") for i in range(2)]
        try:
            _compare(made, seed, version, totals)
        finally:
            for broker in made:
                broker.storage.close()
    # The path under test was taken: fewer reads and follower updates.
    assert totals["remembering reads"] < totals["reading reads"], totals
    assert totals["remembering updates"] < totals["reading updates"], totals


def _compare(brokers, seed, version, totals):
    """50 fetches of follower 1's session on each broker (same data, same
    appends, same clock), one answered through remembered empty answers,
    one reading everything: each pair of answers byte-equal, and every
    partition's follower state equal after each."""
    rng = random.Random(seed)
    for index in range(PARTITIONS):
        for _ in range(rng.randint(1, 6)):
            _append(brokers, index, [b"x" * rng.choice((10, 60, 300))] * rng.randint(1, 4))
    followers = [_Follower(b, 1, version) for b in brokers]
    others = [_Follower(b, 2, version, sessionless=True) for b in brokers]
    for step in range(50):
        max_bytes = rng.choice((900, 1500, 2500, 2500, 1 << 20)) if step else 2500
        # Some fetches park: they re-read when their time is up, after
        # appends made while they waited.
        grown = rng.sample(range(PARTITIONS), 3) if step in (0, 9, 23) else None
        answers = []
        for name, follower, general in (
            ("remembering", followers[0], False),
            ("reading", followers[1], True),
        ):
            parked = None
            if grown is not None:

                def parked(broker=follower.broker, grown=grown):
                    for value in (b"p", b"q"):
                        for index in grown:
                            _append([broker], index, [value * 60])
                        broker.reactor.advance(0)

            counts, patches = _counting()
            with patches[0], patches[1]:
                if general:
                    with mock.patch.object(fetch_handler, "_read_all", _reading_everything):
                        answers.append(follower.fetch(max_bytes, parked))
                else:
                    answers.append(follower.fetch(max_bytes, parked))
            for what, count in counts.items():
                totals[f"{name} {what}"] += count
        assert answers[0] == answers[1], f"seed {seed}, step {step}"
        assert _state(brokers[0]) == _state(brokers[1]), f"seed {seed}, step {step}"
        # Between fetches: time, appends, follower 2 (moving the HW), the
        # ISR check (followers behind for LAG_MS leave, and come back once
        # caught up through update_follower's expansion).
        elapsed = rng.choice((0.2, 1, 2.5))
        for broker in brokers:
            broker.reactor.advance(elapsed)
        if rng.random() < 0.4:
            index = rng.randrange(PARTITIONS)
            _append(brokers, index, [b"y" * rng.choice((10, 60, 300))])
        if rng.random() < 0.3:
            limit = rng.choice((900, 2500, 1 << 20))
            assert others[0].fetch(limit) == others[1].fetch(limit)
        for broker in brokers:
            _shrink_isr(broker)
        assert _state(brokers[0]) == _state(brokers[1]), f"seed {seed}, step {step}"
    assert followers[0].offsets == followers[1].offsets


def test_an_answer_remembered_only_where_the_follower_state_was_updated(tmp_path):
    """A parked fetch's later passes do not update the follower state
    (only its first does): an empty answer read there is not remembered,
    or the next fetch would give it with the state of before the append
    that woke the parked one (the log end its last update saw)."""
    brokers = [_broker(tmp_path / str(i)) for i in range(2)]
    try:
        for broker in brokers:
            _fill(broker)
        followers = [_Follower(b, 1, 11) for b in brokers]
        last = PARTITIONS - 1
        for follower, general in zip(followers, (False, True)):
            reading = mock.patch.object(
                fetch_handler, "_read_all", _reading_everything if general else _read_all
            )
            with reading:
                follower.fetch(2500)
                # Parked: the append marks the last partition, forgetting its
                # answer; the re-reads read it empty again.
                follower.fetch(
                    2500, parked=lambda b=follower.broker: _append([b], last, [b"w" * 300])
                )
                follower.broker.reactor.advance(1)
                follower.fetch(2500)
        assert _state(brokers[0]) == _state(brokers[1])
        part = brokers[0].partitions[("t", last)]
        assert part.remotes[1].last_fetch_leader_leo == part.log.log_end_offset
    finally:
        for broker in brokers:
            broker.storage.close()


@pytest.fixture
def broker(tmp_path):
    made = _broker(tmp_path)
    yield made
    made.storage.close()


def _fill(broker):
    for index in range(PARTITIONS):
        _append([broker], index, [b"x" * 300] * 3)


def test_a_lagging_follower_is_answered_from_memory_with_its_fetch_time(broker):
    _fill(broker)
    follower = _Follower(broker, 1, 11)
    follower.fetch(2500)  # full: the first few fill it
    follower.fetch(2500)  # the rest read empty, remembered
    session = broker.fetch_sessions.sessions[follower.session_id]
    empty = [k for k, e in session.entries.items() if e["empty_until"] >= 0]
    assert len(empty) > PARTITIONS // 2, empty
    broker.reactor.advance(3)
    counts, patches = _counting()
    with patches[0], patches[1]:
        follower.fetch(2500)
    remote = broker.partitions[empty[-1]].remotes[1]
    # Not read, not updated through update_follower, yet fetched now.
    assert remote.last_fetch_ms == broker.now_ms()
    assert counts["updates"] < PARTITIONS - len(empty) + 4, (counts, len(empty))
    # An append forgets it: read (and updated) again at the next fetch.
    key = empty[-1]
    broker.partitions[key].append(batch([b"z"]), broker.now_ms())
    assert session.entries[key]["empty_until"] == -1


def test_a_follower_out_of_the_isr_is_never_answered_from_memory(broker):
    _fill(broker)
    for index in range(PARTITIONS):
        part = broker.partitions[("t", index)]
        part.isr_writer = None  # stays out: no expansion
        part.isr_changed((0, 2))
    follower = _Follower(broker, 1, 11)
    for _ in range(4):
        broker.reactor.advance(1)
        counts, patches = _counting()
        with patches[0], patches[1]:
            follower.fetch(2500)
        session = broker.fetch_sessions.sessions[follower.session_id]
        assert all(e["empty_until"] < 0 for e in session.entries.values())
        # Every partition behind is read and its follower state updated.
        behind = sum(
            follower.offsets[i] < broker.partitions[("t", i)].log.log_end_offset
            for i in range(PARTITIONS)
        )
        assert counts["updates"] >= behind > 0


def test_fetched_again_applies_only_to_an_unchanged_lagging_follower():
    remote = RemoteReplica(1, 1000)
    remote.leo, remote.last_fetch_leader_leo, remote.last_fetch_ms = 5, 9, 2000
    caught_up = remote.last_caught_up_ms
    assert remote.fetched_again(5, 3000)
    assert (remote.leo, remote.last_fetch_leader_leo, remote.last_fetch_ms) == (5, 9, 3000)
    assert remote.last_caught_up_ms == caught_up
    # Another offset, an offset at the last update's log end, or a session
    # clock: update_follower's other branches, so nothing is done here.
    assert not remote.fetched_again(6, 4000)
    remote.leo = 9
    assert not remote.fetched_again(9, 4000)
    remote.leo = 5
    remote.clock = SimpleNamespace(fetch_ms=3500)
    assert not remote.fetched_again(5, 4000)
    assert remote.last_fetch_ms == 3000
