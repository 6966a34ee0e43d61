"""Resource limits against the broker process: refused before any state is written.

Each case uses a real client (confluent-kafka's AdminClient) or raw sockets
where no client would send such a thing, checks the Kafka error the client
sees, and that the broker keeps serving and restarts on the same data dir.
"""

import json
import os

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from tests.broker_process import BrokerProcess
from tests.integration.clients import (
    consume_confluent,
    create_topic,
    make_records,
    produce_confluent,
)


def _error(future):
    with pytest.raises(KafkaException) as info:
        future.result(timeout=30)
    return info.value.args[0]


def _metadata(data_dir):
    with open(os.path.join(data_dir, "pluglog-metadata.json"), encoding="utf-8") as handle:
        return json.load(handle)["topics"]


def _round_trip(bootstrap, topic, total):
    """Produce 20 more records and read back all ``total`` the topic holds."""
    produce_confluent(bootstrap, topic, make_records(20, partitions=1))
    assert len(consume_confluent(bootstrap, topic, 1, total)) == total


def test_partition_caps_refuse_before_writing_metadata(tmp_path):
    broker = BrokerProcess(tmp_path / "data", settings={"max.broker.partitions": "100"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        create_topic(broker.bootstrap, "small", partitions=1)
        before = _metadata(broker.data_dir)
        dirs_before = sorted(os.listdir(broker.data_dir))

        # 100,000 partitions in one CreateTopics: Kafka's per-request cap.
        err = _error(admin.create_topics([NewTopic("huge", 100_000, 1)])["huge"])
        assert err.code() == KafkaError.POLICY_VIOLATION
        assert "Excessively large number of partitions per request" in err.str()

        # CreatePartitions to 2^31-1 (librdkafka refuses > 100,000 itself: raw request).
        with BlockingClient.from_bootstrap(broker.bootstrap) as client:
            body = {
                "topics": [{"name": "small", "count": 2**31 - 1, "assignments": None}],
                "timeout_ms": 30000,
                "validate_only": False,
            }
            (result,) = client.request(codec.CREATE_PARTITIONS, 1, body)["results"]
        assert result["error_code"] == KafkaError.POLICY_VIOLATION, result
        assert "2147483646 requested" in result["error_message"]

        # Under the per-request cap but over max.broker.partitions (100).
        err = _error(admin.create_topics([NewTopic("wide", 200, 1)])["wide"])
        assert err.code() == KafkaError.INVALID_PARTITIONS
        assert "max.broker.partitions" in err.str()
        err = _error(admin.create_partitions([NewPartitions("small", 150)])["small"])
        assert err.code() == KafkaError.INVALID_PARTITIONS

        # Several topics whose sum crosses the per-request cap: all refused.
        futures = admin.create_topics([NewTopic(f"many{i}", 6000, 1) for i in range(2)])
        for future in futures.values():
            assert _error(future).code() == KafkaError.POLICY_VIOLATION

        assert _metadata(broker.data_dir) == before
        assert sorted(os.listdir(broker.data_dir)) == dirs_before
        _round_trip(broker.bootstrap, "small", 20)
    finally:
        assert broker.alive()
        broker.stop()
    broker.start()
    try:
        _round_trip(broker.bootstrap, "small", 40)
    finally:
        broker.stop()
