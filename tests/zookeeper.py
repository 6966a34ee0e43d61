"""Start and stop a real ZooKeeper for tests: pytest fixtures over
:class:`pluglog.coordination.zkserver.ZooKeeperServer`.

Import the fixtures into a conftest: one ZooKeeper per test session, and
every test its own chroot, ``127.0.0.1:PORT/t<uuid>``, so tests never see
each other's znodes.
"""

import uuid

import pytest

from pluglog.coordination.zkserver import ZK_JAR, ZooKeeperServer, four_letter

__all__ = ["ZK_JAR", "ZooKeeperProcess", "four_letter", "new_chroot"]

#: The name tests and bench/ use.
ZooKeeperProcess = ZooKeeperServer


def new_chroot():
    return f"/t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def zookeeper_process(tmp_path_factory):
    """One ZooKeeper for the whole test session."""
    proc = ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper")).start()
    yield proc
    proc.stop()


@pytest.fixture
def zookeeper(zookeeper_process):
    """The session's ZooKeeper; restarted if an earlier test stopped it."""
    if not zookeeper_process.alive():
        zookeeper_process.start()
    return zookeeper_process


@pytest.fixture
def zk_connect(zookeeper):
    """A connect string with a chroot of this test's own: ``127.0.0.1:PORT/t<id>``."""
    return zookeeper.connect_string(new_chroot())
