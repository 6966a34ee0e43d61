"""Lookups by time across both tiers: the console's, and ListOffsets MAX_TIMESTAMP.

A real broker process with its console (``--http``), a real
``moto_server`` S3 and the real boto3 client, as in
test_tiered_storage.py, whose helpers these tests share. ListOffsets is
asked through kafka-python; the console over HTTP, as in
test_console_actions.py.
"""

import re
import time

import confluent_kafka
import kafka
import kafka.protocol.consumer.offsets
import pytest

from tests.broker_process import free_port
from tests.integration.clients import create_topic
from tests.integration.console_actions import ACTING, Browser, _wait_http
from tests.integration.test_cli import cli
from tests.integration.test_tiered_ops import earliest_local, lookups, new_bucket
from tests.integration.test_tiered_storage import (
    TOPIC_CONFIG,
    settled_segments,
    tiered_broker,
    wait_for,
)

pytestmark = pytest.mark.integration

STEP_MS = 10
COUNT = 3000


def produce_at(bootstrap, topic, stamps):
    """One record per timestamp in ``stamps``, in order, many to a batch."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 50}
    )
    for i, stamp in enumerate(stamps):
        producer.produce(topic, value=b"v%05d-" % i + b"x" * 90, partition=0, timestamp=stamp)
        producer.poll(0)
    assert producer.flush(30) == 0


def tier_away(broker, topic, below):
    """Shrink the topic's local retention until its local log starts past ``below``."""
    cli(
        broker,
        "topics",
        "alter-config",
        topic,
        "--set",
        f"local.retention.bytes={TOPIC_CONFIG['local.retention.bytes']}",
    )
    wait_for(lambda: earliest_local(broker.bootstrap, topic) > below, what="local retention")
    # Uploads and local retention settle: the local start stays put while we ask.
    settled_segments(broker, topic)
    return earliest_local(broker.bootstrap, topic)


def committed(bootstrap, group, topic):
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (found,) = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=10)
        return found.offset
    finally:
        consumer.close()


def test_console_lookups_by_time_answer_as_list_offsets_in_both_tiers(moto, tmp_path):
    bucket = new_bucket(moto)
    http = free_port()
    broker = tiered_broker(tmp_path, moto.url, bucket, **ACTING)
    broker.extra_args += ["--http", f"tcp:{http}:interface=127.0.0.1"]
    broker.start()
    try:
        _wait_http(broker, http)
        topic = "timed"
        config = {**TOPIC_CONFIG, "local.retention.bytes": str(100 << 20)}
        create_topic(broker.bootstrap, topic, partitions=1, config=config)
        first_ms = int(time.time() * 1000) - 3_600_000  # within retention.ms
        produce_at(broker.bootstrap, topic, [first_ms + i * STEP_MS for i in range(COUNT)])
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "by-time"}
        )
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 5)], asynchronous=False)
        consumer.close()
        local_start = tier_away(broker, topic, 800)
        # Between two records, mid-batch: one in a remote segment, one in the local log.
        remote_at = first_ms + 317 * STEP_MS - 3
        local_at = first_ms + (COUNT - 33) * STEP_MS - 3
        answers = lookups(broker.bootstrap, topic, [remote_at, local_at])
        assert answers[remote_at] == (317, first_ms + 317 * STEP_MS)
        assert answers[local_at] == (COUNT - 33, first_ms + (COUNT - 33) * STEP_MS)
        assert 317 < local_start <= COUNT - 33

        browser = Browser(broker.http)
        for at in (remote_at, local_at):
            want = answers[at][0]
            status, _url, page = browser.get(f"/console/topics/{topic}/0?time={at}&limit=2")
            assert status == 200, page
            assert f'<span id="time-offset">{want}</span>' in page, at
            # The browser reads both tiers: the records from the answer on.
            shown = re.findall(r'class="record-link">(\d+)<', page)
            assert shown == [str(want), str(want + 1)], at
            assert f'<span id="local-start-offset">{local_start}</span>' in page

            page, (status, _url, done) = browser.confirm(
                f"/console/actions/reset-offsets?group=by-time&topic={topic}&to=time&value={at}"
            )
            assert f'<td class="new">{want}</td>' in page, page
            assert status == 200, done
            assert committed(broker.bootstrap, "by-time", topic) == want, at
    finally:
        broker.stop()


def max_timestamp(bootstrap, topic):
    """ListOffsets MAX_TIMESTAMP (v7+, through kafka-python): (offset, timestamp)."""
    spec = kafka.protocol.consumer.offsets.OffsetSpec
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    tp = kafka.TopicPartition(topic, 0)
    try:
        found = admin.list_partition_offsets({tp: spec.MAX_TIMESTAMP})[tp]
        return found.offset, found.timestamp
    finally:
        admin.close()


def test_max_timestamp_is_found_in_a_remote_segment(moto, tmp_path):
    bucket = new_bucket(moto)
    broker = tiered_broker(tmp_path, moto.url, bucket).start()
    try:
        topic = "peaked"
        config = {**TOPIC_CONFIG, "local.retention.bytes": str(100 << 20)}
        create_topic(broker.bootstrap, topic, partitions=1, config=config)
        first_ms = int(time.time() * 1000) - 3_600_000  # within retention.ms
        peak = first_ms + 10 * COUNT * STEP_MS
        stamps = [first_ms + i * STEP_MS for i in range(COUNT)]
        # The largest timestamp, first at offset 150 (mid-batch), again in the
        # local tail: the first record with it is the answer.
        stamps[150] = stamps[COUNT - 20] = peak
        produce_at(broker.bootstrap, topic, stamps)
        assert max_timestamp(broker.bootstrap, topic) == (150, peak)
        local_start = tier_away(broker, topic, 800)
        assert local_start < COUNT - 20
        # Offset 150's segment is only in the bucket now.
        assert max_timestamp(broker.bootstrap, topic) == (150, peak)
    finally:
        broker.stop()
