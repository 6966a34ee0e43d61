"""Fixtures that run the real broker process."""

import pytest

from tests.broker_process import BrokerProcess


@pytest.fixture
def broker(tmp_path):
    proc = BrokerProcess(tmp_path / "data").start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("shared") / "data").start()
    yield proc
    proc.stop()


# Real ZooKeeper (tests/zookeeper.py): one process per session, a chroot per test.
# Secured listeners (SSL, SASL_PLAINTEXT, SASL_SSL) with generated certificates.
from tests.integration.secure_broker import secure  # noqa: E402, F401
from tests.zookeeper import zk_connect, zookeeper, zookeeper_process  # noqa: E402, F401
