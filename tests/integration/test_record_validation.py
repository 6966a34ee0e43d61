"""Hostile batches with a valid header and CRC are refused at produce time.

Each batch here passes every header check (magic, lengths, CRC-32C) and is
wrong inside: garbage records, an unknown codec, a gzip flag on plain data, a
negative record length, a record count that does not match, a decompression
bomb. The broker must answer the Kafka error, append nothing, keep serving,
and restart cleanly. Both produce paths are driven: the one-partition fast
lane and the general handler (two partitions in one request).
"""

import struct
import zlib

import pytest

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from pluglog.errors import CORRUPT_MESSAGE, INVALID_RECORD, NONE
from pluglog.protocol.records import Record, build_batch, encode_varint, iter_records
from pluglog.storage.crc import crc32c
from tests.broker_process import BrokerProcess
from tests.integration.clients import create_topic

_HEADER = struct.Struct(">qiibIhiqqqhii")
TOPIC = "validated"


def raw_batch(body, count, last_delta=None, attributes=0, crc=None):
    """A magic-2 batch around ``body`` with a correct CRC (unless ``crc``)."""
    if last_delta is None:
        last_delta = count - 1
    header = bytearray(
        _HEADER.pack(0, 49 + len(body), 0, 2, 0, attributes, last_delta, 0, 0, -1, -1, -1, count)
    )
    if crc is None:
        crc = crc32c(body, crc32c(memoryview(header)[21:]))
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + body


def plain_records(count):
    return build_batch([Record(b"k%d" % i, b"v" * 20) for i in range(count)])[61:]


def gzip_bomb(megabytes):
    """A gzip member of ``megabytes`` MiB of zeros (about 1 KiB per MiB)."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * (1 << 20)
    return b"".join([deflater.compress(zeros) for _ in range(megabytes)] + [deflater.flush()])


HOSTILE = {
    "garbage records": (raw_batch(b"\xff" * 300, 3), INVALID_RECORD),
    "codec 7": (raw_batch(plain_records(3), 3, attributes=7), INVALID_RECORD),
    "gzip flag on plain data": (raw_batch(plain_records(3), 3, attributes=1), INVALID_RECORD),
    "negative record length": (
        raw_batch(encode_varint(-20) + plain_records(2)[1:], 2),
        INVALID_RECORD,
    ),
    "count above the records": (raw_batch(plain_records(3), 5), INVALID_RECORD),
    "count below the records": (raw_batch(plain_records(3), 2), INVALID_RECORD),
    "count disagrees with lastOffsetDelta": (
        raw_batch(plain_records(3), 3, last_delta=4),
        INVALID_RECORD,
    ),
    "offset deltas out of order": (
        raw_batch(build_batch([Record(b"k", b"v", offset_delta=d) for d in (0, 2, 1)])[61:], 3),
        INVALID_RECORD,
    ),
    "unused attribute bits": (raw_batch(plain_records(3), 3, attributes=0x80), INVALID_RECORD),
    "trailing bytes after the records": (
        raw_batch(plain_records(3) + b"\0\0", 3),
        INVALID_RECORD,
    ),
    "decompression bomb": (raw_batch(gzip_bomb(80), 1, attributes=1), INVALID_RECORD),
    "bad CRC (unchanged answer)": (raw_batch(plain_records(3), 3, crc=1), CORRUPT_MESSAGE),
}


def produce(client, partitions, version=8):
    """Produce ``{partition: batch}`` in one request; ``{partition: (code, message)}``."""
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [
            {
                "name": TOPIC,
                "partition_data": [
                    {"index": index, "records": batch} for index, batch in partitions.items()
                ],
            }
        ],
    }
    response = client.request(codec.PRODUCE, version, body)
    return {
        part["index"]: (part["error_code"], part.get("error_message"))
        for part in response["responses"][0]["partition_responses"]
    }


def end_offsets(client):
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [{"partition_index": p, "timestamp": -1} for p in (0, 1)],
            }
        ],
    }
    response = client.request(codec.LIST_OFFSETS, 5, body)
    return [p["offset"] for p in response["topics"][0]["partitions"]]


def read_all(client, partition):
    parts = client.fetch(TOPIC, {partition: 0})
    return list(iter_records(parts[0]["records"] or b""))


@pytest.fixture(scope="module")
def validating_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("validation") / "data").start()
    create_topic(proc.bootstrap, TOPIC, partitions=2)
    yield proc
    proc.stop()


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_batch_is_refused_and_nothing_is_written(validating_broker, case):
    batch, expected = HOSTILE[case]
    good = build_batch([Record(b"ok", b"fine")])
    with BlockingClient("127.0.0.1", validating_broker.port) as client:
        before = end_offsets(client)
        # The fast lane: one partition, Produce v8 (and v3).
        for version in (8, 3):
            code, message = produce(client, {0: batch}, version)[0]
            assert code == expected, (case, version, message)
            assert message or version < 8
        # The general handler: two partitions, one good.
        answers = produce(client, {0: batch, 1: good})
        assert answers[0][0] == expected, (case, answers)
        assert answers[1][0] == NONE
        after = end_offsets(client)
        assert after == [before[0], before[1] + 1]
        # Still serving on the same connection: a good batch lands.
        assert produce(client, {0: good})[0][0] == NONE
    assert validating_broker.alive()


def test_refusals_survive_a_restart(tmp_path):
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(proc.bootstrap, TOPIC, partitions=2)
        with BlockingClient("127.0.0.1", proc.port) as client:
            for batch, expected in HOSTILE.values():
                assert produce(client, {0: batch})[0][0] == expected
            assert produce(client, {0: build_batch([Record(b"a", b"1"), Record(b"b", b"2")])}) == {
                0: (NONE, None)
            }
        proc.stop()
        log = proc.log()
        assert "Traceback" not in log
        proc.start()
        with BlockingClient("127.0.0.1", proc.port) as client:
            assert end_offsets(client) == [2, 0]
            assert [(r.key, r.value) for r in read_all(client, 0)] == [(b"a", b"1"), (b"b", b"2")]
    finally:
        proc.stop()
