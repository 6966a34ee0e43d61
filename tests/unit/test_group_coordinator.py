"""Group coordinator state machine: join/sync/heartbeat/leave driven by a Clock.

Runs against a real Broker on in-memory storage, so every group write really
goes through ``__consumer_offsets``. The helpers here are shared by the other
test_group_* modules.
"""

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock

from pluglog import errors
from pluglog.broker.core import Broker
from pluglog.config import BrokerConfig
from pluglog.group import GroupCoordinator
from pluglog.group.model import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE
from pluglog.plugins import make_plugin_manager
from pluglog.registry import Registry

SESSION = 10000
REBALANCE = 20000


def result_of(d):
    """The result of a Deferred that must already have fired successfully."""
    assert isinstance(d, defer.Deferred)
    out = []
    d.addBoth(out.append)
    assert out, "the Deferred has not fired"
    if isinstance(out[0], defer.Failure):
        out[0].raiseException()
    return out[0]


def pending(d):
    out = []

    def seen(result):
        out.append(result)
        return result

    d.addBoth(seen)
    assert not out, f"the Deferred fired early with {out[0]!r}"
    return d


def make_broker(tmp_path, clock, storage="memory", **settings):
    config = BrokerConfig(
        data_dir=str(tmp_path),
        storage=storage,
        fsync="never",
        group_initial_rebalance_delay_ms=0,
        offsets_topic_num_partitions=3,
    ).replace(**settings)
    broker = Broker(config, Registry(make_plugin_manager(autoload=False)), clock)
    result_of(broker.start())
    # Tests build their own coordinators; retire the one Broker.start made.
    result_of(broker.group_coordinator.stop())
    broker.group_coordinator = None
    return broker


def start_coordinator(broker):
    gc = GroupCoordinator(broker)
    d = gc.start()
    broker.reactor.advance(0)
    result_of(d)
    return gc


class Env:
    """A broker, its coordinator and a Clock, plus shorthands for requests."""

    def __init__(self, tmp_path, **settings):
        self.clock = Clock()
        self.clock.advance(1000)
        self.broker = make_broker(tmp_path, self.clock, **settings)
        self.gc = start_coordinator(self.broker)

    def join(
        self,
        member_id="",
        group="g",
        protocols=(("range", b"r"),),
        instance=None,
        session=SESSION,
        rebalance=REBALANCE,
        v4=False,
        protocol_type="consumer",
        client_id="client",
    ):
        return self.gc.join_group(
            group,
            member_id,
            instance,
            client_id,
            "/127.0.0.1",
            session,
            rebalance,
            protocol_type,
            [{"name": n, "metadata": m} for n, m in protocols],
            v4,
        )

    def sync(self, member_id, generation, assignments=None, group="g", instance=None):
        items = [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]
        return self.gc.sync_group(group, generation, member_id, instance, items)

    def heartbeat(self, member_id, generation, group="g", instance=None):
        return self.gc.heartbeat(group, generation, member_id, instance)

    def group(self, name="g"):
        return self.gc.groups[name]

    def stable_group(self, count, **kw):
        """``count`` members joined and synced; returns (member ids, generation)."""
        first = result_of(self.join(**kw))
        ids = [first["member_id"]]
        joins = []
        for _ in range(count - 1):
            joins.append(self.join(**kw))
        if joins:
            # The others wait for the first member to rejoin the new generation.
            rejoin = self.join(ids[0], **kw)
            results = [result_of(d) for d in [rejoin, *joins]]
            ids = [r["member_id"] for r in results]
            first = results[0]
        generation = first["generation_id"]
        syncs = [self.sync(m, generation) for m in ids[1:]]
        leader = self.sync(ids[0], generation, {m: m.encode() for m in ids})
        for m, d in zip(ids, [leader, *syncs]):
            assert result_of(d) == {"error_code": 0, "assignment": m.encode()}
        assert self.group().state == STABLE
        return ids, generation


@pytest.fixture
def env(tmp_path):
    return Env(tmp_path)


def test_single_member_member_id_required_then_stable(env):
    first = result_of(env.join(v4=True))
    assert first["error_code"] == errors.MEMBER_ID_REQUIRED
    assert first["member_id"].startswith("client-")
    joined = result_of(env.join(first["member_id"], v4=True))
    assert joined["error_code"] == 0
    assert joined["generation_id"] == 1
    assert joined["leader"] == joined["member_id"] == first["member_id"]
    assert joined["protocol_name"] == "range"
    assert joined["members"] == [
        {"member_id": first["member_id"], "group_instance_id": None, "metadata": b"r"}
    ]
    assert env.group().state == COMPLETING_REBALANCE
    assert env.heartbeat(first["member_id"], 1) == 0
    synced = result_of(env.sync(first["member_id"], 1, {first["member_id"]: b"assign"}))
    assert synced == {"error_code": 0, "assignment": b"assign"}
    assert env.group().state == STABLE
    assert env.heartbeat(first["member_id"], 1) == 0


def test_pending_member_blocks_rebalance_until_it_joins_or_expires(env):
    (a,), gen = env.stable_group(1)
    required = result_of(env.join(v4=True))
    assert required["error_code"] == errors.MEMBER_ID_REQUIRED
    rejoin = pending(env.join(a))  # the group is still Stable: a is the leader
    assert env.group().state == PREPARING_REBALANCE
    env.clock.advance(SESSION / 1000.0 - 0.001)
    pending(rejoin)
    env.clock.advance(0.002)  # the pending member never came back
    assert result_of(rejoin)["generation_id"] == gen + 1
    assert list(env.group().members) == [a]


def test_two_members_join_sync_and_follower_gets_empty_member_list(env):
    (a,), gen = env.stable_group(1)
    b_join = pending(env.join(client_id="other"))
    assert env.group().state == PREPARING_REBALANCE
    assert env.heartbeat(a, gen) == errors.REBALANCE_IN_PROGRESS
    assert result_of(env.sync(a, gen)) == {
        "error_code": errors.REBALANCE_IN_PROGRESS,
        "assignment": b"",
    }
    a_join = result_of(env.join(a))
    b = result_of(b_join)
    assert a_join["generation_id"] == b["generation_id"] == gen + 1
    assert a_join["leader"] == b["leader"] == a
    assert [m["member_id"] for m in a_join["members"]] == [a, b["member_id"]]
    assert b["members"] == []
    b_sync = pending(env.sync(b["member_id"], gen + 1))
    a_sync = env.sync(a, gen + 1, {a: b"A", b["member_id"]: b"B"})
    assert result_of(a_sync)["assignment"] == b"A"
    assert result_of(b_sync)["assignment"] == b"B"
    assert env.heartbeat(b["member_id"], gen + 1) == 0


def test_stable_follower_rejoin_with_same_metadata_does_not_rebalance(env):
    (a, b), gen = env.stable_group(2)
    again = result_of(env.join(b))
    assert again["generation_id"] == gen
    assert again["members"] == []
    assert env.group().state == STABLE
    changed = pending(env.join(b, protocols=(("range", b"new"),)))
    assert env.group().state == PREPARING_REBALANCE
    result_of(env.join(a))
    assert result_of(changed)["generation_id"] == gen + 1


def test_rebalance_timeout_drops_members_that_do_not_rejoin(env):
    (a, b, c), gen = env.stable_group(3)
    d_join = pending(env.join(client_id="d", rebalance=REBALANCE))
    a_join = pending(env.join(a))
    b_join = pending(env.join(b))
    # c keeps heartbeating but never rejoins
    for _ in range(int(REBALANCE / 5000)):
        env.clock.advance(5)
        if env.group().state == PREPARING_REBALANCE:
            assert env.heartbeat(c, gen) == errors.REBALANCE_IN_PROGRESS
    results = [result_of(d) for d in (a_join, b_join, d_join)]
    assert {r["generation_id"] for r in results} == {gen + 1}
    assert c not in env.group().members
    assert len(env.group().members) == 3
    assert env.heartbeat(c, gen) == errors.UNKNOWN_MEMBER_ID


def test_session_expiry_removes_member_and_rebalances(env):
    (a, b), gen = env.stable_group(2)
    for _ in range(3):
        env.clock.advance(3)
        assert env.heartbeat(a, gen) == 0
    assert b in env.group().members
    env.clock.advance(1)
    # b has been silent for 10 s: it is gone and a must rejoin
    assert b not in env.group().members
    assert env.heartbeat(a, gen) == errors.REBALANCE_IN_PROGRESS
    rejoined = result_of(env.join(a))
    assert rejoined["generation_id"] == gen + 1
    assert [m["member_id"] for m in rejoined["members"]] == [a]


def test_parked_join_is_not_expired_by_the_session_timer(env):
    (a, b), gen = env.stable_group(2)
    a_join = pending(env.join(a))  # leader rejoin -> rebalance, b slow to rejoin
    env.clock.advance(SESSION / 1000.0 + 1)  # b's session ends first
    assert a in env.group().members
    result = result_of(a_join)
    assert result["generation_id"] == gen + 1
    assert list(env.group().members) == [a]


def test_leave_group_triggers_rebalance_and_last_leave_empties_group(env):
    (a, b), gen = env.stable_group(2)
    assert env.gc.leave_group("g", [(b, None)]) == (0, [0])
    assert env.heartbeat(a, gen) == errors.REBALANCE_IN_PROGRESS
    assert result_of(env.join(a))["generation_id"] == gen + 1
    assert env.gc.leave_group("g", [(a, None)]) == (0, [0])
    assert env.group().state == PREPARING_REBALANCE
    assert env.gc.leave_group("g", [("nobody", None)]) == (0, [errors.UNKNOWN_MEMBER_ID])
    env.clock.advance(REBALANCE / 1000.0)
    assert env.group().state == EMPTY
    assert env.group().generation_id == gen + 2
    assert env.gc.leave_group("nogroup", [("x", None)]) == (0, [errors.UNKNOWN_MEMBER_ID])


def test_leave_of_a_member_parked_in_join_answers_it(env):
    (a, b), gen = env.stable_group(2)
    b_join = pending(env.join(b, protocols=(("range", b"changed"),)))
    env.gc.leave_group("g", [(b, None)])
    assert result_of(b_join)["error_code"] == errors.UNKNOWN_MEMBER_ID


def test_initial_rebalance_delay_waits_and_extends_for_new_members(tmp_path):
    env = Env(tmp_path, group_initial_rebalance_delay_ms=3000)
    a = pending(env.join())
    env.clock.advance(1)
    b = pending(env.join(client_id="b"))
    env.clock.advance(1.999)
    pending(a)
    env.clock.advance(0.001)  # first delay over, but b arrived: wait another 3 s
    pending(a)
    env.clock.advance(2.999)
    pending(b)
    env.clock.advance(0.001)
    ra, rb = result_of(a), result_of(b)
    assert ra["generation_id"] == rb["generation_id"] == 1
    assert len(ra["members"]) == 2


def test_initial_delay_without_new_members_completes_after_one_delay(tmp_path):
    env = Env(tmp_path, group_initial_rebalance_delay_ms=3000)
    a = pending(env.join())
    env.clock.advance(2.999)
    pending(a)
    env.clock.advance(0.001)
    assert result_of(a)["generation_id"] == 1


def test_protocol_selected_by_votes(env):
    a = env.join(protocols=(("range", b""), ("roundrobin", b"")))
    (a_id,) = [result_of(a)["member_id"]]
    b = env.join(protocols=(("roundrobin", b""), ("range", b"")))
    c = env.join(protocols=(("roundrobin", b""), ("sticky", b""), ("range", b"")))
    a2 = env.join(a_id, protocols=(("range", b""), ("roundrobin", b"")))
    assert {result_of(d)["protocol_name"] for d in (a2, b, c)} == {"roundrobin"}


def test_join_errors(env):
    assert result_of(env.join(group=""))["error_code"] == errors.INVALID_GROUP_ID
    assert result_of(env.join(protocols=()))["error_code"] == errors.INCONSISTENT_GROUP_PROTOCOL
    assert (
        result_of(env.join(protocol_type=""))["error_code"] == errors.INCONSISTENT_GROUP_PROTOCOL
    )
    assert result_of(env.join(session=1800001))["error_code"] == errors.INVALID_SESSION_TIMEOUT
    assert result_of(env.join(session=5999))["error_code"] == errors.INVALID_SESSION_TIMEOUT
    assert "g" not in env.gc.groups  # refused joins leave nothing behind
    assert result_of(env.join("ghost"))["error_code"] == errors.UNKNOWN_MEMBER_ID
    (a,), gen = env.stable_group(1)
    assert result_of(env.join(protocol_type="connect"))["error_code"] == (
        errors.INCONSISTENT_GROUP_PROTOCOL
    )
    assert result_of(env.join(protocols=(("sticky", b""),)))["error_code"] == (
        errors.INCONSISTENT_GROUP_PROTOCOL
    )
    assert result_of(env.join("ghost"))["error_code"] == errors.UNKNOWN_MEMBER_ID


def test_sync_and_heartbeat_errors(env):
    assert result_of(env.sync("x", 1, group="nope"))["error_code"] == errors.UNKNOWN_MEMBER_ID
    assert env.heartbeat("x", 1, group="nope") == errors.UNKNOWN_MEMBER_ID
    assert env.heartbeat("x", 1, group="") == errors.INVALID_GROUP_ID
    (a,), gen = env.stable_group(1)
    assert result_of(env.sync(a, gen + 1))["error_code"] == errors.ILLEGAL_GENERATION
    assert result_of(env.sync("x", gen))["error_code"] == errors.UNKNOWN_MEMBER_ID
    assert env.heartbeat(a, gen - 1) == errors.ILLEGAL_GENERATION
    assert env.heartbeat("x", gen) == errors.UNKNOWN_MEMBER_ID
    pending(env.join(client_id="b"))
    assert result_of(env.sync(a, gen))["error_code"] == errors.REBALANCE_IN_PROGRESS


def test_static_member_rejoin_gets_assignment_without_rebalance(env):
    first = result_of(env.join(instance="ia"))
    assert first["member_id"].startswith("ia-")
    b_join = pending(env.join(instance="ib"))
    sa2 = result_of(env.join(first["member_id"], instance="ia"))
    sb = result_of(b_join)
    gen = sa2["generation_id"]
    assert sb["member_id"].startswith("ib-")
    b_sync = env.sync(sb["member_id"], gen, instance="ib")
    result_of(env.sync(sa2["member_id"], gen, {sa2["member_id"]: b"A", sb["member_id"]: b"B"}))
    assert result_of(b_sync)["assignment"] == b"B"
    assert env.group().state == STABLE

    # "ib" restarts and comes back with no member id: no rebalance for "ia".
    back = result_of(env.join(instance="ib", v4=True))
    assert back["error_code"] == 0
    assert back["generation_id"] == gen
    assert back["member_id"] != sb["member_id"]
    assert back["leader"] == sa2["member_id"]
    assert env.group().state == STABLE
    assert env.heartbeat(sa2["member_id"], gen, instance="ia") == 0
    synced = result_of(env.sync(back["member_id"], gen, instance="ib"))
    assert synced == {"error_code": 0, "assignment": b"B"}
    # The old incarnation is fenced.
    assert env.heartbeat(sb["member_id"], gen, instance="ib") == errors.FENCED_INSTANCE_ID
    fenced = result_of(env.join(sb["member_id"], instance="ib"))
    assert fenced["error_code"] == errors.FENCED_INSTANCE_ID


def test_static_leader_rejoin_is_told_the_old_leader_id(env):
    a = result_of(env.join(instance="ia"))
    gen = a["generation_id"]
    result_of(env.sync(a["member_id"], gen, {a["member_id"]: b"A"}, instance="ia"))
    back = result_of(env.join(instance="ia"))
    assert back["generation_id"] == gen
    assert back["leader"] == a["member_id"] != back["member_id"]
    assert env.group().leader_id == back["member_id"]
    assert result_of(env.sync(back["member_id"], gen, instance="ia"))["assignment"] == b"A"


def test_static_member_session_expiry_and_leave_by_instance_id(env):
    a = result_of(env.join(instance="ia"))
    result_of(env.sync(a["member_id"], 1, {a["member_id"]: b""}, instance="ia"))
    b = pending(env.join(instance="ib"))
    result_of(env.join(a["member_id"], instance="ia"))
    b = result_of(b)
    assert env.gc.leave_group("g", [("", "ib")]) == (0, [0])
    assert env.gc.leave_group("g", [("", "nope")]) == (0, [errors.UNKNOWN_MEMBER_ID])
    assert env.gc.leave_group("g", [(b["member_id"], "ia")]) == (0, [errors.FENCED_INSTANCE_ID])
    env.clock.advance(SESSION / 1000.0 + 0.1)
    assert env.group().members == {}


def test_abandoned_join_lets_the_session_expire_from_the_last_request(env):
    # The issue-26 sequence: three static members; ia and ib stop without
    # LeaveGroup, ic rejoins the rebalance ia's expiry starts and closes its
    # connection while that JoinGroup is parked (ib's session still runs).
    ids, gen = env.stable_group(3, instance=None)
    group = env.group()
    for member_id, instance in zip(ids, ("ia", "ib", "ic")):
        group.members[member_id].instance_id = instance
        group.static_members[instance] = member_id
    a, b, c = ids
    env.clock.advance(4.0)
    assert env.heartbeat(b, gen, instance="ib") == 0
    assert env.heartbeat(c, gen, instance="ic") == 0
    env.clock.advance(SESSION / 1000.0 - 4.0 + 0.1)  # ia's session is over
    assert a not in group.members and group.state == PREPARING_REBALANCE
    parked = pending(env.join(c, instance="ic"))
    joined_at = env.clock.seconds()
    env.clock.advance(1.0)
    env.gc.abandon("g", parked)
    assert group.members[c].join_deferred is None
    # ic goes one session after its JoinGroup, not a session after the
    # rebalance that waited for ib would have completed.
    env.clock.advance(joined_at + SESSION / 1000.0 - env.clock.seconds() - 0.05)
    assert c in group.members
    env.clock.advance(0.1)
    assert c not in group.members
    env.clock.advance(SESSION / 1000.0)
    assert group.members == {} and group.state == EMPTY


def test_abandoning_a_parked_sync_past_its_session_expires_the_member_now(env):
    (a, b), gen = env.stable_group(2)
    jc = pending(env.join(client_id="c"))  # a rebalance: a and b rejoin
    ja, jb = env.join(a), env.join(b)
    gen = result_of(ja)["generation_id"]
    c = result_of(jc)["member_id"]
    result_of(jb)
    env.clock.advance(1.0)
    parked = pending(env.sync(b, gen))
    for _ in range(6):  # the leader and c heartbeat; the leader never syncs
        env.clock.advance(2.0)
        assert env.heartbeat(a, gen) == env.heartbeat(c, gen) == 0
    assert b in env.group().members  # parked: its session does not run out
    env.gc.abandon("g", parked)
    env.clock.advance(0)
    assert b not in env.group().members
    env.gc.abandon("g", defer.Deferred())  # an unknown request is ignored


def test_load_in_progress_until_the_topic_is_read(tmp_path):
    clock = Clock()
    broker = make_broker(tmp_path, clock)
    gc = GroupCoordinator(broker)
    started = gc.start()
    assert (
        result_of(gc.join_group("g", "", None, "c", "", SESSION, SESSION, "consumer", [], False))[
            "error_code"
        ]
        == errors.COORDINATOR_LOAD_IN_PROGRESS
    )
    assert gc.heartbeat("g", 1, "m", None) == errors.COORDINATOR_LOAD_IN_PROGRESS
    clock.advance(0)
    result_of(started)
    assert gc.heartbeat("g", 1, "m", None) == errors.UNKNOWN_MEMBER_ID


def test_stop_answers_parked_requests_and_cancels_timers(env):
    (a,), gen = env.stable_group(1)
    parked = pending(env.join(client_id="b"))
    result_of(env.gc.stop())
    assert result_of(parked)["error_code"] == errors.NOT_COORDINATOR
    assert env.clock.getDelayedCalls() == []
    assert env.heartbeat(a, gen) == errors.COORDINATOR_NOT_AVAILABLE


def test_stop_during_loading_leaves_nothing_running(tmp_path):
    clock = Clock()
    broker = make_broker(tmp_path, clock)
    gc = start_coordinator(broker)
    result_of(broker.create_topic("t", 1, 1))
    items = [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 3}]}]
    result_of(gc.commit_offsets("g", -1, "", None, -1, items))
    result_of(gc.stop())
    again = GroupCoordinator(broker)
    started = again.start()
    result_of(again.stop())
    clock.advance(0)
    assert result_of(started) is again
    assert again.groups == {}
    assert clock.getDelayedCalls() == []
    assert again.heartbeat("g", 1, "m", None) == errors.COORDINATOR_NOT_AVAILABLE


def _joined_not_synced(env):
    """Two members joined generation N; nobody has sent SyncGroup yet."""
    first = result_of(env.join())
    second = env.join()
    rejoin = env.join(first["member_id"])
    a, b = result_of(rejoin), result_of(second)
    assert env.group().state == COMPLETING_REBALANCE
    leader = a if a["leader"] == a["member_id"] else b
    follower = b if leader is a else a
    return leader, follower


def test_leader_that_never_syncs_is_removed_after_the_rebalance_timeout(env):
    leader, follower = _joined_not_synced(env)
    generation = leader["generation_id"]
    parked = pending(env.sync(follower["member_id"], generation))
    # Both keep their sessions alive; the leader never sends SyncGroup.
    for _ in range(int(REBALANCE / 1000) - 1):
        env.clock.advance(1.0)
        assert env.heartbeat(leader["member_id"], generation) == errors.NONE
        assert env.heartbeat(follower["member_id"], generation) == errors.NONE
    assert leader["member_id"] in env.group().members
    env.clock.advance(1.5)
    assert leader["member_id"] not in env.group().members
    assert result_of(parked)["error_code"] == errors.REBALANCE_IN_PROGRESS
    assert env.group().state == PREPARING_REBALANCE
    assert list(env.group().members) == [follower["member_id"]]


def test_follower_that_never_syncs_is_removed_even_when_stable(env):
    leader, follower = _joined_not_synced(env)
    generation = leader["generation_id"]
    ids = [leader["member_id"], follower["member_id"]]
    synced = env.sync(leader["member_id"], generation, {m: m.encode() for m in ids})
    assert result_of(synced)["error_code"] == errors.NONE
    assert env.group().state == STABLE
    for _ in range(int(REBALANCE / 1000)):
        env.clock.advance(1.0)
        env.heartbeat(leader["member_id"], generation)
        env.heartbeat(follower["member_id"], generation)
    env.clock.advance(1.0)
    assert follower["member_id"] not in env.group().members
    assert env.group().state == PREPARING_REBALANCE


def test_members_that_sync_are_not_removed(env):
    ids, generation = env.stable_group(3)
    for _ in range(int(REBALANCE / 1000) * 2):
        env.clock.advance(1.0)
        for member_id in ids:
            assert env.heartbeat(member_id, generation) == errors.NONE
    assert set(env.group().members) == set(ids)
    assert env.group().state == STABLE
