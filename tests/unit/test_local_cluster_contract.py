"""The local coordinator keeps in step with the cluster contract the zookeeper
coordinator serves: explicit assignments and reassignment calls (one broker)."""

from pluglog.config import BrokerConfig
from pluglog.coordination.local import LocalCoordinator
from pluglog.errors import (
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)


def _result(deferred):
    out = []
    deferred.addBoth(out.append)
    return out[0]


def test_explicit_assignments_name_only_this_broker(tmp_path):
    coord = LocalCoordinator(BrokerConfig(data_dir=str(tmp_path), broker_id=3))
    coord.start()
    meta = _result(coord.create_topic("a", -1, -1, {}, assignments={0: [3], 1: [3]}))
    assert meta.num_partitions == 2 and meta.assignment == {0: [3], 1: [3]}
    bad = _result(coord.create_topic("b", -1, -1, {}, assignments={0: [3, 4]}))
    assert isinstance(bad.value, InvalidReplicaAssignmentError)
    assert "b" not in coord.topics()
    grown = _result(coord.create_partitions("a", 3, assignments=[[3]]))
    assert grown.num_partitions == 3
    bad = _result(coord.create_partitions("a", 4, assignments=[[1]]))
    assert isinstance(bad.value, InvalidReplicaAssignmentError)


def test_reassignment_on_one_broker(tmp_path):
    coord = LocalCoordinator(BrokerConfig(data_dir=str(tmp_path), broker_id=3))
    coord.start()
    coord.create_topic("a", 1, 1, {})
    result = _result(coord.reassign_partitions({("a", 0): [3], ("a", 1): [3]}))
    assert result[("a", 0)] is None
    assert isinstance(result[("a", 1)], UnknownTopicOrPartitionError)
    result = _result(coord.reassign_partitions({("a", 0): [1]}))
    assert isinstance(result[("a", 0)], InvalidReplicaAssignmentError)
    result = _result(coord.reassign_partitions({("a", 0): None}))
    assert isinstance(result[("a", 0)], NoReassignmentInProgressError)
    assert coord.list_reassignments() == {}
