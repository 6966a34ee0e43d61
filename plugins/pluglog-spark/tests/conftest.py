"""Fixtures for pluglog-spark tests: a real broker process and a real Spark.

One local[2] SparkSession serves every Spark test in this directory (its
JVM takes ~6-10 s to start); one broker serves the data-source tests, each
test using its own topics.
"""

import os
import sys
import uuid

import pytest

ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.broker_process import BrokerProcess  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    from pluglog_spark import local_session

    session = local_session(app_name="pluglog-spark-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("spark-broker") / "data", settings={"num.partitions": "3"}
    ).start()
    yield proc
    proc.stop()


@pytest.fixture
def topic_name():
    return f"t-{uuid.uuid4().hex[:10]}"
