"""Committed offsets, persistence in __consumer_offsets, DeleteGroups/OffsetDelete."""

import struct

import pytest
from twisted.internet.task import Clock

from pluglog import errors
from pluglog.group import OFFSETS_TOPIC
from pluglog.group.model import DEAD, EMPTY, STABLE
from pluglog.group.store import (
    group_key,
    java_string_hashcode,
    offset_key,
    parse_key,
    parse_offset_value,
    partition_for,
)
from pluglog.protocol import records
from tests.unit.test_group_coordinator import (
    Env,
    make_broker,
    pending,
    result_of,
    start_coordinator,
)


@pytest.fixture
def env(tmp_path):
    env = Env(tmp_path)
    for topic in ("t", "u"):
        result_of(env.broker.create_topic(topic, 4, 1))
    return env


def commit(env, offsets, group="g", generation=-1, member="", instance=None, retention=-1):
    """``offsets``: {(topic, partition): offset or (offset, metadata, epoch)}."""
    topics = {}
    for (topic, index), value in offsets.items():
        offset, metadata, epoch = value if isinstance(value, tuple) else (value, "", -1)
        topics.setdefault(topic, []).append(
            {
                "partition_index": index,
                "committed_offset": offset,
                "committed_leader_epoch": epoch,
                "committed_metadata": metadata,
            }
        )
    body = [{"name": t, "partitions": ps} for t, ps in topics.items()]
    out = result_of(env.gc.commit_offsets(group, generation, member, instance, retention, body))
    return {
        (t["name"], p["partition_index"]): p["error_code"] for t in out for p in t["partitions"]
    }


def fetch(env, wanted=None, group="g"):
    error, topics = env.gc.fetch_offsets(group, wanted)
    return error, {
        (name, index): (om.offset, om.metadata, om.leader_epoch) if om else None
        for name, parts in topics
        for index, om in parts
    }


def subscription(*topics):
    out = [struct.pack(">hi", 0, len(topics))]
    for t in topics:
        out.append(struct.pack(">h", len(t)) + t.encode())
    return b"".join(out) + struct.pack(">i", -1)


def test_java_string_hashcode_and_partition_choice():
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16: 0xD83D * 31 + 0xDE00
    assert java_string_hashcode("\U0001f600") == 0xD83D * 31 + 0xDE00
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("my-group", 50) == abs(java_string_hashcode("my-group")) % 50


def test_simple_commit_and_fetch(env):
    assert commit(env, {("t", 0): (42, "meta", 7), ("t", 1): 5}) == {("t", 0): 0, ("t", 1): 0}
    assert fetch(env, [("t", [0, 1, 2])]) == (
        0,
        {("t", 0): (42, "meta", 7), ("t", 1): (5, "", -1), ("t", 2): None},
    )
    assert fetch(env, None) == (0, {("t", 0): (42, "meta", 7), ("t", 1): (5, "", -1)})
    assert fetch(env, [("t", [0])], group="unknown") == (0, {("t", 0): None})
    assert env.gc.groups["g"].state == EMPTY
    assert commit(env, {("t", 0): 43}) == {("t", 0): 0}
    assert fetch(env, [("t", [0])])[1] == {("t", 0): (43, "", -1)}


def test_commit_errors(env):
    assert commit(env, {("t", 0): 1}, generation=3, member="m") == {
        ("t", 0): errors.ILLEGAL_GENERATION
    }
    assert "g" not in env.gc.groups
    assert commit(env, {("t", 0): 1}, group="") == {("t", 0): errors.INVALID_GROUP_ID}
    big = "x" * 4097
    assert commit(env, {("t", 0): (1, big, -1), ("t", 1): 2, ("nope", 0): 3, ("t", 9): 4}) == {
        ("t", 0): errors.OFFSET_METADATA_TOO_LARGE,
        ("t", 1): 0,
        ("nope", 0): errors.UNKNOWN_TOPIC_OR_PARTITION,
        ("t", 9): errors.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert fetch(env, [("t", [0, 1])])[1] == {("t", 0): None, ("t", 1): (2, "", -1)}


def test_member_commits_follow_the_generation(env):
    (a, b), gen = env.stable_group(2)
    assert commit(env, {("t", 0): 10}, generation=gen, member=a) == {("t", 0): 0}
    assert commit(env, {("t", 0): 11}, generation=gen - 1, member=a) == {
        ("t", 0): errors.ILLEGAL_GENERATION
    }
    assert commit(env, {("t", 0): 11}, generation=gen, member="x") == {
        ("t", 0): errors.UNKNOWN_MEMBER_ID
    }
    assert commit(env, {("t", 0): 11}, generation=-1) == {("t", 0): errors.UNKNOWN_MEMBER_ID}
    c_join = pending(env.join(client_id="c"))
    # PreparingRebalance: the old generation may still commit what it consumed
    assert commit(env, {("t", 0): 12}, generation=gen, member=b) == {("t", 0): 0}
    a_join, b_join = env.join(a), env.join(b)
    new_gen = result_of(a_join)["generation_id"]
    result_of(b_join), result_of(c_join)
    assert commit(env, {("t", 0): 13}, generation=new_gen, member=a) == {
        ("t", 0): errors.REBALANCE_IN_PROGRESS
    }
    assert fetch(env, [("t", [0])])[1] == {("t", 0): (12, "", -1)}


def test_static_member_commit_fencing(env):
    a = result_of(env.join(instance="ia"))
    result_of(env.sync(a["member_id"], 1, {a["member_id"]: b""}, instance="ia"))
    assert commit(env, {("t", 0): 1}, generation=1, member=a["member_id"], instance="ia") == {
        ("t", 0): 0
    }
    assert commit(env, {("t", 0): 2}, generation=1, member="other", instance="ia") == {
        ("t", 0): errors.FENCED_INSTANCE_ID
    }


def test_offsets_and_groups_survive_a_new_coordinator(env):
    (a, b), gen = env.stable_group(2)
    assert commit(env, {("t", 0): (100, "m0", 3), ("u", 2): 7}, generation=gen, member=a) == {
        ("t", 0): 0,
        ("u", 2): 0,
    }
    assert commit(env, {("t", 1): 5}, group="simple") == {("t", 1): 0}
    assert commit(env, {("t", 1): 6}, group="simple") == {("t", 1): 0}
    assert env.broker.num_partitions(OFFSETS_TOPIC) == 3
    result_of(env.gc.stop())

    fresh = start_coordinator(env.broker)
    env.gc = fresh
    assert fetch(env, None) == (0, {("t", 0): (100, "m0", 3), ("u", 2): (7, "", -1)})
    assert fetch(env, None, group="simple") == (0, {("t", 1): (6, "", -1)})
    group = fresh.groups["g"]
    assert group.state == STABLE
    assert group.generation_id == gen
    assert list(group.members) == [a, b]
    assert group.leader_id == a
    assert group.protocol_name == "range"
    # members carry on with their generation, and their assignment is intact
    assert env.heartbeat(b, gen) == 0
    assert result_of(env.sync(b, gen)) == {"error_code": 0, "assignment": b.encode()}
    # a member that vanished during the restart expires after one session
    env.clock.advance(5)
    assert env.heartbeat(b, gen) == 0
    env.clock.advance(5.1)
    assert env.heartbeat(b, gen) == errors.REBALANCE_IN_PROGRESS
    assert env.heartbeat(a, gen) == errors.UNKNOWN_MEMBER_ID


def test_offsets_survive_a_broker_restart_on_segment_storage(tmp_path):
    clock = Clock()
    broker = make_broker(tmp_path, clock, storage="segments")
    result_of(broker.create_topic("t", 2, 1))
    env = Env.__new__(Env)
    env.clock, env.broker, env.gc = clock, broker, start_coordinator(broker)
    assert commit(env, {("t", 1): 99}, group="durable") == {("t", 1): 0}
    result_of(env.gc.stop())
    result_of(broker.stop())

    broker2 = make_broker(tmp_path, clock, storage="segments")
    env.broker, env.gc = broker2, start_coordinator(broker2)
    assert fetch(env, [("t", [0, 1])], group="durable") == (
        0,
        {("t", 0): None, ("t", 1): (99, "", -1)},
    )
    result_of(broker2.stop())


def test_records_written_match_the_documented_layout(env):
    commit(env, {("t", 3): (5, "md", 2)}, group="layout")
    part = env.broker.partitions[(OFFSETS_TOPIC, partition_for("layout", 3))]
    data = part.log.read(0, 1 << 20).records
    (record,) = list(records.iter_records(data))
    assert record.key == offset_key("layout", "t", 3)
    assert record.key == struct.pack(">hh6sh1si", 1, 6, b"layout", 1, b"t", 3)
    assert parse_key(record.key) == ("offset", "layout", "t", 3)
    value = parse_offset_value(record.value)
    assert (value.offset, value.leader_epoch, value.metadata) == (5, 2, "md")
    assert record.value[:2] == b"\x00\x03"


def test_delete_groups(env):
    (a,), gen = env.stable_group(1)
    commit(env, {("t", 0): 1}, generation=gen, member=a)
    commit(env, {("t", 0): 1}, group="simple")
    out = result_of(env.gc.delete_groups(["g", "simple", "missing", ""]))
    assert out == [
        ("g", errors.NON_EMPTY_GROUP),
        ("simple", 0),
        ("missing", errors.GROUP_ID_NOT_FOUND),
        ("", errors.INVALID_GROUP_ID),
    ]
    assert "simple" not in env.gc.groups
    assert fetch(env, [("t", [0])], group="simple")[1] == {("t", 0): None}
    env.gc.leave_group("g", [(a, None)])
    env.clock.advance(30)
    assert env.group().state == EMPTY
    group = env.group()
    assert result_of(env.gc.delete_groups(["g"])) == [("g", 0)]
    assert group.state == DEAD
    # the tombstones are in the log: a fresh coordinator knows neither group
    result_of(env.gc.stop())
    env.gc = start_coordinator(env.broker)
    assert env.gc.groups == {}
    part = env.broker.partitions[(OFFSETS_TOPIC, partition_for("g", 3))]
    data = part.log.read(0, 1 << 20).records
    tombstones = [r.key for r in records.iter_records(data) if r.value is None]
    assert group_key("g") in tombstones
    assert offset_key("g", "t", 0) in tombstones


def test_offset_delete(env):
    (a,), gen = env.stable_group(1, protocols=(("range", subscription("t")),))
    commit(env, {("t", 0): 1, ("u", 0): 2, ("u", 1): 3}, generation=gen, member=a)
    error, topics = result_of(env.gc.delete_offsets("g", [("t", [0]), ("u", [0, 3])]))
    assert error == 0
    assert dict(topics) == {"t": [(0, errors.GROUP_SUBSCRIBED_TO_TOPIC)], "u": [(0, 0), (3, 0)]}
    assert fetch(env, None)[1] == {("t", 0): (1, "", -1), ("u", 1): (3, "", -1)}
    assert result_of(env.gc.delete_offsets("nope", [("t", [0])])) == (
        errors.GROUP_ID_NOT_FOUND,
        [],
    )
    result_of(env.gc.stop())
    env.gc = start_coordinator(env.broker)
    assert fetch(env, None)[1] == {("t", 0): (1, "", -1), ("u", 1): (3, "", -1)}


def test_describe_and_list_groups(env):
    assert env.gc.describe_group("nope")["group_state"] == DEAD
    (a, b), gen = env.stable_group(2)
    commit(env, {("t", 0): 1}, group="simple")
    described = env.gc.describe_group("g")
    assert described["group_state"] == STABLE
    assert described["protocol_type"] == "consumer"
    assert described["protocol_data"] == "range"
    assert [(m["member_id"], m["member_assignment"]) for m in described["members"]] == [
        (a, a.encode()),
        (b, b.encode()),
    ]
    assert described["members"][0]["client_host"] == "/127.0.0.1"
    assert sorted(g[:2] for g in env.gc.list_groups()[1]) == [("g", "consumer"), ("simple", "")]
    pending(env.join(client_id="c"))
    described = env.gc.describe_group("g")
    assert described["protocol_data"] == ""
    assert {m["member_metadata"] for m in described["members"]} == {b""}


def test_offsets_expire_after_retention_once_the_group_is_empty(tmp_path):
    env = Env(tmp_path, offsets_retention_minutes=1)
    result_of(env.broker.create_topic("t", 1, 1))
    commit(env, {("t", 0): 1}, group="simple")
    (a,), gen = env.stable_group(1)
    commit(env, {("t", 0): 5}, generation=gen, member=a)
    assert env.gc.expire_offsets() == 0
    env.clock.advance(61)
    # the simple group's commit is older than a minute; "g" still has a member
    assert env.heartbeat(a, gen) == errors.UNKNOWN_MEMBER_ID
    assert env.gc.expire_offsets() == 1
    assert "simple" not in env.gc.groups
    assert fetch(env, [("t", [0])])[1] == {("t", 0): (5, "", -1)}
    env.clock.advance(60)
    assert env.gc.expire_offsets() == 1
    assert "g" not in env.gc.groups
    result_of(env.gc.stop())
    assert start_coordinator(env.broker).groups == {}


def test_deleting_a_topic_drops_its_committed_offsets(env):
    env.broker.group_coordinator = env.gc  # what Broker.start wires in a real broker
    assert commit(env, {("t", 0): 10, ("u", 1): 20}) == {("t", 0): 0, ("u", 1): 0}
    assert commit(env, {("t", 3): 30}, group="other") == {("t", 3): 0}
    result_of(env.broker.delete_topic("t"))
    assert fetch(env, None) == (0, {("u", 1): (20, "", -1)})
    assert fetch(env, None, group="other") == (0, {})
    # The tombstones are in __consumer_offsets: a reload agrees.
    result_of(env.gc.stop())
    env.gc = start_coordinator(env.broker)
    assert fetch(env, None) == (0, {("u", 1): (20, "", -1)})
    assert fetch(env, None, group="other") == (0, {})


def test_a_retention_past_int64_never_expires_and_is_stored(env):
    # Found by bench/fuzz.py: OffsetCommit v2 with retention_time_ms 2^63-1
    # crashed the handler packing now + retention into the int64 record.
    assert commit(env, {("t", 0): 7}, retention=(1 << 63) - 1) == {("t", 0): 0}
    assert env.gc.expire_offsets() == 0
    assert fetch(env, [("t", [0])])[1] == {("t", 0): (7, "", -1)}


def test_losing_the_offsets_topic_creation_race_is_quiet():
    """Two brokers create __consumer_offsets at once: the loser's
    TopicExistsError (before its cache has the topic) is success, not a
    failure logged with a traceback (issue 21, defect 3)."""
    from twisted.internet import defer

    from pluglog.group.store import OffsetStore

    class Broker:
        config = type(
            "Config",
            (),
            {
                "offsets_topic_num_partitions": 3,
                "offsets_commit_timeout_ms": 5000,
                "offsets_topic_replication_factor": 3,
                "offsets_topic_segment_bytes": 1 << 20,
            },
        )()
        coordinator = type("Coordinator", (), {"brokers": lambda self: [1, 2, 3]})()

        def num_partitions(self, topic):
            return None  # the winner's topic has not reached this broker's cache

        def create_topic(self, *args, **kwargs):
            return defer.fail(errors.TopicExistsError("topic '__consumer_offsets' already exists"))

    store = OffsetStore(Broker())
    results = []
    store.ensure_topic().addBoth(results.append)
    assert results == [None]
