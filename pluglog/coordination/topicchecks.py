"""The checks of topic requests that every coordinator makes alike.

Topic names, "already exists", partition counts and topic config overrides
are refused with the same Kafka errors and messages whether the local or the
ZooKeeper coordinator serves CreateTopics, CreatePartitions or a config
change; replica placement is each coordinator's own.
"""

import re

from pluglog.config import validate_topic_overrides
from pluglog.errors import (
    ConfigError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
)

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


def validate_topic_name(name):
    """Raise InvalidTopicError unless ``name`` is a legal Kafka topic name."""
    if not name or name in (".", ".."):
        raise InvalidTopicError(f"illegal topic name {name!r}")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicError(f"topic name longer than {MAX_TOPIC_NAME} characters")
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'"
        )


def refuse_existing(name, topics):
    """TopicExistsError if ``name`` is one of ``topics``."""
    if name in topics:
        raise TopicExistsError(f"topic {name!r} already exists")


def check_partition_count(count):
    if count < 1:
        raise InvalidPartitionsError(f"number of partitions must be >= 1, got {count}")


def topic_configs(configs):
    """The validated overrides, or InvalidConfigError naming the bad one."""
    try:
        return validate_topic_overrides(configs or {})
    except ConfigError as exc:
        raise InvalidConfigError(str(exc)) from None
