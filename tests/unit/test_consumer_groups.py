"""KIP-848 consumer groups: ConsumerGroupHeartbeat and ConsumerGroupDescribe
through the real codec, against a real Broker on in-memory storage and a Clock.

Simulated members behave as the protocol asks: they report what they own,
give up what the coordinator leaves out of their assignment at once, and
take what it adds. The invariant checked throughout is incremental
revocation: no partition is ever owned by two members.
"""

import uuid

import pytest

from pluglog import errors
from pluglog import protocol as codec
from pluglog.config_keys import BROKER_KEYS
from pluglog.errors import ConfigError
from pluglog.group import GroupCoordinator
from pluglog.group.assignors import range_, uniform
from pluglog.group.consumer_model import ConsumerGroup
from pluglog.group.model import OffsetAndMetadata
from pluglog.server.handlers import RequestContext
from pluglog.server.handlers.table import HANDLERS
from tests.unit.test_group_coordinator import Env, result_of, start_coordinator

HB, DESCRIBE = codec.CONSUMER_GROUP_HEARTBEAT, codec.CONSUMER_GROUP_DESCRIBE


def call(env, key, version, body):
    frame = codec.encode_request(key, version, 7, "cli", body)[4:]
    header = codec.parse_request_header(frame)
    request = codec.decode_request(header, memoryview(frame))
    out = HANDLERS[key](RequestContext(env.broker, header, "127.0.0.1:5555"), request)
    if not isinstance(out, dict):
        out = result_of(out)
    payload = b"".join(bytes(p) for p in codec.encode_response(key, version, 7, out))
    return codec.decode_response(key, version, payload)[1]


@pytest.fixture
def env(tmp_path):
    env = Env(tmp_path, group_consumer_session_timeout_ms=6000)
    env.broker.group_coordinator = env.gc
    result_of(env.broker.create_topic("t", 12, 1))
    return env


def topic_id(env, name="t"):
    return uuid.UUID(hex=env.broker.coordinator.topics()[name].topic_id)


class Member:
    """A well-behaved consumer: owns exactly what its last assignment said."""

    def __init__(self, env, group="g", topics=("t",), assignor=None, version=1, instance=None):
        self.env, self.group, self.version = env, group, version
        self.instance = instance
        self.topics, self.assignor = list(topics), assignor
        self.member_id = uuid.uuid4().hex
        self.epoch = 0
        self.owned = {}

    def heartbeat(self, epoch=None, owned=True):
        body = {
            "group_id": self.group,
            "member_id": self.member_id,
            "member_epoch": self.epoch if epoch is None else epoch,
            "instance_id": self.instance,
            "rack_id": None,
            "rebalance_timeout_ms": 30000 if self.epoch == 0 else -1,
            "subscribed_topic_names": self.topics if self.epoch == 0 else None,
            "server_assignor": self.assignor if self.epoch == 0 else None,
            "topic_partitions": [
                {"topic_id": t, "partitions": sorted(ps)} for t, ps in self.owned.items()
            ]
            if owned
            else None,
        }
        out = call(self.env, HB, self.version, body)
        if out["error_code"] == 0:
            self.epoch = out["member_epoch"]
            if out["assignment"] is not None:
                self.owned = {
                    tp["topic_id"]: set(tp["partitions"])
                    for tp in out["assignment"]["topic_partitions"]
                    if tp["partitions"]
                }
        return out

    def partitions(self):
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def converge(members, rounds=10):
    """Heartbeat everyone until nothing changes; check no partition is owned twice."""
    for _ in range(rounds):
        before = [(m.epoch, m.partitions()) for m in members]
        for m in members:
            assert m.heartbeat()["error_code"] == 0
            owned = [p for x in members for p in x.partitions()]
            assert len(owned) == len(set(owned)), "a partition has two owners"
        if before == [(m.epoch, m.partitions()) for m in members]:
            return
    raise AssertionError("the group did not converge")


def test_three_members_split_twelve_partitions_then_one_leaves_and_one_joins(env):
    a, b, c = Member(env), Member(env), Member(env)
    first = a.heartbeat()
    assert (first["error_code"], first["member_id"], first["member_epoch"]) == (0, a.member_id, 1)
    assert len(a.partitions()) == 12
    b.heartbeat()
    c.heartbeat()
    converge([a, b, c])
    assert sorted(len(m.partitions()) for m in (a, b, c)) == [4, 4, 4]
    group = env.gc.groups["g"]
    assert (group.state, group.group_epoch, group.assignment_epoch) == ("Stable", 3, 3)
    assert {m.epoch for m in (a, b, c)} == {3}
    # b leaves: its partitions go to the others.
    left = b.heartbeat(epoch=-1)
    assert (left["error_code"], left["member_epoch"]) == (0, -1)
    converge([a, c])
    assert sorted(len(m.partitions()) for m in (a, c)) == [6, 6]
    d = Member(env)
    d.heartbeat()
    converge([a, c, d])
    assert sorted(len(m.partitions()) for m in (a, c, d)) == [4, 4, 4]
    assert group.state == "Stable" and group.group_epoch == 5


def test_a_partition_waits_for_its_owner_to_revoke_it(env):
    a, b = Member(env), Member(env)
    a.heartbeat()
    b.heartbeat()
    assert b.partitions() == set() and b.epoch == 2  # nothing is free yet
    assert env.gc.groups["g"].state == "Reconciling"
    out = a.heartbeat()  # told to keep 6: revokes the other 6, still at epoch 1
    assert out["member_epoch"] == 1 and len(a.partitions()) == 6
    b.heartbeat()
    assert b.partitions() == set()  # a has not said it let them go
    a.heartbeat()  # a reports owning 6: acknowledged, epoch 2
    assert a.epoch == 2
    b.heartbeat()
    assert len(b.partitions()) == 6
    assert not a.partitions() & b.partitions()


def test_session_expiry_frees_the_partitions(env):
    a, b = Member(env), Member(env)
    a.heartbeat()
    b.heartbeat()
    converge([a, b])
    env.clock.advance(4)
    a.heartbeat()
    env.clock.advance(4)  # b has been silent for 8 s > 6 s
    assert list(env.gc.groups["g"].members) == [a.member_id]
    converge([a])
    assert len(a.partitions()) == 12
    assert b.heartbeat()["error_code"] == errors.UNKNOWN_MEMBER_ID


def test_a_member_that_does_not_revoke_is_removed_after_its_rebalance_timeout(env):
    a, b = Member(env), Member(env)
    a.heartbeat()
    a.heartbeat()
    b.heartbeat()
    a.heartbeat(owned=False)  # told to revoke, never acknowledges
    for _ in range(6):
        env.clock.advance(5)
        b.heartbeat()
        a.heartbeat(owned=False)
    assert a.member_id not in env.gc.groups["g"].members
    converge([b])
    assert len(b.partitions()) == 12


def test_fenced_and_stale_epochs(env):
    a = Member(env)
    a.heartbeat()
    assert a.heartbeat(epoch=7)["error_code"] == errors.FENCED_MEMBER_EPOCH
    commit = {
        "group_id": "g",
        "generation_id_or_member_epoch": 0,
        "member_id": a.member_id,
        "group_instance_id": None,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}
                ],
            }
        ],
    }
    stale = call(env, codec.OFFSET_COMMIT, 9, commit)
    assert stale["topics"][0]["partitions"][0]["error_code"] == errors.STALE_MEMBER_EPOCH
    commit["generation_id_or_member_epoch"] = a.epoch
    ok = call(env, codec.OFFSET_COMMIT, 9, commit)
    assert ok["topics"][0]["partitions"][0]["error_code"] == 0
    fetch = {
        "groups": [{"group_id": "g", "member_id": a.member_id, "member_epoch": 0, "topics": None}]
    }
    assert call(env, codec.OFFSET_FETCH, 9, fetch)["groups"][0]["error_code"] == (
        errors.STALE_MEMBER_EPOCH
    )
    fetch["groups"][0]["member_epoch"] = a.epoch
    found = call(env, codec.OFFSET_FETCH, 9, fetch)["groups"][0]
    assert found["topics"][0]["partitions"][0]["committed_offset"] == 5


@pytest.mark.parametrize(
    "change,error",
    [
        ({"group_id": ""}, errors.INVALID_REQUEST),
        ({"member_epoch": -3}, errors.INVALID_REQUEST),
        ({"rebalance_timeout_ms": -1}, errors.INVALID_REQUEST),
        ({"subscribed_topic_names": None}, errors.INVALID_REQUEST),
        ({"server_assignor": "sticky"}, errors.UNSUPPORTED_ASSIGNOR),
        ({"subscribed_topic_names": [], "subscribed_topic_regex": "("}, 128),
        # Exponential backtracking in Python's re (RE2J, Kafka's, is linear).
        ({"subscribed_topic_names": [], "subscribed_topic_regex": "(a+)+$"}, 128),
        ({"subscribed_topic_names": [], "subscribed_topic_regex": "(t)\\1"}, 128),
        ({"member_epoch": 3}, errors.UNKNOWN_MEMBER_ID),
    ],
)
def test_bad_heartbeats_get_kafkas_errors(env, change, error):
    body = {
        "group_id": "g",
        "member_id": "m",
        "member_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 30000,
        "subscribed_topic_names": ["t"],
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": [],
    }
    if change.get("member_epoch") == 3:
        Member(env).heartbeat()
    out = call(env, HB, 1, dict(body, **change))
    assert out["error_code"] == error and out["error_message"]


def test_regex_subscription_and_range_assignor(env):
    result_of(env.broker.create_topic("u", 3, 1))
    a = Member(env, topics=(), assignor="range")
    out = call(
        env,
        HB,
        1,
        {
            "group_id": "g",
            "member_id": a.member_id,
            "member_epoch": 0,
            "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": [],
            "subscribed_topic_regex": "u|t",
            "server_assignor": "range",
            "topic_partitions": [],
        },
    )
    assert out["error_code"] == 0
    got = {tp["topic_id"]: len(tp["partitions"]) for tp in out["assignment"]["topic_partitions"]}
    assert got == {topic_id(env): 12, topic_id(env, "u"): 3}
    assert env.gc.groups["g"].assignor_name == "range"


def test_assignors():
    members = {"a": {"x", "y"}, "b": {"x", "y"}, "c": {"x"}}
    ranged = range_(members, {"x": 3, "y": 4}, {})
    assert ranged == {
        "a": {"x": frozenset({0}), "y": frozenset({0, 1})},
        "b": {"x": frozenset({1}), "y": frozenset({2, 3})},
        "c": {"x": frozenset({2})},
    }
    even = uniform({"a": {"x"}, "b": {"x"}, "c": {"x"}}, {"x": 12}, {})
    assert sorted(len(a["x"]) for a in even.values()) == [4, 4, 4]
    # Sticky: a fourth member takes some of everyone's, nobody else moves.
    again = uniform({m: {"x"} for m in "abcd"}, {"x": 12}, even)
    for m in "abc":
        assert again[m]["x"] <= even[m]["x"]
    assert sorted(len(a["x"]) for a in again.values()) == [3, 3, 3, 3]


def test_group_consumer_assignors_config():
    parse = BROKER_KEYS["group.consumer.assignors"][1]
    assert parse("k", "range, uniform") == "range,uniform"
    assert parse("k", "org.apache.kafka.coordinator.group.assignor.UniformAssignor") == "uniform"
    with pytest.raises(ConfigError, match="sticky"):
        parse("k", "sticky")
    from pluglog.config import parse_settings

    short = {"group.consumer.session.timeout.ms": "6000"}
    assert parse_settings(short).group_consumer_heartbeat_interval_ms == 5000
    with pytest.raises(ConfigError, match="must be below group.consumer.session.timeout.ms"):
        parse_settings({"group.consumer.session.timeout.ms": "5000"})


def test_reload_brings_the_group_back(env):
    a, b = Member(env), Member(env)
    a.heartbeat()
    b.heartbeat()
    converge([a, b])
    before = {m.member_id: m.partitions() for m in (a, b)}
    result_of(env.gc.stop())
    env.gc = start_coordinator(env.broker)
    env.broker.group_coordinator = env.gc
    group = env.gc.groups["g"]
    assert isinstance(group, ConsumerGroup)
    assert (group.state, group.group_epoch, group.assignment_epoch) == ("Stable", 2, 2)
    ids = {tid.hex: tid for tid in (topic_id(env),)}
    loaded = {
        m.member_id: {(ids[t], p) for t, ps in m.assigned.items() for p in ps}
        for m in group.members.values()
    }
    assert loaded == before
    # The members carry on at their epochs; nothing moves.
    converge([a, b])
    assert {m.member_id: m.partitions() for m in (a, b)} == before
    # A member gone while the coordinator was away expires one session later.
    env.clock.advance(7)
    assert env.gc.groups["g"].members == {}


def test_describe(env):
    a, b = Member(env), Member(env)
    a.heartbeat()
    b.heartbeat()
    converge([a, b])
    out = call(env, DESCRIBE, 0, {"group_ids": ["g", "nope"], "include_authorized_operations": 0})
    g, nope = out["groups"]
    assert (g["error_code"], g["group_state"], g["group_epoch"], g["assignor_name"]) == (
        0,
        "Stable",
        2,
        "uniform",
    )
    assigned = {
        m["member_id"]: [
            (tp["topic_name"], len(tp["partitions"])) for tp in m["assignment"]["topic_partitions"]
        ]
        for m in g["members"]
    }
    assert assigned == {a.member_id: [("t", 6)], b.member_id: [("t", 6)]}
    assert g["members"][0]["subscribed_topic_names"] == ["t"]
    assert nope["error_code"] == errors.GROUP_ID_NOT_FOUND
    assert g["members"][0]["member_type"] == -1  # v0 has none: the default
    # v1 (Kafka 4.0, KIP-1099) says which protocol each member speaks: 1 consumer.
    v1 = call(env, DESCRIBE, 1, {"group_ids": ["g"], "include_authorized_operations": 0})
    assert [m["member_type"] for m in v1["groups"][0]["members"]] == [1, 1]
    listed = call(env, codec.LIST_GROUPS, 5, {"types_filter": ["consumer"]})
    assert [(x["group_id"], x["group_type"], x["group_state"]) for x in listed["groups"]] == [
        ("g", "consumer", "Stable")
    ]
    classic = call(env, codec.DESCRIBE_GROUPS, 5, {"groups": ["g"]})["groups"][0]
    assert classic["group_state"] == "Dead"


def test_conversion_between_classic_and_consumer_groups(env):
    # A classic group with members whose metadata is no consumer-protocol
    # Subscription cannot be upgraded (KIP-1099 needs it): refused...
    joined = result_of(env.join(group="c"))
    assert joined["error_code"] == 0
    out = Member(env, group="c").heartbeat()
    assert out["error_code"] == errors.GROUP_ID_NOT_FOUND
    # ...and so is such a classic member in a consumer group.
    Member(env).heartbeat()
    assert result_of(env.join(group="g"))["error_code"] == errors.INCONSISTENT_GROUP_PROTOCOL
    # Empty groups convert both ways, keeping their committed offsets.
    env.gc.groups["c"].members.clear()
    env.gc.groups["c"].offsets[("t", 0)] = OffsetAndMetadata(5, -1, "", 0, -1)
    m = Member(env, group="c")
    assert m.heartbeat()["error_code"] == 0
    assert isinstance(env.gc.groups["c"], ConsumerGroup)
    assert env.gc.groups["c"].offsets[("t", 0)].offset == 5
    m.heartbeat(epoch=-1)
    assert result_of(env.join(group="c"))["error_code"] == 0
    assert not isinstance(env.gc.groups["c"], ConsumerGroup)
    assert env.gc.groups["c"].offsets[("t", 0)].offset == 5


def test_deleting_an_empty_consumer_group(env):
    a = Member(env)
    a.heartbeat()
    out = call(env, codec.DELETE_GROUPS, 2, {"groups_names": ["g"]})
    assert out["results"][0]["error_code"] == errors.NON_EMPTY_GROUP
    a.heartbeat(epoch=-1)
    out = call(env, codec.DELETE_GROUPS, 2, {"groups_names": ["g"]})
    assert out["results"][0]["error_code"] == 0
    result_of(env.gc.stop())
    gc = GroupCoordinator(env.broker)
    d = gc.start()
    env.clock.advance(0)
    result_of(d)
    assert "g" not in gc.groups


def _layout(fields, version):
    out = []
    for f in fields:
        if not f.present(version):
            continue
        nested = getattr(f.type, "fields", f.type)
        kind = f.type if isinstance(f.type, str) else _layout(nested, version)
        out.append((f.name, kind, f.nullable_in(version)))
    return out


def test_schemas_follow_kafkas_json():
    # apache/kafka clients/src/main/resources/common/message/ConsumerGroup*.json
    # (kafka-python ships no copy to compare with, see test_protocol_specs).
    from pluglog.protocol.apis import APIS

    tp = [("topic_id", "uuid", False), ("partitions", "[]int32", False)]
    request = [
        ("group_id", "string", False),
        ("member_id", "string", False),
        ("member_epoch", "int32", False),
        ("instance_id", "string", True),
        ("rack_id", "string", True),
        ("rebalance_timeout_ms", "int32", False),
        ("subscribed_topic_names", "[]string", True),
        ("subscribed_topic_regex", "string", True),
        ("server_assignor", "string", True),
        ("topic_partitions", tp, True),
    ]
    assert _layout(APIS[68].request, 1) == request
    assert _layout(APIS[68].request, 0) == request[:7] + request[8:]
    assert _layout(APIS[68].response, 1) == [
        ("throttle_time_ms", "int32", False),
        ("error_code", "int16", False),
        ("error_message", "string", True),
        ("member_id", "string", True),
        ("member_epoch", "int32", False),
        ("heartbeat_interval_ms", "int32", False),
        ("assignment", [("topic_partitions", tp, False)], True),
    ]
    described = [("topic_partitions", [tp[0], ("topic_name", "string", False), tp[1]], False)]
    member = [
        ("member_id", "string", False),
        ("instance_id", "string", True),
        ("rack_id", "string", True),
        ("member_epoch", "int32", False),
        ("client_id", "string", False),
        ("client_host", "string", False),
        ("subscribed_topic_names", "[]string", False),
        ("subscribed_topic_regex", "string", True),
        ("assignment", described, False),
        ("target_assignment", described, False),
    ]
    assert _layout(APIS[69].response, 0) == [
        ("throttle_time_ms", "int32", False),
        (
            "groups",
            [
                ("error_code", "int16", False),
                ("error_message", "string", True),
                ("group_id", "string", False),
                ("group_state", "string", False),
                ("group_epoch", "int32", False),
                ("assignment_epoch", "int32", False),
                ("assignor_name", "string", False),
                ("members", member, False),
                ("authorized_operations", "int32", False),
            ],
            False,
        ),
    ]
    # v1 (Kafka 4.0): the member type (KIP-1099) after the target assignment.
    v1 = _layout(APIS[69].response, 1)
    assert v1[1][1][7] == ("members", [*member, ("member_type", "int8", False)], False)
    assert _layout(APIS[69].request, 1) == _layout(APIS[69].request, 0)
    assert [
        f.default(1) for f in APIS[69].response[1].type[7].type if f.name == "member_type"
    ] == [-1]
    assert APIS[68].is_flexible(0) and APIS[69].is_flexible(0)


def test_static_member_restart_keeps_its_partitions(env):
    a, b = Member(env, instance="ia"), Member(env, instance="ib")
    a.heartbeat()
    b.heartbeat()
    converge([a, b])
    group = env.gc.groups["g"]
    epoch, kept = group.group_epoch, a.partitions()
    # a restarts: epoch -2 keeps its partitions for a session, nobody takes them.
    assert a.heartbeat(epoch=-2)["member_epoch"] == -2
    converge([b])
    assert len(b.partitions()) == 6 and group.group_epoch == epoch
    # Another process with the same instance id while b's is alive: refused.
    twin = Member(env, instance="ib")
    assert twin.heartbeat()["error_code"] == errors.UNRELEASED_INSTANCE_ID
    back = Member(env, instance="ia")
    out = back.heartbeat()
    assert out["error_code"] == 0 and back.partitions() == kept
    assert group.group_epoch == epoch and a.member_id not in group.members
    converge([back, b])
    assert back.partitions() == kept and group.state == "Stable"
    # Gone for longer than a session: its partitions move.
    back.heartbeat(epoch=-2)
    for _ in range(4):
        env.clock.advance(2)
        b.heartbeat()
    assert back.member_id not in group.members
    converge([b])
    assert len(b.partitions()) == 12


def test_console_and_metrics_show_a_consumer_group(env):
    from pluglog.console import state
    from pluglog.metrics.state import GroupCollector

    a, b = Member(env), Member(env)
    a.heartbeat()
    b.heartbeat()
    converge([a, b])
    view = state.group(env.broker, "g")
    assert view["state"] == "Stable"
    assert sorted(len(m["assignment"]) for m in view["members"]) == [6, 6]
    assert {t for m in view["members"] for t, _p in m["assignment"]} == {"t"}
    assert [r["group_id"] for r in state.groups(env.broker)] == ["g"]
    families = {f.name: f for f in GroupCollector(env.broker).collect()}
    assert [s.value for s in families["pluglog_consumer_group_members"].samples] == [2]


def test_partitions_added_while_the_group_was_not_loaded(env):
    a = Member(env)
    a.heartbeat()
    converge([a])
    epoch = env.gc.groups["g"].group_epoch
    result_of(env.gc.stop())
    result_of(env.broker.coordinator.create_partitions("t", 16))
    env.gc = start_coordinator(env.broker)
    env.broker.group_coordinator = env.gc
    converge([a])
    assert len(a.partitions()) == 16
    assert env.gc.groups["g"].group_epoch == epoch + 1


def test_an_empty_consumer_group_expires_with_its_offsets(env):
    a = Member(env)
    a.heartbeat()
    a.heartbeat(epoch=-1)
    group = env.gc.groups["g"]
    group.offsets[("t", 0)] = OffsetAndMetadata(5, -1, "", env.gc.now_ms(), -1)
    assert group.state == "Empty"
    env.clock.advance(env.gc.offsets_retention_ms / 1000 + 1)  # expiry ticks run
    assert "g" not in env.gc.groups
    result_of(env.gc.stop())
    env.gc = start_coordinator(env.broker)
    assert "g" not in env.gc.groups  # its records are gone too
