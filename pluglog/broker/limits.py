"""Partition-count limits, checked before any metadata is written.

Kafka's KRaft controller refuses a CreateTopics or CreatePartitions request
whose partitions add up to more than 10,000 with POLICY_VIOLATION and the
message "Excessively large number of partitions per request." (the whole
request, every topic). pluglog makes that cap configurable as
``max.partitions.per.request`` and adds the broker-wide cap proposed by
KIP-578, ``max.broker.partitions``, refused with INVALID_PARTITIONS: every
partition costs memory and, while active, file descriptors, so a single
request must not be able to create more than the broker can hold open.

Both checks run before the coordinator is asked to change anything, so a
refused request leaves the metadata and the data directory untouched.
"""

from pluglog.errors import InvalidPartitionsError, PolicyViolationError

PER_REQUEST_MESSAGE = "Excessively large number of partitions per request."


def requested_partitions(broker, topics):
    """Total partitions a CreateTopics request's ``topics`` would create.

    -1 means the broker's num.partitions; explicit assignments count one
    partition each (Kafka counts them the same way); other non-positive
    counts add nothing here (they are refused per topic later)."""
    total = 0
    for topic in topics:
        if topic.get("assignments"):
            total += len(topic["assignments"])
        elif topic["num_partitions"] == -1:
            total += broker.config.num_partitions
        elif topic["num_partitions"] > 0:
            total += topic["num_partitions"]
    return total


def check_per_request(broker, total):
    """Raise PolicyViolationError if one request asks for more than the cap."""
    cap = broker.config.max_partitions_per_request
    if total > cap:
        raise PolicyViolationError(
            f"{PER_REQUEST_MESSAGE} ({total} requested, max.partitions.per.request is {cap})"
        )


def broker_partition_count(broker):
    """Partitions this broker's metadata holds now (all topics, internal ones too)."""
    return sum(meta.num_partitions for meta in broker.coordinator.topics().values())


def check_new_partitions(broker, added):
    """Raise if adding ``added`` partitions breaks either cap."""
    check_per_request(broker, added)
    cap = broker.config.max_broker_partitions
    current = broker_partition_count(broker)
    if current + added > cap:
        raise InvalidPartitionsError(
            f"adding {added} partition(s) to the {current} this broker holds would exceed "
            f"max.broker.partitions ({cap})"
        )
