"""Tiered storage as an operator meets it: ``topics describe``, credentials, the copy quota.

A real broker process, a real ``moto_server`` S3 and the real boto3 client
(tests/moto_s3.py), as in test_tiered_storage.py, whose helpers these
tests share. The credentials tests run moto with its IAM-like access
control on (``INITIAL_NO_AUTH_ACTION_COUNT``), so a wrong secret or a
revoked key is refused as AWS would refuse it.
"""

import json
import os
import uuid

import kafka
import kafka.protocol.consumer.offsets
import pytest

from tests.integration.clients import create_topic, make_records
from tests.integration.test_cli import cli
from tests.integration.test_tiered_storage import (
    TOPIC_CONFIG,
    latest_segments,
    local_bytes,
    metadata_states,
    produce,
    remote_log_bytes,
    settled_segments,
    tiered_broker,
)
from tests.moto_s3 import DUMMY_CREDENTIALS, MotoServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    saved = {key: os.environ.get(key) for key in DUMMY_CREDENTIALS}
    os.environ.update(DUMMY_CREDENTIALS)  # inherited by the broker processes
    server = MotoServer(str(tmp_path_factory.mktemp("moto"))).start()
    yield server
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def new_bucket(moto):
    name = f"pluglog-{uuid.uuid4().hex[:12]}"
    moto.client().create_bucket(Bucket=name)
    return name


def earliest_local(bootstrap, topic):
    spec = kafka.protocol.consumer.offsets.OffsetSpec
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    tp = kafka.TopicPartition(topic, 0)
    try:
        return admin.list_partition_offsets({tp: spec.EARLIEST_LOCAL})[tp].offset
    finally:
        admin.close()


def test_topics_describe_shows_local_and_remote_sizes_and_offsets(moto, tmp_path):
    bucket = new_bucket(moto)
    broker = tiered_broker(tmp_path, moto.url, bucket).start()
    try:
        topic = "described"
        create_topic(broker.bootstrap, topic, partitions=1, config=TOPIC_CONFIG)
        records = [(0, k, v, h) for _p, k, v, h in make_records(3000, partitions=1)]
        produce(broker.bootstrap, topic, records)
        settled_segments(broker, topic)
        # The ground truth, each from its own source: the bucket, the
        # broker's data dir, the metadata topic and ListOffsets.
        uploaded = [s for s in latest_segments(metadata_states(broker.bootstrap)).values() if s]
        uploaded = [s for s in uploaded if s.state == "COPY_SEGMENT_FINISHED"]
        assert len(uploaded) >= 3
        remote_end = max(s.end_offset for s in uploaded)
        first_local = earliest_local(broker.bootstrap, topic)
        assert 0 < first_local <= remote_end + 1

        described = json.loads(cli(broker, "topics", "describe", topic, "--json").stdout)
        (part,) = described["partitions"]
        assert part["start_offset"] == 0
        assert part["end_offset"] == len(records)
        assert part["local_start_offset"] == first_local
        assert part["local_bytes"] == local_bytes(broker, topic)
        assert part["remote_start_offset"] == 0
        assert part["remote_end_offset"] == remote_end
        assert part["remote_bytes"] == remote_log_bytes(moto, bucket, topic)

        out = cli(broker, "topics", "describe", topic).stdout
        assert (
            f"Start: 0\tEnd: {len(records)}\tLocalStart: {first_local}"
            f"\tLocalBytes: {part['local_bytes']}\tRemoteStart: 0\tRemoteEnd: {remote_end}"
            f"\tRemoteBytes: {part['remote_bytes']}"
        ) in out

        # An untiered topic's line and document stay as they were.
        create_topic(broker.bootstrap, "plain", partitions=1)
        plain = json.loads(cli(broker, "topics", "describe", "plain", "--json").stdout)
        assert "remote_bytes" not in plain["partitions"][0]
        assert "RemoteBytes" not in cli(broker, "topics", "describe", "plain").stdout
    finally:
        broker.stop()
