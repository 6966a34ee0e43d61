"""Cluster tests: a real ZooKeeper (one per session, a chroot per test) and
broker processes coordinated by it."""

import pytest

from tests.cluster import Cluster
from tests.zookeeper import zk, zk_connect, zookeeper, zookeeper_process  # noqa: F401


@pytest.fixture
def cluster(tmp_path, zk_connect):  # noqa: F811
    made = []

    def start(brokers=3, **kwargs):
        c = Cluster(tmp_path, zk_connect, brokers=brokers, **kwargs).start()
        made.append(c)
        return c

    yield start
    for c in made:
        c.stop()
