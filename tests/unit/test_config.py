"""Kafka-named configuration: defaults, overrides, validation."""

import pytest

from pluglog.config import BrokerConfig, TopicConfig, parse_settings, validate_topic_overrides
from pluglog.errors import ConfigError


def test_kafka_defaults():
    t = TopicConfig()
    assert t.segment_bytes == 1073741824
    assert t.retention_ms == 7 * 24 * 3600 * 1000
    assert t.max_message_bytes == 1048588
    assert t.cleanup_policy == "delete"


def test_overrides_and_to_kafka():
    t = TopicConfig().with_overrides({"retention.ms": "1000", "cleanup.policy": "delete,compact"})
    assert t.retention_ms == 1000
    assert t.cleanup_policy == "compact,delete"
    assert t.to_kafka()["retention.ms"] == "1000"
    assert t.to_kafka()["unclean.leader.election.enable"] == "false"


@pytest.mark.parametrize(
    "key,value",
    [
        ("segment.bytes", "10"),
        ("segment.bytes", "big"),
        ("retention.ms", "-2"),
        ("cleanup.policy", ""),
        ("message.timestamp.type", "WallClock"),
        ("not.a.key", "1"),
    ],
)
def test_bad_topic_config(key, value):
    with pytest.raises(ConfigError) as info:
        validate_topic_overrides({key: value})
    assert key in str(info.value)


def test_broker_settings_accept_broker_and_topic_names():
    config = parse_settings(
        {"log.segment.bytes": "2048", "retention.bytes": "100", "log.retention.hours": "2"},
        BrokerConfig(),
    )
    assert config.topic_defaults.segment_bytes == 2048
    assert config.topic_defaults.retention_bytes == 100
    assert config.topic_defaults.retention_ms == 7200000


def test_compression_type_takes_kafkas_values():
    for value in ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"):
        assert TopicConfig().with_overrides({"compression.type": value}).compression_type == value
    with pytest.raises(ConfigError, match="compression.type.*brotli"):
        validate_topic_overrides({"compression.type": "brotli"})


def test_group_consumer_migration_policy_takes_kafkas_values():
    assert BrokerConfig().group_consumer_migration_policy == "bidirectional"
    for value in ("disabled", "upgrade", "downgrade", "bidirectional"):
        config = parse_settings({"group.consumer.migration.policy": value}, BrokerConfig())
        assert config.group_consumer_migration_policy == value
    with pytest.raises(ConfigError) as info:
        parse_settings({"group.consumer.migration.policy": "sideways"}, BrokerConfig())
    assert str(info.value) == (
        "group.consumer.migration.policy: 'sideways' is not one of "
        "disabled, upgrade, downgrade, bidirectional"
    )
