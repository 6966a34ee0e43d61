"""The fetch session cache's state machine (KIP-227): new, incremental,
forgotten partitions, bad epoch, bad id, closing and eviction."""

import random

import pytest

from pluglog.broker.fetch_sessions import FetchSessionCache, _Full, _Incremental, _Sessionless
from pluglog.errors import FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH

pytestmark = pytest.mark.unit


def want(index, offset=0, max_bytes=1024):
    return {"partition": index, "fetch_offset": offset, "partition_max_bytes": max_bytes}


def request(session_id, epoch, topics, forgotten=(), replica_id=-1):
    return {
        "replica_id": replica_id,
        "max_bytes": 1 << 20,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in forgotten],
    }


def answer(index, hw=10, records=b"", code=0, start=0):
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": hw,
        "last_stable_offset": hw,
        "log_start_offset": start,
        "records": records,
    }


def read(ctx, answers):
    """Stand in for the handler's read: one answer per requested partition,
    from ``answers[(topic, index)]`` (default: nothing new at hw 10)."""
    topics = []
    total = 0
    for topic in ctx.request["topics"]:
        out = []
        for w in topic["partitions"]:
            a = answers.get((topic["topic"], w["partition"]), answer(w["partition"]))
            total += len(a["records"])
            out.append(a)
        topics.append({"topic": topic["topic"], "partitions": out})
    return ctx.respond(topics, total)


def listed(topics):
    return sorted((t["topic"], p["partition_index"]) for t in topics for p in t["partitions"])


def new_session(cache, parts=3, replica_id=-1, now=0):
    ctx = cache.context(
        request(0, 0, {"t": [want(i) for i in range(parts)]}, (), replica_id), 11, now
    )
    assert isinstance(ctx, _Full)
    session_id, topics = read(ctx, {})
    assert len(listed(topics)) == parts  # a full answer lists everything
    return session_id


def test_full_fetch_opens_a_session_and_incremental_answers_only_changes():
    cache = FetchSessionCache(10, rng=random.Random(1))
    sid = new_session(cache)
    assert sid != 0 and cache.created == 1 and len(cache.sessions[sid]) == 3
    # Nothing changed: the incremental request sends nothing and gets nothing,
    # yet reads every partition of the session.
    ctx = cache.context(request(sid, 1, {}), 11, 1)
    assert isinstance(ctx, _Incremental)
    assert [w["partition"] for t in ctx.request["topics"] for w in t["partitions"]] == [0, 1, 2]
    assert read(ctx, {}) == (sid, [])
    # New data on partition 1, a moved high watermark on 2.
    ctx = cache.context(request(sid, 2, {}), 11, 2)
    sid2, topics = read(ctx, {("t", 1): answer(1, records=b"xx"), ("t", 2): answer(2, hw=11)})
    assert sid2 == sid and listed(topics) == [("t", 1), ("t", 2)]
    # Only what was sent is remembered: the same state again answers nothing.
    ctx = cache.context(request(sid, 3, {}), 11, 3)
    assert read(ctx, {("t", 2): answer(2, hw=11)}) == (sid, [])


def test_changed_offsets_are_kept_and_new_partitions_answered():
    cache = FetchSessionCache(10)
    sid = new_session(cache)
    ctx = cache.context(request(sid, 1, {"t": [want(0, offset=7)], "u": [want(5)]}), 11, 1)
    offsets = {
        (t["topic"], w["partition"]): w["fetch_offset"]
        for t in ctx.request["topics"]
        for w in t["partitions"]
    }
    assert offsets == {("t", 0): 7, ("t", 1): 0, ("t", 2): 0, ("u", 5): 0}
    _sid, topics = read(ctx, {})
    assert listed(topics) == [("u", 5)]  # new to the session: its state is news
    ctx = cache.context(request(sid, 2, {}), 11, 2)
    assert ctx.request["topics"][0]["partitions"][0]["fetch_offset"] == 7


def test_forgotten_partitions_leave_the_session():
    cache = FetchSessionCache(10)
    sid = new_session(cache)
    ctx = cache.context(request(sid, 1, {}, [("t", [0, 2]), ("nope", [1])]), 11, 1)
    assert [w["partition"] for t in ctx.request["topics"] for w in t["partitions"]] == [1]
    assert len(cache.sessions[sid]) == 1
    # Re-adding one makes it new again: answered at once.
    ctx = cache.context(request(sid, 2, {"t": [want(0)]}), 11, 2)
    assert listed(read(ctx, {})[1]) == [("t", 0)]


def test_errors_are_always_answered_and_again_when_they_clear():
    cache = FetchSessionCache(10)
    sid = new_session(cache)
    for epoch in (1, 2):
        ctx = cache.context(request(sid, epoch, {}), 11, epoch)
        assert listed(read(ctx, {("t", 0): answer(0, hw=-1, code=6)})[1]) == [("t", 0)]
    ctx = cache.context(request(sid, 3, {}), 11, 3)
    assert listed(read(ctx, {})[1]) == [("t", 0)]  # recovered, same hw as before the error


def test_bad_epoch_and_bad_id():
    cache = FetchSessionCache(10)
    sid = new_session(cache)
    assert cache.context(request(sid, 2, {}), 11, 1) == INVALID_FETCH_SESSION_EPOCH
    assert cache.context(request(sid + 1, 1, {}), 11, 1) == FETCH_SESSION_ID_NOT_FOUND
    assert cache.context(request(0, 1, {}), 11, 1) == FETCH_SESSION_ID_NOT_FOUND
    # A rejected request does not move the epoch on.
    assert isinstance(cache.context(request(sid, 1, {}), 11, 1), _Incremental)
    assert cache.context(request(sid, 1, {}), 11, 1) == INVALID_FETCH_SESSION_EPOCH


def test_final_epoch_closes_and_initial_epoch_reopens():
    cache = FetchSessionCache(10)
    sid = new_session(cache)
    ctx = cache.context(request(sid, -1, {"t": [want(0)]}), 11, 1)
    assert isinstance(ctx, _Sessionless) and sid not in cache.sessions
    assert read(ctx, {})[0] == 0
    sid = new_session(cache)
    ctx = cache.context(request(sid, 0, {"t": [want(0)]}), 11, 2)
    assert isinstance(ctx, _Full) and sid not in cache.sessions
    assert read(ctx, {})[0] not in (0, sid)
    # Fetch v4-v6 has no session fields at all.
    assert isinstance(cache.context(request(0, 0, {}), 6, 3), _Sessionless)


def test_zero_slots_declines_sessions():
    cache = FetchSessionCache(0)
    ctx = cache.context(request(0, 0, {"t": [want(0)]}), 11, 0)
    assert read(ctx, {})[0] == 0 and not cache.sessions


def test_eviction_stale_then_smaller_then_follower_priority():
    cache = FetchSessionCache(2, eviction_ms=1000)
    small = new_session(cache, parts=2, now=0)
    big = new_session(cache, parts=5, now=500)
    # Full, nothing stale, not bigger than the smallest: no session.
    assert new_session(cache, parts=2, now=600) == 0
    # Bigger than the smallest consumer session: takes its slot.
    bigger = new_session(cache, parts=3, now=700)
    assert bigger and small not in cache.sessions and cache.evicted == 1
    # A follower outranks any consumer session.
    follower = new_session(cache, parts=1, replica_id=2, now=800)
    assert follower and bigger not in cache.sessions and big in cache.sessions
    # A consumer never evicts a follower's session, however big.
    cache.sessions.pop(big)
    cache.create(True, [], 800)
    assert new_session(cache, parts=50, now=900) == 0
    # Idle over eviction_ms: anyone takes the slot.
    assert new_session(cache, parts=1, now=5000) != 0


def test_rotation_keeps_a_byte_limited_session_fair():
    cache = FetchSessionCache(10, fetch_max_bytes=1 << 20)
    sid = new_session(cache, parts=4)
    ctx = cache.context(dict(request(sid, 1, {}), max_bytes=4), 11, 1)
    read(ctx, {("t", 0): answer(0, records=b"xxxx")})
    ctx = cache.context(request(sid, 2, {}), 11, 2)
    assert [w["partition"] for w in ctx.request["topics"][0]["partitions"]] == [1, 2, 3, 0]


def test_follower_client_and_cache_agree():
    from pluglog.replication.fetch_session import FetchSessionClient

    cache = FetchSessionCache(10)
    client = FetchSessionClient()

    def exchange(offsets, answers=None, version=11):
        wanted = {("t", i): want(i, offset=o) for i, o in offsets.items()}
        # Every partition marked: this checks the wire exchange, not the marking.
        client.mark_all(wanted)
        sid, epoch, topics, forgotten = client.build(set(wanted), wanted.__getitem__)
        req = {
            "replica_id": 1,
            "max_bytes": 1 << 20,
            "session_id": sid,
            "session_epoch": epoch,
            "topics": topics,
            "forgotten_topics_data": forgotten,
        }
        sent = sorted((t["topic"], w["partition"]) for t in topics for w in t["partitions"])
        ctx = cache.context(req, version, 0)
        if isinstance(ctx, int):
            client.handle_response({"error_code": ctx, "session_id": 0, "responses": []})
            return sent, None
        session_id, out = read(ctx, answers or {})
        client.handle_response({"error_code": 0, "session_id": session_id, "responses": out})
        return sent, listed(out)

    assert exchange({0: 0, 1: 0}) == ([("t", 0), ("t", 1)], [("t", 0), ("t", 1)])
    assert client.session_id and client.epoch == 1
    assert cache.sessions[client.session_id].privileged
    # Idle: nothing listed either way.
    assert exchange({0: 0, 1: 0}) == ([], [])
    # Partition 0 moved on, 1 dropped, 2 added.
    assert exchange({0: 5, 2: 0}) == ([("t", 0), ("t", 2)], [("t", 2)])
    assert sorted(cache.sessions[client.session_id].entries) == [("t", 0), ("t", 2)]
    # The leader lost the session (restart): one error, then a full fetch.
    cache.sessions.clear()
    assert exchange({0: 5, 2: 0}) == ([], None)
    assert (client.session_id, client.epoch) == (0, 0)
    assert exchange({0: 5, 2: 0}) == ([("t", 0), ("t", 2)], [("t", 0), ("t", 2)])
    # A lost answer: the next fetch is full again and replaces the session.
    old = client.session_id
    client.request_failed()
    assert exchange({0: 5, 2: 0})[0] == [("t", 0), ("t", 2)]
    assert old not in cache.sessions and client.session_id in cache.sessions


def test_no_rotation_when_the_answer_was_far_from_its_limit():
    cache = FetchSessionCache(10, fetch_max_bytes=10)  # caps the request's 1 MiB
    sid = new_session(cache, parts=3)
    ctx = cache.context(request(sid, 1, {}), 11, 1)
    read(ctx, {("t", 0): answer(0, records=b"xx")})
    ctx = cache.context(request(sid, 2, {}), 11, 2)
    assert [w["partition"] for w in ctx.request["topics"][0]["partitions"]] == [0, 1, 2]
    read(ctx, {("t", 0): answer(0, records=b"xxxxxx")})  # over half of fetch.max.bytes
    ctx = cache.context(request(sid, 3, {}), 11, 3)
    assert [w["partition"] for w in ctx.request["topics"][0]["partitions"]] == [1, 2, 0]


class _Watched:
    """A stand-in Partition a session entry watches (its ``fetch_sessions``)."""

    def __init__(self):
        self.fetch_sessions = {}


def test_session_order_follows_the_rotation_rule_over_random_fetches():
    """The order a session reads its dirty partitions in, against a list
    model of the rule: new partitions join at the end, forgotten ones leave,
    and after an answer near its byte limit the partitions that returned
    records move to the end, keeping their order (FetchSession.rotate);
    a subset of dirty partitions is read in the same order."""
    rng = random.Random(7)
    parts = {}

    def lookup(_key, name, index):
        return parts.setdefault((name, index), _Watched())

    cache = FetchSessionCache(10, lookup=lookup)
    model = [("t", i) for i in range(12)]
    offsets = dict.fromkeys(model, 0)
    ctx = cache.context(request(0, 0, {"t": [want(i) for i in range(12)]}), 11, 0)
    sid, _ = read(ctx, {})
    session = cache.sessions[sid]
    rotations = 0
    for epoch in range(1, 200):
        changed, forgotten = {}, []
        if rng.random() < 0.2:
            new = ("t", max(i for _t, i in model + list(offsets)) + 1)
            model.append(new)
            offsets[new] = 0
            changed[new] = 0
        if rng.random() < 0.15 and len(model) > 4:
            gone = rng.choice(model)
            model.remove(gone)
            forgotten.append(gone)
        for key in rng.sample(model, 2):
            if key not in changed and rng.random() < 0.5:
                offsets[key] += 1
                changed[key] = offsets[key]
        for key in rng.sample(model, 3):
            session.mark(key)  # a change its Partition reported
        topics = {"t": [want(k[1], offset=o) for k, o in changed.items()]} if changed else {}
        body = request(sid, epoch, topics, [("t", [k[1] for k in forgotten])] if forgotten else ())
        ctx = cache.context(dict(body, max_bytes=8), 11, epoch)
        asked = [("t", w["partition"]) for t in ctx.request["topics"] for w in t["partitions"]]
        assert asked == [k for k in model if k in ctx.seen], epoch
        answers = {}
        for key in asked:
            roll = rng.random()
            if roll < 0.3:
                answers[key] = answer(key[1], hw=100, records=b"xx")
            elif roll < 0.6:
                # At the end: settled, no longer dirty (a subset next time).
                answers[key] = answer(key[1], hw=offsets[key])
        read(ctx, answers)
        served = [k for k in asked if k in answers and answers[k]["records"]]
        if served and len(served) < len(model) and 2 * len(served) * 2 >= 8:
            rotations += 1
            model = [k for k in model if k not in served] + served
    assert rotations > 20
    # And the whole session, once a sweep marks everything, in the same order.
    session.mark_all()
    everything = [("t", w["partition"]) for t in session.topics for w in t["partitions"]]
    assert everything == model
