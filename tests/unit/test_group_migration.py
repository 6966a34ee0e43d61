"""KIP-1099 online conversion between classic and consumer groups, driven by a
Clock against a real Broker on in-memory storage: a consumer-protocol member
upgrades a live classic group, the classic member keeps speaking
JoinGroup/SyncGroup/Heartbeat and gets the server-side assignor's partitions,
and the group downgrades when the last consumer-protocol member leaves;
``group.consumer.migration.policy`` decides which way is allowed."""

import pytest

from pluglog import errors
from pluglog import protocol as codec
from pluglog.client.assignors import decode_assignment, encode_assignment, encode_subscription
from pluglog.group.consumer_model import ConsumerGroup
from pluglog.group.model import Group
from tests.unit.test_consumer_groups import DESCRIBE, Member, call
from tests.unit.test_group_coordinator import Env, result_of, start_coordinator

ALL = [("t", p) for p in range(12)]


def make_env(tmp_path, policy="bidirectional"):
    env = Env(
        tmp_path,
        group_consumer_session_timeout_ms=6000,
        group_consumer_migration_policy=policy,
    )
    env.broker.group_coordinator = env.gc
    result_of(env.broker.create_topic("t", 12, 1))
    return env


class Classic:
    """An eager classic consumer: gives up everything before it rejoins."""

    def __init__(self, env, group="g"):
        self.env, self.group = env, group
        self.member_id, self.generation, self.owned = "", -1, []

    def join(self, owned=()):
        sub = encode_subscription(["t"], owned=list(owned))
        out = result_of(
            self.env.join(self.member_id, group=self.group, protocols=(("range", sub),))
        )
        if out["error_code"] == 0:
            self.member_id, self.generation = out["member_id"], out["generation_id"]
        return out

    def sync(self, assignments=None):
        out = result_of(self.env.sync(self.member_id, self.generation, assignments, self.group))
        if out["error_code"] == 0:
            self.owned = decode_assignment(out["assignment"])
        return out

    def heartbeat(self):
        return self.env.heartbeat(self.member_id, self.generation, self.group)

    def rejoin(self):
        self.owned = []
        out = self.join()
        assert out["error_code"] == 0, out
        assert self.sync()["error_code"] == 0
        return out


def classic_group_of_one(env):
    a = Classic(env)
    out = a.join()
    assert out["error_code"] == 0 and out["leader"] == a.member_id
    assert a.sync({a.member_id: encode_assignment(ALL)})["error_code"] == 0
    assert sorted(a.owned) == ALL
    return a


def member_types(env, group="g"):
    out = call(env, DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": 0})
    described = out["groups"][0]
    assert described["error_code"] == 0, described
    return {m["member_id"]: m["member_type"] for m in described["members"]}


def test_upgrade_split_and_downgrade(tmp_path):
    env = make_env(tmp_path)
    a = classic_group_of_one(env)
    b = Member(env)
    first = b.heartbeat()
    assert first["error_code"] == 0
    group = env.gc.groups["g"]
    assert isinstance(group, ConsumerGroup)
    assert member_types(env) == {a.member_id: 0, b.member_id: 1}
    # The new target gives b half, but a still owns everything: b waits.
    assert b.partitions() == set()
    assert a.heartbeat() == errors.REBALANCE_IN_PROGRESS
    joined = a.rejoin()
    assert joined["leader"] == "" and joined["members"] == []
    assert joined["generation_id"] == group.assignment_epoch
    b.heartbeat()
    assert len(a.owned) == 6 and len(b.partitions()) == 6
    assert {p for _t, p in a.owned} | {p for _t, p in b.partitions()} == set(range(12))
    assert a.heartbeat() == errors.NONE and group.state == "Stable"
    # A classic member's commit checks its generation (its member epoch).
    assert env.gc.consumer_commit_error(group, a.generation, a.member_id) == errors.NONE
    assert env.gc.consumer_commit_error(group, 1, a.member_id) == errors.ILLEGAL_GENERATION

    # The coordinator reloads the mixed group as it was written.
    result_of(env.gc.stop())
    env.gc = start_coordinator(env.broker)
    env.broker.group_coordinator = env.gc
    assert member_types(env) == {a.member_id: 0, b.member_id: 1}
    # The classic member keeps its own session (10 s), not the consumer one (6 s).
    for _ in range(2):
        env.clock.advance(3.5)
        assert b.heartbeat()["error_code"] == 0
    assert a.member_id in env.gc.groups["g"].members
    assert a.heartbeat() == errors.NONE

    # The last consumer-protocol member leaves: the group is classic again,
    # rebalancing, and a gets everything back through the classic protocol.
    assert b.heartbeat(epoch=-1)["error_code"] == 0
    classic = env.gc.groups["g"]
    assert type(classic) is Group and classic.state == "PreparingRebalance"
    assert a.heartbeat() in (errors.REBALANCE_IN_PROGRESS, errors.ILLEGAL_GENERATION)
    out = a.join()
    assert out["error_code"] == 0 and out["leader"] == a.member_id
    assert a.sync({a.member_id: encode_assignment(ALL)})["error_code"] == 0
    assert sorted(a.owned) == ALL
    out = call(env, DESCRIBE, 1, {"group_ids": ["g"], "include_authorized_operations": 0})
    assert out["groups"][0]["error_code"] == errors.GROUP_ID_NOT_FOUND
    # Reloaded, it is the classic group.
    result_of(env.gc.stop())
    env.gc = start_coordinator(env.broker)
    assert type(env.gc.groups["g"]) is Group


def test_classic_member_leaving_and_expiring_in_a_consumer_group(tmp_path):
    env = make_env(tmp_path)
    a = classic_group_of_one(env)
    b = Member(env)
    b.heartbeat()
    a.heartbeat()
    a.rejoin()
    group = env.gc.groups["g"]
    epoch = group.group_epoch
    errors_ = env.gc.leave_group("g", [(a.member_id, None)])
    assert errors_ == (errors.NONE, [errors.NONE])
    assert list(group.members) == [b.member_id] and group.group_epoch == epoch + 1
    b.heartbeat()
    b.heartbeat()
    assert len(b.partitions()) == 12
    # A second classic member that stops heartbeating expires after its session.
    c = Classic(env)
    assert c.join()["error_code"] == 0 and c.sync()["error_code"] == 0
    assert c.member_id in group.members
    for _ in range(11):
        env.clock.advance(1)
        b.heartbeat()
    assert c.member_id not in group.members


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
def test_policy_without_upgrade_refuses_the_consumer_protocol(tmp_path, policy):
    env = make_env(tmp_path, policy)
    a = classic_group_of_one(env)
    out = Member(env).heartbeat()
    assert out["error_code"] == errors.GROUP_ID_NOT_FOUND
    assert type(env.gc.groups["g"]) is Group and a.heartbeat() == errors.NONE


def test_policy_upgrade_only_keeps_the_consumer_group(tmp_path):
    env = make_env(tmp_path, "upgrade")
    a = classic_group_of_one(env)
    b = Member(env)
    b.heartbeat()
    a.heartbeat()
    a.rejoin()
    b.heartbeat(epoch=-1)
    group = env.gc.groups["g"]
    assert isinstance(group, ConsumerGroup) and list(group.members) == [a.member_id]
    # a is told to rejoin and is given every partition by the server-side assignor.
    assert a.heartbeat() == errors.REBALANCE_IN_PROGRESS
    a.rejoin()
    assert sorted(a.owned) == ALL


def test_empty_groups_convert_under_any_policy(tmp_path):
    env = make_env(tmp_path, "disabled")
    a = classic_group_of_one(env)
    env.gc.leave_group("g", [(a.member_id, None)])
    env.clock.advance(30)
    m = Member(env)
    assert m.heartbeat()["error_code"] == 0
    assert isinstance(env.gc.groups["g"], ConsumerGroup)
    assert codec.CONSUMER_GROUP_DESCRIBE == DESCRIBE


def test_static_classic_member_restart_in_a_consumer_group(tmp_path):
    env = make_env(tmp_path)
    sub = encode_subscription(["t"])
    first = result_of(env.join(instance="i1", protocols=(("range", sub),)))
    a = Classic(env)
    a.member_id, a.generation = first["member_id"], first["generation_id"]
    assert a.sync({a.member_id: encode_assignment(ALL)})["error_code"] == 0
    b = Member(env)
    b.heartbeat()
    assert env.heartbeat(a.member_id, a.generation, instance="i1") == errors.REBALANCE_IN_PROGRESS
    out = result_of(env.join(a.member_id, instance="i1", protocols=(("range", sub),)))
    assert out["error_code"] == 0
    b.heartbeat()
    group = env.gc.groups["g"]
    kept, epoch = group.members[a.member_id].assigned, group.group_epoch
    assert len(b.partitions()) == 6
    # The instance restarts under a new member id: it takes over, no rebalance.
    again = result_of(env.join(instance="i1", protocols=(("range", sub),)))
    assert again["error_code"] == 0 and again["member_id"] != a.member_id
    assert a.member_id not in group.members and group.group_epoch == epoch
    assert group.members[again["member_id"]].assigned == kept
    assert group.static_members["i1"] == again["member_id"]
    # The old id is fenced now.
    out = result_of(env.join(a.member_id, instance="i1", protocols=(("range", sub),)))
    assert out["error_code"] == errors.FENCED_INSTANCE_ID


def test_cooperative_classic_member_revokes_before_anyone_takes_its_partitions(tmp_path):
    env = make_env(tmp_path)
    a = classic_group_of_one(env)
    b = Member(env)
    b.heartbeat()
    assert a.heartbeat() == errors.REBALANCE_IN_PROGRESS
    # It rejoins still owning everything (cooperative): it keeps half at its
    # old epoch and must give up the rest first.
    out = a.join(owned=a.owned)
    assert out["error_code"] == 0 and out["generation_id"] == 1
    assert a.sync()["error_code"] == 0 and len(a.owned) == 6
    b.heartbeat()
    assert b.partitions() == set()
    assert a.heartbeat() == errors.REBALANCE_IN_PROGRESS
    out = a.join(owned=a.owned)
    assert out["generation_id"] == 2 and a.sync()["error_code"] == 0
    b.heartbeat()
    assert len(b.partitions()) == 6
    assert {p for _t, p in a.owned}.isdisjoint({p for _t, p in b.partitions()})
    assert a.heartbeat() == errors.NONE


def test_classic_static_member_replacing_the_last_consumer_member_downgrades(tmp_path):
    env = make_env(tmp_path)
    a = classic_group_of_one(env)
    b = Member(env, instance="ib")
    b.heartbeat()
    a.heartbeat()
    a.rejoin()
    b.heartbeat()
    assert a.heartbeat() == errors.NONE and len(b.partitions()) == 6
    taken = {p for _t, p in b.partitions()}
    assert b.heartbeat(epoch=-2)["error_code"] == 0  # static: back soon
    # It comes back with the classic protocol: the group is classic again,
    # Stable, nobody rebalances, and it gets what it had.
    sub = encode_subscription(["t"])
    out = result_of(env.join(instance="ib", protocols=(("range", sub),)))
    assert out["error_code"] == 0
    group = env.gc.groups["g"]
    assert type(group) is Group and group.state == "Stable"
    assert out["generation_id"] == group.generation_id
    synced = result_of(env.sync(out["member_id"], out["generation_id"], instance="ib"))
    assert {p for _t, p in decode_assignment(synced["assignment"])} == taken
    assert a.heartbeat() == errors.NONE
    result_of(env.gc.stop())
    env.gc = start_coordinator(env.broker)
    assert set(env.gc.groups["g"].members) == {a.member_id, out["member_id"]}


def test_upgrade_in_the_middle_of_a_classic_rebalance(tmp_path):
    env = make_env(tmp_path)
    a = classic_group_of_one(env)
    c = Classic(env)
    parked = env.join(protocols=(("range", encode_subscription(["t"])),))
    assert not parked.called  # waits for a to rejoin
    Member(env).heartbeat()
    # Upgraded: the parked JoinGroup is told to rejoin, and c then joins the
    # consumer group with the id it was given.
    out = result_of(parked)
    assert out["error_code"] == errors.REBALANCE_IN_PROGRESS
    assert isinstance(env.gc.groups["g"], ConsumerGroup)
    c.member_id = out["member_id"]
    assert c.join()["error_code"] == 0 and c.sync()["error_code"] == 0
    assert a.heartbeat() == errors.REBALANCE_IN_PROGRESS
    assert set(member_types(env).values()) == {0, 1}
    assert len(member_types(env)) == 3
