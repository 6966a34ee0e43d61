"""The cluster operator's API handlers through the real codec.

Each call encodes a request, decodes it as the server does, runs the handler
and round-trips the response, for every version pluglog advertises. The
single-broker answers come from the real Broker and local coordinator; the
multi-broker decisions (who to elect, which moves to refuse, NOT_CONTROLLER)
use :class:`ClusterView`, a local coordinator that reports a three-broker
cluster and records what the handlers ask of it.
"""

import os

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock

from pluglog import errors
from pluglog import protocol as codec
from pluglog.coordination.local import LocalCoordinator
from pluglog.coordination.state import PartitionState
from pluglog.server.handlers import RequestContext, cluster
from pluglog.server.handlers.table import HANDLERS
from tests.unit.test_group_coordinator import make_broker, result_of


def versions(key):
    lo, hi = codec.SUPPORTED[key]
    return list(range(lo, hi + 1))


def call(broker, key, version, body):
    frame = codec.encode_request(key, version, 7, "admin", body)[4:]
    header = codec.parse_request_header(frame)
    request = codec.decode_request(header, memoryview(frame))
    out = HANDLERS[key](RequestContext(broker, header, "127.0.0.1:5555"), request)
    if not isinstance(out, dict):
        out = result_of(out)
    payload = b"".join(bytes(p) for p in codec.encode_response(key, version, 7, out))
    correlation_id, decoded = codec.decode_response(key, version, payload)
    assert correlation_id == 7
    return decoded


@pytest.fixture
def broker(tmp_path):
    clock = Clock()
    clock.advance(1000)
    b = make_broker(tmp_path / "data", clock, storage="segments", broker_rack="r1")
    result_of(b.create_topic("t", 2, 1))
    return b


def _produce(broker, topic, partition, count):
    from pluglog.protocol.records import Record, build_batch

    part = broker.partition(topic, partition)
    batch = build_batch([Record(value=b"x" * 100) for _ in range(count)])
    part.log.append([batch], broker.now_ms())
    part.high_watermark = part.log.log_end_offset


# -- DescribeCluster -------------------------------------------------------------


@pytest.mark.parametrize("version", versions(codec.DESCRIBE_CLUSTER))
def test_describe_cluster_names_controller_and_brokers_with_rack(broker, version):
    body = {"include_cluster_authorized_operations": True, "include_fenced_brokers": True}
    out = call(broker, codec.DESCRIBE_CLUSTER, version, body)
    assert out["error_code"] == 0
    assert out["cluster_id"] == broker.coordinator.cluster_id()
    assert out["controller_id"] == broker.node_id
    assert [(b["broker_id"], b["host"], b["port"], b["rack"]) for b in out["brokers"]] == [
        (broker.node_id, *broker.advertised, "r1")
    ]


def test_describe_cluster_controller_endpoints_refused(broker):
    out = call(broker, codec.DESCRIBE_CLUSTER, 1, {"endpoint_type": 2})
    assert out["error_code"] == cluster.MISMATCHED_ENDPOINT_TYPE and out["brokers"] == []
    out = call(broker, codec.DESCRIBE_CLUSTER, 1, {"endpoint_type": 9})
    assert out["error_code"] == cluster.UNSUPPORTED_ENDPOINT_TYPE


# -- DescribeLogDirs -------------------------------------------------------------


@pytest.mark.parametrize("version", versions(codec.DESCRIBE_LOG_DIRS))
def test_describe_log_dirs_sizes_per_partition(broker, version):
    _produce(broker, "t", 1, 50)
    out = call(broker, codec.DESCRIBE_LOG_DIRS, version, {"topics": None})
    assert [r["log_dir"] for r in out["results"]] == [os.path.abspath(broker.config.data_dir)]
    (result,) = out["results"]
    sizes = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for t in result["topics"]
        for p in t["partitions"]
    }
    assert sizes[("t", 0)] == 0
    assert sizes[("t", 1)] == broker.partition("t", 1).log.size_bytes > 50 * 100
    if version >= 4:
        assert result["total_bytes"] >= result["usable_bytes"] > 0
    else:
        assert result["total_bytes"] == -1  # not on the wire: the decoder's default


def test_describe_log_dirs_only_requested_hosted_partitions(broker):
    body = {"topics": [{"topic": "t", "partitions": [1, 7]}, {"topic": "nope", "partitions": [0]}]}
    out = call(broker, codec.DESCRIBE_LOG_DIRS, 4, body)
    topics = out["results"][0]["topics"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in topics] == [
        ("t", [1])
    ]


# -- Single broker: ElectLeaders, reassignments -----------------------------------


@pytest.mark.parametrize("version", versions(codec.ELECT_LEADERS))
def test_elect_preferred_leader_not_needed_on_one_broker(broker, version):
    body = {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0, 1, 5]}]}
    out = call(broker, codec.ELECT_LEADERS, version, body)
    if version >= 1:
        assert out["error_code"] == 0
    (topic,) = out["replica_election_results"]
    codes = {p["partition_id"]: p["error_code"] for p in topic["partition_result"]}
    assert codes == {
        0: errors.ELECTION_NOT_NEEDED,
        1: errors.ELECTION_NOT_NEEDED,
        5: errors.UNKNOWN_TOPIC_OR_PARTITION,
    }


def test_elect_all_partitions_when_null(broker):
    out = call(broker, codec.ELECT_LEADERS, 2, {"election_type": 1, "topic_partitions": None})
    got = {
        (t["topic"], p["partition_id"]): p["error_code"]
        for t in out["replica_election_results"]
        for p in t["partition_result"]
    }
    assert got == {("t", 0): errors.ELECTION_NOT_NEEDED, ("t", 1): errors.ELECTION_NOT_NEEDED}


def _reassign(broker, moves, version=0, allow_rf_change=True):
    topics = {}
    for (topic, partition), replicas in moves.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "replicas": replicas})
    body = {
        "timeout_ms": 1000,
        "allow_replication_factor_change": allow_rf_change,
        "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
    }
    out = call(broker, codec.ALTER_PARTITION_REASSIGNMENTS, version, body)
    codes = {
        (t["name"], p["partition_index"]): p["error_code"]
        for t in out["responses"]
        for p in t["partitions"]
    }
    return out, codes


@pytest.mark.parametrize("version", versions(codec.ALTER_PARTITION_REASSIGNMENTS))
def test_single_broker_reassignment(broker, version):
    node = broker.node_id
    out, codes = _reassign(
        broker,
        {
            ("t", 0): [node],
            ("t", 1): [node, 5],
            ("t", 9): [node],
            ("nope", 0): [node],
        },
        version,
    )
    assert out["error_code"] == 0
    assert codes == {
        ("t", 0): 0,
        ("t", 1): errors.INVALID_REPLICA_ASSIGNMENT,  # broker 5 does not exist
        ("t", 9): errors.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): errors.UNKNOWN_TOPIC_OR_PARTITION,
    }
    _, codes = _reassign(broker, {("t", 0): None}, version)
    assert codes == {("t", 0): errors.NO_REASSIGNMENT_IN_PROGRESS}


def test_local_coordinator_refuses_other_brokers(broker):
    # The handler lets through what the cluster view allows; the local
    # coordinator itself still refuses anything but [this broker].
    coord = broker.coordinator
    out = result_of(coord.reassign_partitions({("t", 0): [broker.node_id, 1], ("t", 1): None}))
    assert isinstance(out[("t", 0)], errors.InvalidReplicaAssignmentError)
    assert isinstance(out[("t", 1)], errors.NoReassignmentInProgressError)
    assert coord.list_reassignments() == {}


def test_list_reassignments_empty(broker):
    for topics in (None, [{"name": "t", "partition_indexes": [0]}]):
        out = call(broker, codec.LIST_PARTITION_REASSIGNMENTS, 0, {"topics": topics})
        assert out["error_code"] == 0 and out["topics"] == []


# -- A cluster seen through a coordinator twin -----------------------------------


class ClusterView(LocalCoordinator):
    """A local coordinator reporting brokers 0-2 (``dead`` ones missing),
    controller ``controller``, replicas [0, 1, 2] for every partition, and
    leader ``leaders[(t, p)]`` (default the preferred replica 0)."""

    def __init__(self, config, controller=0, dead=(), leaders=None, ongoing=None):
        super().__init__(config)
        self.controller = controller
        self.dead = set(dead)
        self.leaders = dict(leaders or {})
        self.ongoing = dict(ongoing or {})
        self.calls = []

    def controller_id(self):
        return self.controller

    def brokers(self):
        return [(b, "127.0.0.1", 9000 + b, None) for b in range(3) if b not in self.dead]

    def topics(self):
        out = super().topics()
        for meta in out.values():
            meta.assignment = {p: [0, 1, 2] for p in range(meta.num_partitions)}
        return out

    def partition_state(self, topic, partition):
        if super().partition_state(topic, partition) is None:
            return None
        leader = self.leaders.get((topic, partition), 0)
        return PartitionState(leader, 3, (leader,))

    def elect_leaders(self, partitions, preferred=True):
        self.calls.append(("elect", list(partitions), preferred))
        return defer.succeed(
            {
                tp: None if tp[1] == 0 else errors.PreferredLeaderNotAvailableError("not in sync")
                for tp in partitions
            }
        )

    def reassign_partitions(self, reassignments):
        self.calls.append(("reassign", dict(reassignments)))
        return defer.succeed({tp: None for tp in reassignments})

    def list_reassignments(self):
        return dict(self.ongoing)


def _view(broker, **kwargs):
    view = ClusterView(broker.config, **kwargs)
    view._topics = broker.coordinator._topics
    view._cluster_id = broker.coordinator.cluster_id()
    broker.coordinator = view
    return view


def test_elect_preferred_calls_the_controller_for_displaced_leaders(broker):
    view = _view(broker, leaders={("t", 0): 2, ("t", 1): 1})
    body = {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0, 1]}]}
    out = call(broker, codec.ELECT_LEADERS, 2, body)
    assert view.calls == [("elect", [("t", 0), ("t", 1)], True)]
    results = {
        p["partition_id"]: p for p in out["replica_election_results"][0]["partition_result"]
    }
    assert results[0]["error_code"] == 0 and results[0]["error_message"] is None
    assert results[1]["error_code"] == errors.PREFERRED_LEADER_NOT_AVAILABLE
    assert "not in sync" in results[1]["error_message"]


def test_elect_unclean_only_where_the_leader_is_dead(broker):
    view = _view(broker, dead={2}, leaders={("t", 0): 2, ("t", 1): 1})
    body = {"election_type": 1, "topic_partitions": [{"topic": "t", "partitions": [0, 1]}]}
    out = call(broker, codec.ELECT_LEADERS, 1, body)
    assert view.calls == [("elect", [("t", 0)], False)]
    codes = {
        p["partition_id"]: p["error_code"]
        for p in out["replica_election_results"][0]["partition_result"]
    }
    assert codes == {0: 0, 1: errors.ELECTION_NOT_NEEDED}


@pytest.mark.parametrize("version", versions(codec.ELECT_LEADERS))
def test_elect_on_a_non_controller(broker, version):
    view = _view(broker, controller=2, leaders={("t", 0): 1})
    body = {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0]}]}
    out = call(broker, codec.ELECT_LEADERS, version, body)
    assert view.calls == []
    if version >= 1:
        assert out["error_code"] == errors.NOT_CONTROLLER
    # v0 has no top-level code: each partition says it (kafka-python retries on either).
    result = out["replica_election_results"][0]["partition_result"][0]
    assert result["error_code"] == errors.NOT_CONTROLLER


def test_reassignment_checks_before_the_controller(broker):
    view = _view(broker, dead={2})
    out, codes = _reassign(
        broker,
        {
            ("t", 0): [1, 0],
            ("t", 1): [1, 2],  # broker 2 is down
        },
    )
    assert codes == {("t", 0): 0, ("t", 1): errors.INVALID_REPLICA_ASSIGNMENT}
    assert "not alive" in out["responses"][0]["partitions"][1]["error_message"]
    assert view.calls == [("reassign", {("t", 0): [1, 0]})]
    _, codes = _reassign(broker, {("t", 0): [1, 1], ("t", 1): []})
    assert codes == {("t", 0): errors.INVALID_REPLICA_ASSIGNMENT, ("t", 1): 39}
    _, codes = _reassign(broker, {("t", 0): [1], ("t", 1): None}, version=1, allow_rf_change=False)
    assert codes == {("t", 0): errors.INVALID_REPLICATION_FACTOR, ("t", 1): 0}
    assert view.calls[-1] == ("reassign", {("t", 1): None})


def test_reassignment_apis_on_a_non_controller(broker):
    view = _view(broker, controller=1)
    out, codes = _reassign(broker, {("t", 0): [0, 1]})
    assert out["error_code"] == errors.NOT_CONTROLLER and codes == {}
    out = call(broker, codec.LIST_PARTITION_REASSIGNMENTS, 0, {"topics": None})
    assert out["error_code"] == errors.NOT_CONTROLLER
    assert view.calls == []


def test_list_reassignments_filters_requested_partitions(broker):
    ongoing = {("t", 1): ((0, 1, 2), (2,), (0,)), ("t", 0): ((0, 1), (), ())}
    _view(broker, ongoing=ongoing)
    out = call(broker, codec.LIST_PARTITION_REASSIGNMENTS, 0, {"topics": None})
    parts = out["topics"][0]["partitions"]
    assert [p["partition_index"] for p in parts] == [0, 1]
    assert parts[1] == {
        "partition_index": 1,
        "replicas": [0, 1, 2],
        "adding_replicas": [2],
        "removing_replicas": [0],
    }
    body = {"topics": [{"name": "t", "partition_indexes": [1]}]}
    out = call(broker, codec.LIST_PARTITION_REASSIGNMENTS, 0, body)
    assert [p["partition_index"] for p in out["topics"][0]["partitions"]] == [1]


def test_list_reassignments_accepts_dict_entries(broker):
    # The ZooKeeper coordinator hands out dicts with the response's field names.
    entry = {"replicas": [0, 1, 2], "adding_replicas": [2], "removing_replicas": [0]}
    _view(broker, ongoing={("t", 1): entry})
    out = call(broker, codec.LIST_PARTITION_REASSIGNMENTS, 0, {"topics": None})
    assert out["topics"][0]["partitions"] == [{"partition_index": 1, **entry}]


def test_a_failed_controller_call_becomes_each_partitions_error(broker):
    view = _view(broker, leaders={("t", 0): 1, ("t", 1): 2})
    view.elect_leaders = lambda partitions, preferred=True: defer.fail(
        errors.RequestTimedOutError("no answer from the controller")
    )
    view.reassign_partitions = lambda moves: defer.fail(RuntimeError("zk went away"))
    body = {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0, 1]}]}
    out = call(broker, codec.ELECT_LEADERS, 2, body)
    results = out["replica_election_results"][0]["partition_result"]
    assert [(p["error_code"], p["error_message"]) for p in results] == [
        (errors.REQUEST_TIMED_OUT, "no answer from the controller")
    ] * 2
    _, codes = _reassign(broker, {("t", 0): [1, 0]})
    assert codes == {("t", 0): errors.UNKNOWN_SERVER_ERROR}
