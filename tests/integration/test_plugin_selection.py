"""A third-party retention policy, pip-installed, chosen by name in a real broker.

The example retention policy (tests/data/example_retention, a package of its
own) is installed with pip into a
private target directory; ``twistd pluglog --retention example-keep-two``
finds it through its entry point and deletes every segment but the two
newest, whatever their age; an unknown name stops twistd in one line.
"""

import os
import subprocess
import sys
import time

import confluent_kafka

from tests.broker_process import ROOT, TWISTD, BrokerProcess
from tests.integration.clients import create_topic
from tests.unit.test_plugins import EXAMPLE_RETENTION


def _installed(tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
        + ["--target", str(target), EXAMPLE_RETENTION],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return str(target)


def test_retention_policy_plugin_selected_by_name(tmp_path, monkeypatch):
    site = _installed(tmp_path)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")]))
    )
    result = subprocess.run(
        [sys.executable, "-c", TWISTD, "-n", "pluglog", "--data-dir", str(tmp_path / "x")]
        + ["--retention", "nope"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    (line,) = [ln for ln in (result.stdout + result.stderr).splitlines() if "'nope'" in ln]
    assert "--retention" in line and "delete" in line and "example-keep-two" in line

    settings = {"log.retention.check.interval.ms": "200"}
    broker = BrokerProcess(
        tmp_path / "data", settings=settings, extra_args=["--retention", "example-keep-two"]
    ).start()
    try:
        create_topic(broker.bootstrap, "kept", partitions=1, config={"segment.bytes": "100"})
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(10):
            producer.produce("kept", b"x" * 60 + b"%d" % i, partition=0)
            producer.flush(10)  # one batch, so one segment, each
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"}
        )
        deadline = time.monotonic() + 20
        low = high = 0
        while time.monotonic() < deadline:
            low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition("kept", 0))
            if low >= 8:
                break
            time.sleep(0.2)
        consumer.close()
        # retention.ms is a week: the built-in policy would have kept all ten.
        assert (low, high) == (8, 10), broker.log()[-2000:]
    finally:
        broker.stop()
