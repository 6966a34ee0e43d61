"""Every example in docs/examples/ runs against the real broker process."""

import os
import subprocess
import sys

import pytest

from tests.broker_process import ROOT, BrokerProcess

EXAMPLES = os.path.join(ROOT, "docs", "examples")


@pytest.fixture(scope="module")
def examples_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("examples") / "data").start()
    yield proc
    proc.stop()


def run(name, broker, *args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    result = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, name), broker.bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_examples_in_order(examples_broker):
    out = run("produce.py", examples_broker)
    assert out.count("example-orders[") == 3
    out = run("consume.py", examples_broker)
    assert out.strip().endswith("3 records")
    assert "b'alice'" in out and "b'{\"total\": 12}'" in out
    out = run("group_consumer.py", examples_broker)
    assert "assigned [TopicPartition(topic='example-orders', partition=0)" in out
    assert (
        sum(int(line.split(": ")[1].split()[0]) for line in out.splitlines() if ": " in line) == 3
    )
    out = run("transactions.py", examples_broker)
    assert sum(int(line.split()[1]) for line in out.splitlines() if "committed" in line) == 3
    assert "[b'{\"TOTAL\": 12}', b'{\"TOTAL\": 3}', b'{\"TOTAL\": 7}']" in out
    out = run("admin.py", examples_broker)
    assert "retention.ms = 7200000" in out
    assert "partitions: [0, 1]" in out
    assert "('example-billing', 'consumer')" in out
    out = run("blocking.py", examples_broker)
    assert "example-orders 3 partitions" in out


def test_every_example_is_tested_and_documented():
    text = open(os.path.join(ROOT, "docs", "client.rst"), encoding="utf-8").read()
    tested = open(__file__, encoding="utf-8").read()
    for name in os.listdir(EXAMPLES):
        if name.endswith(".py"):
            assert f"examples/{name}" in text, name
            assert f'"{name}"' in tested, name
