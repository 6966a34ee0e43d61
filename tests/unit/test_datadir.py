"""pluglog.datadir: the data dir's lock and its cluster identity (meta.properties)."""

import os

import pytest

from pluglog.datadir import (
    LOCAL,
    ZOOKEEPER,
    DataDirInUseError,
    DataDirLock,
    check_meta_properties,
    read_meta_properties,
)
from pluglog.errors import ConfigError


def test_lock_is_exclusive_and_names_the_holder(tmp_path):
    first = DataDirLock.acquire(str(tmp_path / "d"))
    with pytest.raises(DataDirInUseError, match=rf"held by pid {os.getpid()}\)$"):
        DataDirLock.acquire(str(tmp_path / "d"))
    first.release()
    first.release()  # idempotent
    again = DataDirLock.acquire(str(tmp_path / "d"))
    assert again.held
    again.release()


def test_missing_file_is_written_in_either_mode(tmp_path):
    check_meta_properties(str(tmp_path / "zk"), "C1", 3, ZOOKEEPER, "cluster C1")
    assert read_meta_properties(str(tmp_path / "zk")) == {
        "cluster.id": "C1",
        "version": "0",
        "broker.id": "3",
    }
    check_meta_properties(str(tmp_path / "local"), "C2", 0, LOCAL, "cluster C2")
    assert read_meta_properties(str(tmp_path / "local"))["pluglog.coordinator"] == "local"


def test_mode_cluster_and_broker_mismatches(tmp_path):
    data = str(tmp_path)
    check_meta_properties(data, "C1", 3, ZOOKEEPER, "cluster C1")
    check_meta_properties(data, "C1", 3, ZOOKEEPER, "cluster C1")  # same: accepted
    with pytest.raises(ConfigError, match="belongs to cluster C1 .* not to cluster C9"):
        check_meta_properties(data, "C9", 3, ZOOKEEPER, "cluster C9")
    with pytest.raises(ConfigError, match="start it with --coordinator zookeeper"):
        check_meta_properties(data, "C1", 3, LOCAL, "the local cluster C1")
    with pytest.raises(ConfigError, match="belongs to broker.id=3, not broker.id=4"):
        check_meta_properties(data, "C1", 4, ZOOKEEPER, "cluster C1")


def test_local_broker_records_a_new_broker_id(tmp_path):
    data = str(tmp_path)
    check_meta_properties(data, "L1", 0, LOCAL, "cluster L1")
    check_meta_properties(data, "L1", 5, LOCAL, "cluster L1")
    assert read_meta_properties(data)["broker.id"] == "5"
    with pytest.raises(ConfigError, match="start it with --coordinator local"):
        check_meta_properties(data, "L1", 5, ZOOKEEPER, "cluster L1 in ZooKeeper")
