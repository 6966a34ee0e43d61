"""Group API handlers through the real codec, for every version pluglog serves.

Each call encodes a request with :func:`pluglog.protocol.encode_request`,
decodes it as the server does, runs the handler and round-trips the response
through the codec, so field names and per-version shapes are checked too.
"""

import pytest

from pluglog import errors
from pluglog import protocol as codec
from pluglog.group import OFFSETS_TOPIC
from pluglog.server.handlers import RequestContext
from pluglog.server.handlers.groups import coordinator
from pluglog.server.handlers.table import HANDLERS
from tests.unit.test_group_coordinator import Env, result_of


@pytest.fixture
def env(tmp_path):
    env = Env(tmp_path)
    env.broker.group_coordinator = env.gc
    result_of(env.broker.create_topic("t", 2, 1))
    return env


def call(env, key, version, body, client_id="cli"):
    frame = codec.encode_request(key, version, 7, client_id, body)[4:]
    header = codec.parse_request_header(frame)
    request = codec.decode_request(header, memoryview(frame))
    out = HANDLERS[key](RequestContext(env.broker, header, "127.0.0.1:5555"), request)
    if not isinstance(out, dict):
        out = result_of(out)
    payload = b"".join(bytes(p) for p in codec.encode_response(key, version, 7, out))
    correlation_id, decoded = codec.decode_response(key, version, payload)
    assert correlation_id == 7
    return decoded


def join_body(member_id="", instance=None, session=10000):
    return {
        "group_id": "g",
        "session_timeout_ms": session,
        "rebalance_timeout_ms": 20000,
        "member_id": member_id,
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"sub"}],
    }


def sync_body(member_id, generation, assignments=(), instance=None):
    return {
        "group_id": "g",
        "generation_id": generation,
        "member_id": member_id,
        "group_instance_id": instance,
        "assignments": [{"member_id": m, "assignment": a} for m, a in assignments],
    }


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_find_coordinator(env, version):
    env.broker.advertised = ("broker.example", 19092)
    out = call(env, codec.FIND_COORDINATOR, version, {"key": "g", "key_type": 0})
    assert (out["error_code"], out["node_id"], out["host"], out["port"]) == (
        0,
        env.broker.node_id,
        "broker.example",
        19092,
    )
    assert env.broker.num_partitions(OFFSETS_TOPIC) == 3
    if version >= 1:
        # The transaction coordinator's topic is made on its first lookup too.
        txn = call(env, codec.FIND_COORDINATOR, version, {"key": "tx", "key_type": 1})
        assert (txn["error_code"], txn["node_id"]) == (0, env.broker.node_id)
        assert env.broker.num_partitions("__transaction_state") is not None
        bad = call(env, codec.FIND_COORDINATOR, version, {"key": "x", "key_type": 7})
        assert bad["error_code"] == errors.INVALID_REQUEST


@pytest.mark.parametrize("version", [4, 5, 6])
def test_find_coordinator_batched(env, version):
    env.broker.advertised = ("broker.example", 19092)
    out = call(
        env, codec.FIND_COORDINATOR, version, {"key_type": 0, "coordinator_keys": ["a", "b"]}
    )
    assert [(c["key"], c["error_code"], c["node_id"], c["host"]) for c in out["coordinators"]] == [
        ("a", 0, env.broker.node_id, "broker.example"),
        ("b", 0, env.broker.node_id, "broker.example"),
    ]
    bad = call(env, codec.FIND_COORDINATOR, version, {"key_type": 2, "coordinator_keys": ["s"]})
    assert [(c["key"], c["error_code"]) for c in bad["coordinators"]] == [
        ("s", errors.INVALID_REQUEST)
    ]


@pytest.mark.parametrize(
    "join_v,sync_v,hb_v,leave_v",
    [(0, 0, 0, 0), (3, 1, 1, 1), (5, 3, 3, 3), (7, 4, 4, 4), (9, 5, 4, 5)],
)
def test_join_sync_heartbeat_leave_on_the_wire(env, join_v, sync_v, hb_v, leave_v):
    instance = "inst" if join_v >= 5 else None
    out = call(env, codec.JOIN_GROUP, join_v, join_body(instance=instance))
    member = out["member_id"]
    assert member.startswith("inst-" if instance else "cli-")
    assert out["error_code"] == 0 and out["generation_id"] == 1
    assert out["leader"] == member
    assert [m["metadata"] for m in out["members"]] == [b"sub"]
    if join_v >= 5:
        assert out["members"][0]["group_instance_id"] == "inst"
    if join_v >= 7:
        assert (out["protocol_type"], out["protocol_name"]) == ("consumer", "range")
    sync_instance = instance if sync_v >= 3 else None
    body = sync_body(member, 1, [(member, b"A")], sync_instance)
    if sync_v >= 5:
        wrong = dict(body, protocol_type="consumer", protocol_name="roundrobin")
        out = call(env, codec.SYNC_GROUP, sync_v, wrong)
        assert out["error_code"] == errors.INCONSISTENT_GROUP_PROTOCOL
        body.update(protocol_type="consumer", protocol_name="range")
    out = call(env, codec.SYNC_GROUP, sync_v, body)
    assert out == {**out, "error_code": 0, "assignment": b"A"}
    if sync_v >= 5:
        assert (out["protocol_type"], out["protocol_name"]) == ("consumer", "range")
    hb = {"group_id": "g", "generation_id": 1, "member_id": member, "group_instance_id": None}
    assert call(env, codec.HEARTBEAT, hb_v, hb)["error_code"] == 0
    hb["generation_id"] = 2
    assert call(env, codec.HEARTBEAT, hb_v, hb)["error_code"] == errors.ILLEGAL_GENERATION
    described = coordinator(env.broker).describe_group("g")
    assert described["members"][0]["client_host"] == "/127.0.0.1"
    assert described["members"][0]["client_id"] == "cli"
    if leave_v < 3:
        out = call(env, codec.LEAVE_GROUP, leave_v, {"group_id": "g", "member_id": member})
        assert out["error_code"] == 0
        out = call(env, codec.LEAVE_GROUP, leave_v, {"group_id": "g", "member_id": member})
        assert out["error_code"] == errors.UNKNOWN_MEMBER_ID
    else:
        body = {
            "group_id": "g",
            "members": [
                {"member_id": "", "group_instance_id": "inst"},
                {"member_id": "ghost", "group_instance_id": None},
            ],
        }
        out = call(env, codec.LEAVE_GROUP, leave_v, body)
        assert out["error_code"] == 0
        assert [m["error_code"] for m in out["members"]] == [0, errors.UNKNOWN_MEMBER_ID]
    assert env.group().members == {}


def test_join_v4_requires_a_member_id(env):
    out = call(env, codec.JOIN_GROUP, 4, join_body())
    assert out["error_code"] == errors.MEMBER_ID_REQUIRED
    again = call(env, codec.JOIN_GROUP, 4, join_body(out["member_id"]))
    assert (again["error_code"], again["member_id"]) == (0, out["member_id"])
    bad = call(env, codec.JOIN_GROUP, 4, join_body(session=10**7))
    assert bad["error_code"] == errors.INVALID_SESSION_TIMEOUT


def commit_body(version, offset, generation=-1, member=""):
    partition = {
        "partition_index": 1,
        "committed_offset": offset,
        "committed_leader_epoch": 4,
        "commit_timestamp": -1,
        "committed_metadata": "md",
    }
    return {
        "group_id": "g",
        "generation_id_or_member_epoch": generation,
        "member_id": member,
        "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [{"name": "t", "partitions": [partition]}],
    }


@pytest.mark.parametrize(
    "commit_v,fetch_v", [(2, 1), (3, 2), (5, 3), (6, 4), (7, 5), (8, 6), (9, 7)]
)
def test_offset_commit_and_fetch_on_the_wire(env, commit_v, fetch_v):
    out = call(env, codec.OFFSET_COMMIT, commit_v, commit_body(commit_v, 77))
    assert out["topics"][0]["partitions"] == [{"partition_index": 1, "error_code": 0}]
    fetched = call(
        env,
        codec.OFFSET_FETCH,
        fetch_v,
        {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]},
    )
    parts = {p["partition_index"]: p for p in fetched["topics"][0]["partitions"]}
    assert parts[0]["committed_offset"] == -1
    assert (parts[1]["committed_offset"], parts[1]["metadata"]) == (77, "md")
    if fetch_v >= 5:
        assert parts[1]["committed_leader_epoch"] == (4 if commit_v >= 6 else -1)
    if fetch_v >= 2:
        everything = call(env, codec.OFFSET_FETCH, fetch_v, {"group_id": "g", "topics": None})
        assert everything["error_code"] == 0
        assert [(t["name"], len(t["partitions"])) for t in everything["topics"]] == [("t", 1)]
    stale = call(env, codec.OFFSET_COMMIT, commit_v, commit_body(commit_v, 78, 5, "m"))
    assert stale["topics"][0]["partitions"][0]["error_code"] == errors.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("fetch_v", [8, 9])
def test_offset_fetch_several_groups(env, fetch_v):
    call(env, codec.OFFSET_COMMIT, 9, commit_body(9, 77))
    groups = [
        {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [1]}]},
        {"group_id": "other", "topics": None},
        {"group_id": "g", "topics": None, "member_id": None, "member_epoch": -1},
    ]
    out = call(env, codec.OFFSET_FETCH, fetch_v, {"groups": groups, "require_stable": True})
    assert [(g["group_id"], g["error_code"]) for g in out["groups"]] == [
        ("g", 0),
        ("other", 0),
        ("g", 0),
    ]
    first = out["groups"][0]["topics"][0]["partitions"][0]
    assert (first["committed_offset"], first["committed_leader_epoch"]) == (77, 4)
    assert out["groups"][1]["topics"] == []
    assert [t["name"] for t in out["groups"][2]["topics"]] == ["t"]


def test_offset_fetch_require_stable_sees_a_pending_transaction(env):
    call(env, codec.OFFSET_COMMIT, 9, commit_body(9, 77))
    env.group().pending_txn[42] = {("t", 1): None}
    body = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [1]}]}
    loose = call(env, codec.OFFSET_FETCH, 7, dict(body, require_stable=False))
    assert loose["topics"][0]["partitions"][0]["committed_offset"] == 77
    strict = call(env, codec.OFFSET_FETCH, 7, dict(body, require_stable=True))
    part = strict["topics"][0]["partitions"][0]
    assert (part["error_code"], part["committed_offset"]) == (errors.UNSTABLE_OFFSET_COMMIT, -1)


def test_fetch_while_loading_reports_load_in_progress(env):
    env.gc.loading = True
    body = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]}
    v1 = call(env, codec.OFFSET_FETCH, 1, body)
    assert v1["topics"][0]["partitions"][0]["error_code"] == errors.COORDINATOR_LOAD_IN_PROGRESS
    v5 = call(env, codec.OFFSET_FETCH, 5, body)
    assert v5["error_code"] == errors.COORDINATOR_LOAD_IN_PROGRESS


@pytest.mark.parametrize(
    "describe_v,list_v,delete_v", [(0, 0, 0), (3, 1, 1), (4, 2, 1), (5, 3, 2), (6, 5, 2)]
)
def test_admin_apis_on_the_wire(env, describe_v, list_v, delete_v):
    member = call(env, codec.JOIN_GROUP, 1, join_body())["member_id"]
    call(env, codec.SYNC_GROUP, 0, sync_body(member, 1, [(member, b"A")]))
    out = call(env, codec.DESCRIBE_GROUPS, describe_v, {"groups": ["g", "none"]})
    g, none = out["groups"]
    assert (g["group_state"], g["protocol_type"], g["protocol_data"]) == (
        "Stable",
        "consumer",
        "range",
    )
    assert (g["members"][0]["member_id"], g["members"][0]["member_assignment"]) == (member, b"A")
    assert none["group_state"] == "Dead"
    listed = call(env, codec.LIST_GROUPS, list_v, {})
    assert listed["error_code"] == 0
    assert [(g["group_id"], g["protocol_type"]) for g in listed["groups"]] == [("g", "consumer")]
    if list_v >= 4:
        assert (listed["groups"][0]["group_state"]) == "Stable"
        filtered = call(env, codec.LIST_GROUPS, list_v, {"states_filter": ["empty"]})
        assert filtered["groups"] == []
        filtered = call(env, codec.LIST_GROUPS, list_v, {"states_filter": ["STABLE"]})
        assert [g["group_id"] for g in filtered["groups"]] == ["g"]
    if list_v >= 5:
        assert listed["groups"][0]["group_type"] == "classic"
        by_type = call(env, codec.LIST_GROUPS, list_v, {"types_filter": ["consumer"]})
        assert by_type["groups"] == []
        by_type = call(env, codec.LIST_GROUPS, list_v, {"types_filter": ["Classic"]})
        assert [g["group_id"] for g in by_type["groups"]] == ["g"]
    out = call(env, codec.DELETE_GROUPS, delete_v, {"groups_names": ["g", "none"]})
    assert out["results"] == [
        {"group_id": "g", "error_code": errors.NON_EMPTY_GROUP},
        {"group_id": "none", "error_code": errors.GROUP_ID_NOT_FOUND},
    ]
    call(env, codec.LEAVE_GROUP, 0, {"group_id": "g", "member_id": member})
    env.clock.advance(20)
    call(env, codec.OFFSET_COMMIT, 2, commit_body(2, 5))
    out = call(
        env,
        codec.OFFSET_DELETE,
        0,
        {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 1}]}]},
    )
    assert out["error_code"] == 0
    assert out["topics"][0]["partitions"] == [{"partition_index": 1, "error_code": 0}]
    out = call(env, codec.DELETE_GROUPS, delete_v, {"groups_names": ["g"]})
    assert out["results"] == [{"group_id": "g", "error_code": 0}]


def test_lazy_coordinator_when_the_broker_has_none(tmp_path):
    env = Env(tmp_path)
    out = call(env, codec.JOIN_GROUP, 0, join_body())
    assert out["error_code"] == errors.COORDINATOR_LOAD_IN_PROGRESS
    env.clock.advance(0)
    assert call(env, codec.JOIN_GROUP, 0, join_body())["error_code"] == 0
    assert env.broker.group_coordinator is not env.gc
