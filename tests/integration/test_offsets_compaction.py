"""__consumer_offsets is compacted: 100,000 offset commits, a restart loads in under 1 s."""

import glob
import os
import time

from pluglog import errors
from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from pluglog.protocol.records import iter_batches
from tests.broker_process import BrokerProcess
from tests.integration.clients import create_topic

PARTITIONS = 100
ROUNDS = 1000  # x PARTITIONS = 100,000 offset commits
GROUP = "g-100k"


def commit(client, topic, offset):
    body = {
        "group_id": GROUP,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "retention_time_ms": -1,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": offset + p,
                        "committed_metadata": "",
                    }
                    for p in range(PARTITIONS)
                ],
            }
        ],
    }
    response = client.request(codec.OFFSET_COMMIT, 2, body)
    assert {p["error_code"] for p in response["topics"][0]["partitions"]} == {0}


def fetch_offsets(client, topic):
    body = {
        "group_id": GROUP,
        "topics": [{"name": topic, "partition_indexes": list(range(PARTITIONS))}],
    }
    return client.request(codec.OFFSET_FETCH, 3, body)


def stored_records(data_dir):
    count = 0
    for path in glob.glob(os.path.join(data_dir, "__consumer_offsets-*", "*.log")):
        with open(path, "rb") as handle:
            count += sum(len(b.records) for b in iter_batches(handle.read()))
    return count


def test_100k_commits_then_restart_loads_fast(tmp_path):
    settings = {
        "log.cleaner.backoff.ms": "300",
        "offsets.topic.num.partitions": "1",
        "offsets.topic.segment.bytes": str(256 * 1024),
        "log.roll.ms": "2500",
    }
    data_dir = str(tmp_path / "data")
    broker = BrokerProcess(data_dir, settings=settings).start()
    topic = "committed"
    try:
        create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
        started = time.monotonic()
        with BlockingClient.from_bootstrap(broker.bootstrap) as client:
            for i in range(ROUNDS):
                commit(client, topic, i * 1000)
            elapsed = time.monotonic() - started
            time.sleep(2.6)  # log.roll.ms: the next commit rolls the active segment
            commit(client, topic, ROUNDS * 1000)
        print(f"\n{ROUNDS * PARTITIONS + PARTITIONS} offset commits in {elapsed:.1f} s")
        deadline = time.monotonic() + 60
        while stored_records(data_dir) > 2 * PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.5)
        count = stored_records(data_dir)
        print(f"__consumer_offsets holds {count} record(s) after cleaning")
        # About one record per partition per group: the survivors of the
        # cleaned segments plus the last commit in the active segment.
        assert count <= 2 * PARTITIONS
    finally:
        broker.stop()

    broker = BrokerProcess(data_dir, port=broker.port, settings=settings)
    started = time.monotonic()
    broker.start()
    try:
        with BlockingClient.from_bootstrap(broker.bootstrap) as client:
            while True:
                response = fetch_offsets(client, topic)
                if response["error_code"] != errors.COORDINATOR_LOAD_IN_PROGRESS:
                    break
                time.sleep(0.01)
            loaded = time.monotonic() - started
        print(f"restart to loaded offsets: {loaded:.2f} s (process start included)")
        assert response["error_code"] == 0
        parts = response["topics"][0]["partitions"]
        assert {p["partition_index"]: p["committed_offset"] for p in parts} == {
            p: ROUNDS * 1000 + p for p in range(PARTITIONS)
        }
        assert loaded < 1.0 + _process_start(broker)
    finally:
        broker.stop()


def _process_start(broker):
    """Seconds a broker process needs to listen on an empty data dir (Python
    and Twisted start-up), measured on this machine now: the load itself must
    take under a second on top of it."""
    probe = BrokerProcess(os.path.join(broker.data_dir, "..", "probe"))
    started = time.monotonic()
    probe.start()
    took = time.monotonic() - started
    probe.stop()
    return took
