"""Fetch-response parsing for the consumer: batches to ConsumerRecords.

Kept apart from the consumer's state machine so it can be tested on bytes:
:func:`records_from` turns one partition's RECORDS bytes into
:class:`ConsumerRecord` tuples from a position on, skipping control batches,
records before the position (a compressed batch starts before it) and, for
``read_committed``, batches of transactions the response lists as aborted.
"""

import struct
from typing import NamedTuple

from pluglog.client.codec import decode_consumer_records
from pluglog.errors import CorruptRecordError, InvalidRecordError
from pluglog.protocol.codecs import decompress
from pluglog.protocol.crc import crc32c
from pluglog.serializers import BytesSerializer

# The magic-2 batch header (kafka-protocol.md §2): base offset, length,
# leader epoch, magic, crc, attributes, last offset delta, base and max
# timestamps, producer id and epoch, base sequence, record count.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_HEADER_SIZE = 61
_CRC_START = 21


class ConsumerRecord(NamedTuple):
    """One consumed record (aiokafka's ConsumerRecord, without the checksum)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: object
    value: object
    headers: list


def records_from(
    topic,
    partition,
    data,
    position,
    key_deserializer,
    value_deserializer,
    aborted=None,
    check_crcs=True,
):
    """``(records, next_position)`` from the RECORDS bytes of a fetch answer.

    ``aborted``: the response's aborted_transactions (read_committed), a list
    of ``{"producer_id", "first_offset"}``; their data batches are dropped
    until the producer's abort marker."""
    out = []
    if not data:
        return out, position
    aborted = sorted(aborted or (), key=lambda a: a["first_offset"])
    aborting = set()
    next_position = position
    view = memoryview(data)
    total = len(view)
    at = 0
    identity = _is_identity(key_deserializer), _is_identity(value_deserializer)
    # Batch headers in Python (one per batch), records in C (codec module).
    while total - at >= _HEADER_SIZE:
        fields = _HEADER.unpack_from(view, at)
        size = fields[1] + 12
        if at + size > total:
            break  # a fetch answer may end with a truncated batch
        if fields[3] != 2:
            raise InvalidRecordError(f"unsupported record batch magic {fields[3]}")
        if size < _HEADER_SIZE:
            raise InvalidRecordError(f"batch length {fields[1]} is too small")
        start, at = at, at + size
        last = fields[0] + fields[6]
        if last < position:
            continue
        if check_crcs and crc32c(view[start + _CRC_START : at]) != fields[4]:
            raise CorruptRecordError("record batch CRC mismatch")
        attributes, producer_id = fields[5], fields[9]
        while aborted and aborted[0]["first_offset"] <= last:
            aborting.add(aborted.pop(0)["producer_id"])
        next_position = last + 1
        if attributes & 0x20:
            # An abort or commit marker ends that producer's transaction.
            aborting.discard(producer_id)
            continue
        if attributes & 0x10 and producer_id in aborting:
            continue
        ts_type = (attributes >> 3) & 1
        payload = decompress(attributes & 0x07, view[start + _HEADER_SIZE : at])
        records = decode_consumer_records(
            payload,
            fields[12],
            fields[0],
            fields[7],
            position,
            ConsumerRecord,
            topic,
            partition,
            ts_type,
            fields[8] if ts_type == 1 else None,
        )
        if identity != (True, True):
            records = [_deserialize(r, key_deserializer, value_deserializer) for r in records]
        out += records
    return out, next_position


def _is_identity(deserializer):
    return type(deserializer) is BytesSerializer


def _deserialize(record, key_deserializer, value_deserializer):
    topic, key = record.topic, record.key
    return record._replace(
        key=key_deserializer.deserialize(topic, key) if key is not None else None,
        value=value_deserializer.deserialize(topic, record.value),
    )
