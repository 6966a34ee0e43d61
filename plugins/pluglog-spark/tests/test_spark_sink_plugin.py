"""The broker-side Spark sink: ``[sink:NAME] plugin = spark`` in the broker config.

A real broker is started with ``--config``; the plugin (installed, found via
the ``pluglog`` entry point group) must start a Spark child that copies the
topic into a date-partitioned Parquet table matching a Spark read of the
topic, relay its progress into the broker log, come back after its child is
killed, and go away with the broker.
"""

import json
import os
import re
import signal
import time
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq
from spark_helpers import create_topic, make_records, produce
from test_spark_read import as_tuples, reader

from tests.broker_process import BrokerProcess


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def table_rows(path):
    """Rows in the files the Spark file sink has committed (those its
    ``_spark_metadata`` log adds), from their Parquet footers. Polling with a
    Spark job every half second instead took a core from the sink's own
    Spark child on a loaded 2-core machine (the wait after the child's
    restart ran out at 120 s once in CI)."""
    log_dir = os.path.join(path, "_spark_metadata")
    try:
        names = [n for n in os.listdir(log_dir) if not n.startswith(".")]
    except FileNotFoundError:
        return 0
    files = set()
    for name in names:  # a compacted entry repeats the earlier ones
        with open(os.path.join(log_dir, name)) as handle:
            entries = [json.loads(line) for line in handle.read().splitlines()[1:] if line]
        for entry in entries:
            local = unquote(urlparse(entry["path"]).path)
            if entry["action"] == "add":
                files.add(local)
            else:
                files.discard(local)
    return sum(pq.read_metadata(f).num_rows for f in files)


def child_pids(broker):
    return [
        int(p) for p in re.findall(r"spark sink archive: started child pid (\d+)", broker.log())
    ]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sink_plugin_copies_topic_and_survives_child_kill(spark, tmp_path):
    table = tmp_path / "table"
    config = tmp_path / "broker.ini"
    config.write_text(
        "[broker]\n"
        "num.partitions = 2\n"
        "\n"
        "[sink:archive]\n"
        "plugin = spark\n"
        "topics = events\n"
        f"path = {table}\n"
        "format = parquet\n"
        "trigger.interval = 1\n"
        f"checkpoint = {tmp_path / 'checkpoint'}\n"
        "restart.min.delay = 0.5\n"
    )
    broker = BrokerProcess(tmp_path / "data", extra_args=["--config", str(config)]).start()
    try:
        create_topic(broker.bootstrap, "events", 2)
        # 100 s apart: 1,000 records span two UTC days.
        first = [(k, v, h, ts + i * 100_000) for i, (k, v, h, ts) in enumerate(make_records(1000))]
        produce(broker.bootstrap, "events", first, 2)

        wait_for(lambda: table_rows(str(table)) >= 1000, 120, "the first 1,000 rows")
        copied = spark.read.parquet(str(table))
        topic = reader(spark, broker, subscribe="events")
        assert sorted(os.listdir(table)) == [
            "_spark_metadata",
            "date=2026-01-01",
            "date=2026-01-02",
        ]
        assert as_tuples(copied.drop("date")) == as_tuples(topic)
        assert re.search(r"spark sink archive: batch \d+ read \d+ rows, end offsets", broker.log())

        (pid,) = child_pids(broker)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: len(child_pids(broker)) == 2, 60, "the restarted child")
        assert "spark sink archive: child exited" in broker.log()

        more = [(k, v, h, ts + 50_000) for k, v, h, ts in make_records(500, start=1000)]
        produce(broker.bootstrap, "events", more, 2)
        wait_for(lambda: table_rows(str(table)) >= 1500, 120, "all 1,500 rows")
        copied = spark.read.parquet(str(table))
        topic = reader(spark, broker, subscribe="events")
        assert copied.count() == 1500
        assert copied.select("partition", "offset").distinct().count() == 1500
        assert as_tuples(copied.drop("date")) == as_tuples(topic)
    finally:
        # twistd re-raises the SIGTERM it shut down on, hence -15.
        assert broker.stop() in (0, -signal.SIGTERM)
    restarted = child_pids(broker)[-1]
    wait_for(lambda: not alive(restarted), 30, "the child to exit with the broker")
