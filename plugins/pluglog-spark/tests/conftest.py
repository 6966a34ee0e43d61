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
PLUGIN = os.path.join(ROOT, "plugins", "pluglog-spark")
# This checkout's pluglog_spark, not an installed (editable) copy elsewhere,
# in this process, in Spark's Python workers and in child drivers alike.
for path in (PLUGIN, ROOT):
    if path in sys.path:
        sys.path.remove(path)
    sys.path.insert(0, path)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [PLUGIN, ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
)

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.moto_s3 import DUMMY_CREDENTIALS  # noqa: E402

# Spark's Python workers inherit the JVM's environment, fixed when the
# session starts: test_spark_remote's executors read moto's S3 with boto3's
# usual credential sources, so the dummies must be in place before that.
for _key, _value in DUMMY_CREDENTIALS.items():
    os.environ.setdefault(_key, _value)


@pytest.fixture(scope="session")
def spark():
    from pluglog_spark import local_session

    # local[2,2]: two threads, and a failed task is retried once as on a
    # cluster (plain local[N] never retries), which the exactly-once tests need.
    session = local_session(master="local[2,2]", app_name="pluglog-spark-tests")
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
