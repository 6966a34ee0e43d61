"""Fixtures that run the real broker process."""

import os

import pytest

from tests.broker_process import BrokerProcess
from tests.moto_s3 import DUMMY_CREDENTIALS, MotoServer


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


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    """A real S3 server (moto_server) per test module, for tiered storage;
    boto3's dummy credentials are set for the broker processes to inherit."""
    saved = {key: os.environ.get(key) for key in DUMMY_CREDENTIALS}
    os.environ.update(DUMMY_CREDENTIALS)
    server = MotoServer(str(tmp_path_factory.mktemp("moto"))).start()
    yield server
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


# Real ZooKeeper (tests/zookeeper.py): one process per session, a chroot per test.
# Secured listeners (SSL, SASL_PLAINTEXT, SASL_SSL) with generated certificates.
from tests.integration.secure_broker import secure  # noqa: E402, F401
from tests.zookeeper import zk, zk_connect, zookeeper, zookeeper_process  # noqa: E402, F401
