"""Fetch-response parsing for the consumer: batches to ConsumerRecords.

Kept apart from the consumer's state machine so it can be tested on bytes:
:func:`records_from` turns one partition's RECORDS bytes into
:class:`ConsumerRecord` tuples from a position on, skipping control batches,
records before the position (a compressed batch starts before it) and, for
``read_committed``, batches of transactions the response lists as aborted.
"""

from typing import NamedTuple

from pluglog.protocol.records import iter_batches


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
    for batch in iter_batches(data, verify_crc=check_crcs):
        last = batch.last_offset
        if last < position:
            continue
        while aborted and aborted[0]["first_offset"] <= last:
            aborting.add(aborted.pop(0)["producer_id"])
        next_position = last + 1
        if batch.is_control:
            # An abort or commit marker ends that producer's transaction.
            aborting.discard(batch.producer_id)
            continue
        if batch.is_transactional and batch.producer_id in aborting:
            continue
        ts_type = batch.timestamp_type
        batch_ts = batch.max_timestamp if ts_type == 1 else None
        for record in batch.records:
            if record.offset < position:
                continue
            key = record.key
            value = record.value
            out.append(
                ConsumerRecord(
                    topic,
                    partition,
                    record.offset,
                    record.timestamp if batch_ts is None else batch_ts,
                    ts_type,
                    key_deserializer.deserialize(topic, key) if key is not None else None,
                    value_deserializer.deserialize(topic, value),
                    record.headers,
                )
            )
    return out, next_position
