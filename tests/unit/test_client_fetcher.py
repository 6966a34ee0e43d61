"""records_from: positions inside batches, control batches, aborted transactions."""

import struct

from pluglog.client.fetcher import records_from
from pluglog.protocol.records import Record, build_batch
from pluglog.serializers import BytesSerializer, StringSerializer

RAW = BytesSerializer()


def control(base_offset, producer_id, commit):
    # Control record key: version int16, type int16 (0 abort, 1 commit).
    key = struct.pack(">hh", 0, 1 if commit else 0)
    return build_batch(
        [Record(key, b"")],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )


def txn(base_offset, producer_id, values):
    return build_batch(
        [Record(None, v) for v in values],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )


def test_position_inside_a_compressed_batch():
    data = build_batch(
        [Record(b"k", b"a"), Record(b"k", b"b"), Record(b"k", b"c")],
        base_offset=10,
        compression="gzip",
    )
    records, nxt = records_from("t", 0, data, 11, RAW, RAW)
    assert [(r.offset, r.value) for r in records] == [(11, b"b"), (12, b"c")]
    assert nxt == 13


def test_deserializers_and_headers():
    data = build_batch([Record(b"k", "é".encode(), [("h", b"1")])], base_offset=0)
    (record,), _ = records_from("t", 3, data, 0, StringSerializer(), StringSerializer())
    assert (record.partition, record.key, record.value, record.headers) == (
        3,
        "k",
        "é",
        [("h", b"1")],
    )


def test_read_committed_drops_aborted_and_control_batches():
    data = (
        txn(0, 7, [b"aborted-1", b"aborted-2"])
        + txn(2, 8, [b"committed"])
        + control(3, 7, commit=False)
        + control(4, 8, commit=True)
        + build_batch([Record(None, b"plain")], base_offset=5)
    )
    aborted = [{"producer_id": 7, "first_offset": 0}]
    records, nxt = records_from("t", 0, data, 0, RAW, RAW, aborted=aborted)
    assert [r.value for r in records] == [b"committed", b"plain"]
    assert nxt == 6
    # read_uncommitted sees everything but the markers.
    records, _ = records_from("t", 0, data, 0, RAW, RAW)
    assert [r.value for r in records] == [b"aborted-1", b"aborted-2", b"committed", b"plain"]


def test_empty_answer_keeps_position():
    assert records_from("t", 0, None, 42, RAW, RAW) == ([], 42)
