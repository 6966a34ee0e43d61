"""Broker-side schema validation (Confluent Server's topic configs).

``confluent.value.schema.validation=true`` (and ``confluent.key.schema.validation``)
on a topic makes its leader refuse, with INVALID_RECORD, any produced batch
holding a record whose value (key) does not start with the magic byte and a
schema id the broker's registry has registered. Null values (tombstones) and
null keys pass. Checking is per record, so it costs a decode of the batch;
topics without the configs pay nothing: :class:`~pluglog.broker.partition.Partition`
holds ``schema_check = None`` and tests that once per batch.
"""

from pluglog.errors import InvalidRecordError
from pluglog.protocol.records import parse_batch
from pluglog.serialization.framing import HEADER_SIZE, MAGIC_BYTE

VALUE_KEY = "confluent.value.schema.validation"
KEY_KEY = "confluent.key.schema.validation"


class SchemaCheck:
    """Validates the records of one produced batch for one topic."""

    __slots__ = ("broker", "keys", "topic", "values")

    def __init__(self, broker, topic, keys, values):
        self.broker = broker
        self.topic = topic
        self.keys = keys
        self.values = values

    def _bad(self, what, offset_delta, data, ids):
        if data is None:
            return None
        if len(data) < HEADER_SIZE or data[0] != MAGIC_BYTE:
            return f"record {offset_delta}: {what} is not framed with a schema id"
        schema_id = int.from_bytes(data[1:HEADER_SIZE], "big")
        if schema_id not in ids:
            return (
                f"record {offset_delta}: {what} has schema id {schema_id}, which is not registered"
            )
        return None

    def __call__(self, records):
        registry = self.broker.schema_registry
        if registry is None:
            raise InvalidRecordError(
                f"{self.topic} requires schema validation but this broker serves no schema "
                "registry (start it with --http)"
            )
        ids = registry.ids
        batch = parse_batch(records, verify_crc=False)
        for delta, record in enumerate(batch.records):
            problem = (self.values and self._bad("value", delta, record.value, ids)) or (
                self.keys and self._bad("key", delta, record.key, ids)
            )
            if problem:
                raise InvalidRecordError(f"{self.topic}: {problem}")


def schema_check_for(broker, topic, topic_config):
    """The partition's ``schema_check``: None unless the topic asks for one."""
    keys = topic_config.confluent_key_schema_validation
    values = topic_config.confluent_value_schema_validation
    if not keys and not values:
        return None
    return SchemaCheck(broker, topic, keys, values)
