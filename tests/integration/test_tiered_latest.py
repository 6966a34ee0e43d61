"""ListOffsets v9 LATEST_TIERED (-5, KIP-1005) against a real broker and a real S3.

A real broker process, a real ``moto_server`` S3 and the real boto3 client
(tests/moto_s3.py), as in test_tiered_storage.py, whose helpers these
tests share. The request goes out two ways: raw v8/v9 frames through
pluglog's blocking client (so the leader epoch, the timestamp and the
error code of the wire answer are seen), and kafka-python's admin client
(``OffsetSpec.LATEST_TIERED``, which needs v9 from the broker). The
expected offset comes from ``__remote_log_metadata`` (the last finished
segment's end offset), not from the broker's answer.
"""

import json

import kafka
import kafka.protocol.consumer.offsets
import pytest

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from pluglog.errors import NONE, OFFSET_NOT_AVAILABLE, UNSUPPORTED_VERSION
from tests.integration.clients import create_topic, make_records
from tests.integration.test_cli import cli
from tests.integration.test_tiered_ops import new_bucket
from tests.integration.test_tiered_storage import (
    TOPIC_CONFIG,
    latest_segments,
    metadata_states,
    produce,
    settled_segments,
    tiered_broker,
    wait_for,
)

pytestmark = pytest.mark.integration

LATEST_TIERED = -5


def list_offsets(broker, topic, timestamp, version=9):
    """The wire answer for partition 0 of ``topic``: ``(error, offset,
    leader epoch, timestamp)``."""
    with BlockingClient.from_bootstrap(broker.bootstrap) as client:
        resp = client.request(
            codec.LIST_OFFSETS,
            version,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}
                ],
            },
        )
    (entry,) = resp["topics"][0]["partitions"]
    return entry["error_code"], entry["offset"], entry["leader_epoch"], entry["timestamp"]


def settled_answer(broker, topic):
    """The -5 answer once the tier's metadata is read (OFFSET_NOT_AVAILABLE,
    retriable, until then)."""
    answers = []

    def answered():
        answers.append(list_offsets(broker, topic, LATEST_TIERED))
        assert answers[-1][0] in (NONE, OFFSET_NOT_AVAILABLE), answers[-1]
        return answers[-1][0] == NONE

    wait_for(answered, what=f"ListOffsets -5 on {topic}")
    return answers[-1]


def admin_latest_tiered(bootstrap, topic):
    spec = kafka.protocol.consumer.offsets.OffsetSpec
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    tp = kafka.TopicPartition(topic, 0)
    try:
        return admin.list_partition_offsets({tp: spec.LATEST_TIERED})[tp]
    finally:
        admin.close()


def test_latest_tiered_answers_the_last_uploaded_offset_as_kafka(moto, tmp_path):
    bucket = new_bucket(moto)
    broker = tiered_broker(tmp_path, moto.url, bucket).start()
    try:
        # An untiered topic: Kafka's "no remote log" answer, offset and epoch -1.
        create_topic(broker.bootstrap, "plain", partitions=1)
        produce(broker.bootstrap, "plain", [(0, b"k", b"v", [])] * 10)
        assert list_offsets(broker, "plain", LATEST_TIERED) == (NONE, -1, -1, -1)
        plain = admin_latest_tiered(broker.bootstrap, "plain")
        assert (plain.offset, plain.timestamp, plain.leader_epoch) == (-1, -1, None)

        # A tiered topic before its first upload (a few records, no closed
        # segment): what Kafka answers while highestOffsetInRemoteStorage is -1.
        topic = "tiered"
        create_topic(broker.bootstrap, topic, partitions=1, config=TOPIC_CONFIG)
        produce(broker.bootstrap, topic, [(0, b"k", b"v", [])] * 10)
        assert settled_answer(broker, topic) == (NONE, -1, -1, -1)

        # -5 is v9's: an older version gets UNSUPPORTED_VERSION for it, as
        # -4 does before v8.
        assert list_offsets(broker, topic, LATEST_TIERED, version=8)[0] == UNSUPPORTED_VERSION
        assert list_offsets(broker, topic, -4, version=7)[0] == UNSUPPORTED_VERSION

        # Segments upload: the answer is the last finished segment's end
        # offset and the leader epoch it was written in.
        records = [(0, k, v, h) for _p, k, v, h in make_records(3000, partitions=1)]
        produce(broker.bootstrap, topic, records)
        settled_segments(broker, topic)
        uploaded = [s for s in latest_segments(metadata_states(broker.bootstrap)).values() if s]
        uploaded = [s for s in uploaded if s.state == "COPY_SEGMENT_FINISHED"]
        assert len(uploaded) >= 3
        last = max(uploaded, key=lambda s: s.end_offset)
        total = 10 + len(records)
        assert 0 < last.end_offset < total - 1  # the active segment stays local
        epoch = last.leader_epochs[-1][0]
        assert list_offsets(broker, topic, LATEST_TIERED) == (NONE, last.end_offset, epoch, -1)
        answer = admin_latest_tiered(broker.bootstrap, topic)
        assert (answer.offset, answer.timestamp) == (last.end_offset, -1)
        assert answer.leader_epoch == epoch
        # v9 answers the other specs as v8 did.
        assert list_offsets(broker, topic, -1)[:2] == (NONE, total)
        assert list_offsets(broker, topic, -2)[:2] == (NONE, 0)

        # The operator's view agrees: RemoteEnd is the latest tiered offset.
        described = json.loads(cli(broker, "topics", "describe", topic, "--json").stdout)
        assert described["partitions"][0]["remote_end_offset"] == last.end_offset
    finally:
        broker.stop()
