"""The local coordinator: topic metadata persisted atomically in the data dir."""

import json

import pytest
from zope.interface.verify import verifyObject

from pluglog.config import BrokerConfig
from pluglog.coordination.local import LocalCoordinator, validate_topic_name
from pluglog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from pluglog.interfaces import ICoordinator


def _coordinator(tmp_path):
    coord = LocalCoordinator(BrokerConfig(data_dir=str(tmp_path), broker_id=3))
    coord.start()
    return coord


def _failure(deferred):
    failures = []
    deferred.addErrback(failures.append)
    assert failures, "expected the Deferred to fail"
    return failures[0].value


def test_provides_interface(tmp_path):
    assert verifyObject(ICoordinator, _coordinator(tmp_path))


def test_create_persist_reload(tmp_path):
    coord = _coordinator(tmp_path)
    events = []
    coord.add_listener(lambda event, meta: events.append((event, meta.name)))
    coord.create_topic("orders", 3, 1, {"retention.ms": "1000"})
    coord.create_partitions("orders", 5)
    coord.alter_topic_config("orders", {"cleanup.policy": "compact"})
    assert events == [("created", "orders"), ("changed", "orders"), ("changed", "orders")]
    cluster_id = coord.cluster_id()
    assert len(cluster_id) == 22
    again = _coordinator(tmp_path)
    meta = again.topics()["orders"]
    assert meta.num_partitions == 5
    assert meta.configs == {"cleanup.policy": "compact"}
    assert again.cluster_id() == cluster_id
    assert again.controller_id() == 3
    state = json.loads((tmp_path / "pluglog-metadata.json").read_text())
    assert state["topics"]["orders"]["partitions"] == 5
    again.delete_topic("orders")
    assert "orders" not in _coordinator(tmp_path).topics()


@pytest.mark.parametrize(
    "args,error",
    [
        (("bad name!", 1, 1, {}), InvalidTopicError),
        (("..", 1, 1, {}), InvalidTopicError),
        (("x" * 250, 1, 1, {}), InvalidTopicError),
        (("ok", 0, 1, {}), InvalidPartitionsError),
        (("ok", 1, 3, {}), InvalidReplicationFactorError),
        (("ok", 1, 1, {"segment.bytes": "tiny"}), InvalidConfigError),
    ],
)
def test_create_errors(tmp_path, args, error):
    assert isinstance(_failure(_coordinator(tmp_path).create_topic(*args)), error)


def test_duplicate_and_unknown(tmp_path):
    coord = _coordinator(tmp_path)
    coord.create_topic("t", 1, 1, {})
    assert isinstance(_failure(coord.create_topic("t", 1, 1, {})), TopicExistsError)
    assert isinstance(_failure(coord.delete_topic("nope")), UnknownTopicOrPartitionError)
    assert isinstance(_failure(coord.create_partitions("t", 1)), InvalidPartitionsError)


def test_topic_names():
    validate_topic_name("a.b_c-D9")
    with pytest.raises(InvalidTopicError):
        validate_topic_name("")


def test_validate_only_checks_without_changing(tmp_path):
    coord = _coordinator(tmp_path)
    coord.create_topic("kept", 2, 1, {}, validate_only=True)
    assert "kept" not in coord.topics()
    assert isinstance(
        _failure(coord.create_topic("bad name", 1, 1, {}, validate_only=True)), InvalidTopicError
    )
    coord.create_topic("grow", 2, 1, {})
    coord.create_partitions("grow", 5, validate_only=True)
    assert coord.topics()["grow"].num_partitions == 2
    assert isinstance(
        _failure(coord.create_partitions("grow", 2, validate_only=True)), InvalidPartitionsError
    )
