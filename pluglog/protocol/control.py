"""Transaction control records: the COMMIT and ABORT markers.

A marker is a v2 batch with the transactional and control attribute bits set,
the producer's id and epoch, no sequence, and one record whose key is
``version int16 (0), type int16 (0 abort, 1 commit)`` and whose value is
``version int16 (0), coordinator_epoch int32`` (Kafka's ControlRecordType and
EndTransactionMarker). Markers are never compressed.
"""

import struct

from pluglog.protocol.records import Record, build_batch, iter_batches

ABORT = 0
COMMIT = 1

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def marker_batch(
    producer_id, producer_epoch, commit, coordinator_epoch, timestamp, partition_leader_epoch=0
):
    """The bytes of one marker batch (base offset 0; the log assigns it)."""
    key = _KEY.pack(0, COMMIT if commit else ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [Record(key, value, (), timestamp)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_timestamp=timestamp,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def parse_marker(record_key, record_value=None):
    """``(type, coordinator_epoch)`` of a control record; type is COMMIT, ABORT
    or another control type Kafka may add (callers ignore those)."""
    if record_key is None or len(record_key) < 4:
        raise ValueError("control record key shorter than 4 bytes")
    _version, kind = _KEY.unpack_from(record_key)
    epoch = -1
    if record_value is not None and len(record_value) >= 6:
        epoch = _VALUE.unpack_from(record_value)[1]
    return kind, epoch


def markers_in(data):
    """Yield ``(base_offset, producer_id, producer_epoch, type)`` for every
    marker batch in ``data`` (bytes of whole batches); other batches skipped."""
    for batch in iter_batches(data, verify_crc=False):
        if batch.is_control and batch.records:
            kind, _epoch = parse_marker(batch.records[0].key, batch.records[0].value)
            yield batch.base_offset, batch.producer_id, batch.producer_epoch, kind
