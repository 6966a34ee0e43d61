"""The console browser's reads of the remote tier, in-process, on a twisted Clock.

The log and the ``filesystem`` provider are real (as in
test_tiered_storage.py, whose helpers these tests share); the reader pool
is replaced by Deferreds the test fires, so what is checked is that a page
parks while the bytes are on their way, completes when they arrive, and
answers 503 (not a hang) when the store never answers.
"""

from twisted.internet import defer
from twisted.internet.task import Clock

from pluglog.broker.partition import Partition
from pluglog.console import browse
from pluglog.console.params import PageError
from pluglog.storage.remote.tier import ChunkCache, RemoteTier
from tests.unit.test_tiered_storage import CONFIG, tiered, upload_closed

__all__ = ["tiered"]  # the fixture, shared


class ManualPool:
    """The reader pool's stand-in: each provider call waits for the test."""

    def __init__(self):
        self.calls = []

    def __call__(self, function, *args):
        d = defer.Deferred()
        self.calls.append((d, function, args))
        return d

    def answer_all(self):
        calls, self.calls = self.calls, []
        for d, function, args in calls:
            d.callback(function(*args))
        return len(calls)

    def fail_all(self):
        calls, self.calls = self.calls, []
        for d, _function, _args in calls:
            d.errback(OSError("the store is down"))
        return len(calls)


def tiered_partition(log, remote, pool):
    part = Partition("t", 0, log, CONFIG)
    tier = RemoteTier("t", 0, remote, ChunkCache(1 << 30), pool)
    tier.on_ready = part.data_ready  # as the remote log manager wires it
    log.remote_tier = tier
    uploaded = upload_closed(log, remote)
    tier.set_segments(uploaded)
    tier.loaded = True
    log.delete_oldest_segments(len(uploaded))
    assert log.log_start_offset > 10
    return part, tier


def test_a_page_below_the_local_start_waits_for_the_remote_bytes(tiered):
    log, remote = tiered
    pool = ManualPool()
    part, tier = tiered_partition(log, remote, pool)
    assert tier.highest_offset == log.log_start_offset - 1  # LATEST_TIERED's answer
    clock = Clock()
    page = browse.read_records(part, 0, 3, 64, None, clock)
    assert not page.called and part.parked_fetches  # parked, like a fetch
    # The index, then the record chunks: each arrival wakes the page.
    while pool.calls and not page.called:
        pool.answer_all()
    records, following = page.result
    assert [r["offset"] for r in records] == [0, 1, 2]
    assert records[0]["value"]["text"].startswith("value-000000-")
    assert following == 3
    assert not part.parked_fetches
    # Cached now: the record page answers at once.
    one = browse.read_one(part, 1, 64, None, clock)
    assert one.result["value"]["text"].startswith("value-000001-")
    # Across the boundary, remote then local records in one page.
    first = log.log_start_offset - 1
    across = browse.read_records(part, first, 2, 64, None, clock)
    while pool.calls and not across.called:
        pool.answer_all()
    assert [r["offset"] for r in across.result[0]] == [first, first + 1]


def test_a_store_that_never_answers_gives_a_503_not_a_hang(tiered):
    log, remote = tiered
    pool = ManualPool()
    part, _tier = tiered_partition(log, remote, pool)
    clock = Clock()
    page = browse.read_records(part, 0, 3, 64, None, clock)
    assert pool.fail_all()
    assert not page.called
    clock.advance(browse.REMOTE_WAIT_S)
    failure = page.result
    assert failure.check(PageError) and failure.value.status == 503
    assert "could not be read" in failure.value.message
    assert not part.parked_fetches  # the waiter went with it
    page.addErrback(lambda _f: None)
