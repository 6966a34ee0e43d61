"""Broker-side schema validation (Confluent Server's topic configs).

``confluent.value.schema.validation=true`` (and ``confluent.key.schema.validation``)
on a topic makes its leader refuse, with INVALID_RECORD, any produced batch
holding a record whose value (key) does not start with the magic byte and a
schema id the broker's registry has registered, naming each such record by
its index in the batch (KIP-467's ``record_errors``). Null values (tombstones) and
null keys pass. Checking is per record (a walk over each record's key and
value lengths, headers skipped; compressed batches are decompressed), so it
costs per-record work;
topics without the configs pay nothing: :class:`~pluglog.broker.partition.Partition`
holds ``schema_check = None`` and tests that once per batch.
"""

from pluglog.errors import InvalidRecordError, records_refused
from pluglog.protocol.codecs import decompress
from pluglog.protocol.records import decode_varint, decode_varlong
from pluglog.serialization.framing import HEADER_SIZE, MAGIC_BYTE

_BATCH_HEADER = 61  # v2 record batch header bytes
_ATTRIBUTES_AT = 21
_COUNT_AT = 57


def _varint(data, pos):
    # One- and two-byte varints (values below 8192: lengths, offset deltas)
    # are nearly all of them; longer ones take the general decoder.
    byte = data[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    second = data[pos + 1]
    if second < 0x80:
        number = (byte & 0x7F) | (second << 7)
        return (number >> 1) ^ -(number & 1), pos + 2
    return decode_varint(data, pos)


def _varlong(data, pos):
    byte = data[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    return decode_varlong(data, pos)


def iter_keys_values(records):
    """Yield ``(key, value)`` memoryviews (or None) of every record in the
    v2 batch ``records``, skipping headers and building no Record objects."""
    view = memoryview(records)
    attributes = int.from_bytes(view[_ATTRIBUTES_AT : _ATTRIBUTES_AT + 2], "big")
    count = int.from_bytes(view[_COUNT_AT : _COUNT_AT + 4], "big", signed=True)
    data = memoryview(decompress(attributes & 0x07, view[_BATCH_HEADER:]))
    pos = 0
    try:
        for _ in range(count):
            length, pos = _varint(data, pos)
            end = pos + length
            _ts, pos = _varlong(data, pos + 1)  # + 1: the unused attributes byte
            _delta, pos = _varint(data, pos)
            key_len, pos = _varint(data, pos)
            key = None if key_len < 0 else data[pos : pos + key_len]
            pos += max(key_len, 0)
            value_len, pos = _varint(data, pos)
            value = None if value_len < 0 else data[pos : pos + value_len]
            if length < 0 or end > len(data) or pos + max(value_len, 0) > end:
                raise InvalidRecordError("record length runs past the end of the batch")
            yield key, value
            pos = end
    except IndexError:
        raise InvalidRecordError("record runs past the end of the batch") from None


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

    def _bad(self, what, data, ids):
        if data is None:
            return None
        if len(data) < HEADER_SIZE or data[0] != MAGIC_BYTE:
            return f"{what} is not framed with a schema id"
        schema_id = int.from_bytes(data[1:HEADER_SIZE], "big")
        if schema_id not in ids:
            return f"{what} has schema id {schema_id}, which is not registered"
        return None

    def __call__(self, records):
        registry = self.broker.schema_registry
        if registry is None:
            raise InvalidRecordError(
                f"{self.topic} requires schema validation but this broker serves no schema "
                "registry (start it with --http)"
            )
        ids = registry.ids
        refused = []
        for index, (key, value) in enumerate(iter_keys_values(records)):
            problem = (self.values and self._bad("value", value, ids)) or (
                self.keys and self._bad("key", key, ids)
            )
            if problem:
                refused.append((index, problem))
        if refused:
            # Every bad record is named by its index in the batch (KIP-467).
            raise records_refused(self.topic, refused)


def schema_check_for(broker, topic, topic_config):
    """The partition's ``schema_check``: None unless the topic asks for one."""
    keys = topic_config.confluent_key_schema_validation
    values = topic_config.confluent_value_schema_validation
    if not keys and not values:
        return None
    return SchemaCheck(broker, topic, keys, values)
