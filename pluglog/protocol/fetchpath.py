"""Straight-line codecs for Fetch v4-v17: the request decoder and the response encoder.

A consumer without fetch sessions (librdkafka opens none) lists every
partition it is assigned in every Fetch, and the broker answers each one:
with 10,000 partitions the generic encoder (:mod:`.compiler`, a closure
call per field, struct and array) costs about 2.4 µs per partition, most of
the answer's cost when few partitions have records. This module writes the
same bytes with one precompiled struct per partition (a few hundred ns),
and :func:`decode_fetch_request` reads the request's partition list with
one ``struct.iter_unpack`` per topic (the generic decoder: about 1.6 µs per
partition).

:func:`decode_fetch_request` returns exactly the dict the generic decoder
returns, defaults included, or ``None`` for anything else (a tagged field,
forgotten topics, a malformed body), and the generic decoder then decodes
it or raises the usual :class:`~pluglog.protocol.errors.DecodeError`.

It is a drop-in for the bodies the Fetch handler builds, and a pure
shortcut: :func:`encode_fetch_response` raises :class:`NotFast` for
anything it does not write exactly as the generic encoder would (a tagged
field such as a diverging epoch, a current leader or node endpoints; a
missing key the generic encoder would default; a value of another type),
and the caller then runs the generic encoder, which writes it or raises the
usual :class:`~pluglog.protocol.errors.EncodeError`.
tests/unit/test_protocol_fetchpath.py holds the two to byte equality.
"""

import struct
import uuid

from pluglog.protocol.errors import DecodeError
from pluglog.protocol.primitives import encode_uvarint, read_uvarint

#: Fetch response versions written here (the broker serves v4-v17).
FETCH_VERSIONS = range(4, 18)
_FIRST_FLEXIBLE = 12
_FIRST_TOPIC_ID = 13

_INT32 = struct.Struct(">i").pack
_INT16 = struct.Struct(">h").pack
_HEAD_V7 = struct.Struct(">ihi").pack  # throttle, error, session id
_ABORTED = struct.Struct(">qq").pack
# index, error, high watermark, last stable offset; v5+ log start offset.
_PART_V4 = struct.Struct(">ihqq").pack
_PART_V5 = struct.Struct(">ihqqq").pack
# v11+ ends with the preferred read replica, then the records' int32 length.
_TAIL_V4 = struct.Struct(">i").pack  # records length
_TAIL_V11 = struct.Struct(">ii").pack  # preferred read replica, records length
_TAGGED = ("diverging_epoch", "current_leader", "snapshot_id")
_BUFFERS = (bytes, bytearray, memoryview)


class NotFast(Exception):  # noqa: N818 - control flow: the generic encoder decides
    """The body needs the generic encoder."""


def _size(records):
    kind = records.__class__
    if kind is bytes or kind is bytearray:
        return len(records)
    if kind is memoryview:
        return records.nbytes
    size = getattr(records, "size", None)  # a file range
    if size.__class__ is not int:
        raise NotFast
    return size


def _topic_id(value):
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, bytes | bytearray) and len(value) == 16:
        return bytes(value)
    raise NotFast


def encode_fetch_response(version, body, out):
    """The parts of the Fetch response ``body`` (as the handler builds it)
    after the bytes in ``out`` (the response header): runs of bytes joined,
    file ranges as their own parts, as :func:`pluglog.protocol._coalesce`
    leaves the generic encoder's. Raises :class:`NotFast` (or KeyError,
    TypeError, ...) for a body the generic encoder must write."""
    flexible = version >= _FIRST_FLEXIBLE
    tags = b"\x00"  # the body's tag buffer: empty
    if version >= 16:
        endpoints = body.get("node_endpoints")
        if endpoints is not None:
            if endpoints.__class__ is not list or endpoints:
                raise NotFast
            # An empty list differs from the default (null): sent, as tag 0.
            tags = b"\x01\x00\x01\x01"
    if version >= 7:
        out.append(_HEAD_V7(body["throttle_time_ms"], body["error_code"], body["session_id"]))
    else:
        out.append(_INT32(body["throttle_time_ms"]))
    responses = body["responses"]
    out.append(encode_uvarint(len(responses) + 1) if flexible else _INT32(len(responses)))
    parts = []
    head = _PART_V5 if version >= 5 else _PART_V4
    preferred = version >= 11
    by_id = version >= _FIRST_TOPIC_ID
    append = out.append
    for topic in responses:
        if by_id:
            append(_topic_id(topic["topic_id"]))
        else:
            name = topic["topic"].encode("utf-8")
            append(encode_uvarint(len(name) + 1) if flexible else _INT16(len(name)))
            append(name)
        partitions = topic["partitions"]
        append(encode_uvarint(len(partitions) + 1) if flexible else _INT32(len(partitions)))
        for part in partitions:
            if flexible:
                for key in _TAGGED:
                    if part.get(key) is not None:
                        raise NotFast
            if version >= 5:
                append(
                    head(
                        part["partition_index"],
                        part["error_code"],
                        part["high_watermark"],
                        part["last_stable_offset"],
                        part["log_start_offset"],
                    )
                )
            else:
                append(
                    head(
                        part["partition_index"],
                        part["error_code"],
                        part["high_watermark"],
                        part["last_stable_offset"],
                    )
                )
            aborted = part["aborted_transactions"]
            if aborted is None:
                append(b"\x00" if flexible else b"\xff\xff\xff\xff")
            else:
                append(encode_uvarint(len(aborted) + 1) if flexible else _INT32(len(aborted)))
                for entry in aborted:
                    append(_ABORTED(entry["producer_id"], entry["first_offset"]))
                    if flexible:
                        append(b"\x00")
            records = part["records"]
            if flexible:
                if preferred:
                    append(_INT32(part["preferred_read_replica"]))
                if records is None:
                    append(b"\x00")
                else:
                    append(encode_uvarint(_size(records) + 1))
                    if records.__class__ in _BUFFERS:
                        append(records)
                    else:  # a file range, sent as it is
                        parts.append(b"".join(out))
                        parts.append(records)
                        out = []
                        append = out.append
                append(b"\x00")  # the partition's tag buffer
                continue
            size = -1 if records is None else _size(records)
            if preferred:
                append(_TAIL_V11(part["preferred_read_replica"], size))
            else:
                append(_TAIL_V4(size))
            if records is None:
                continue
            if records.__class__ in _BUFFERS:
                append(records)
            else:
                parts.append(b"".join(out))
                parts.append(records)
                out = []
                append = out.append
        if flexible:
            append(b"\x00")  # the topic's tag buffer
    if flexible:
        append(tags)
    if out:
        parts.append(b"".join(out))
    return parts


# -- the request ---------------------------------------------------------------

_ZERO_ID = uuid.UUID(int=0)
_R_INT16 = struct.Struct(">h").unpack_from
_R_INT32 = struct.Struct(">i").unpack_from
# replica id (v4-v14), max wait, min bytes, max bytes, isolation level;
# v7+ session id and epoch.
_REQ_V4 = struct.Struct(">iiiib")
_REQ_V7 = struct.Struct(">iiiibii")
_REQ_V15 = struct.Struct(">iiibii")
# One partition: partition, [current leader epoch v9+], fetch offset,
# [last fetched epoch v12+], [log start offset v5+], partition max bytes;
# v12+ its tag buffer (one byte: only an empty one is read here).
_PARTS = {
    4: struct.Struct(">iqi"),
    5: struct.Struct(">iqqi"),
    9: struct.Struct(">iiqqi"),
    12: struct.Struct(">iiqiqiB"),
}
_DECODE_ERRORS = (struct.error, UnicodeDecodeError, IndexError, ValueError, DecodeError)


def _part_struct(version):
    if version >= 12:
        return _PARTS[12]
    if version >= 9:
        return _PARTS[9]
    return _PARTS[5] if version >= 5 else _PARTS[4]


def _count(buf, pos, flexible):
    """An array length, or -1 for a null or impossible one."""
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    return _R_INT32(buf, pos)[0], pos + 4


def _string(buf, pos, size, flexible):
    """``(text, end)`` of a (compact) non-null string at ``pos``."""
    if flexible:
        n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        (n,) = _R_INT16(buf, pos)
        pos += 2
    end = pos + n
    if n < 0 or end > size:
        raise NotFast
    return str(buf[pos:end], "utf-8"), end


def _partitions(rows, version):
    if version >= 12:
        out = []
        for index, leader_epoch, offset, fetched_epoch, start, max_bytes, tags in rows:
            if tags:
                raise NotFast
            out.append(
                {
                    "partition": index,
                    "current_leader_epoch": leader_epoch,
                    "fetch_offset": offset,
                    "last_fetched_epoch": fetched_epoch,
                    "log_start_offset": start,
                    "partition_max_bytes": max_bytes,
                    "replica_directory_id": _ZERO_ID,
                }
            )
        return out
    if version >= 9:
        return [
            {
                "partition": index,
                "current_leader_epoch": leader_epoch,
                "fetch_offset": offset,
                "log_start_offset": start,
                "partition_max_bytes": max_bytes,
                "last_fetched_epoch": -1,
                "replica_directory_id": _ZERO_ID,
            }
            for index, leader_epoch, offset, start, max_bytes in rows
        ]
    if version >= 5:
        return [
            {
                "partition": index,
                "fetch_offset": offset,
                "log_start_offset": start,
                "partition_max_bytes": max_bytes,
                "current_leader_epoch": -1,
                "last_fetched_epoch": -1,
                "replica_directory_id": _ZERO_ID,
            }
            for index, offset, start, max_bytes in rows
        ]
    return [
        {
            "partition": index,
            "fetch_offset": offset,
            "partition_max_bytes": max_bytes,
            "current_leader_epoch": -1,
            "last_fetched_epoch": -1,
            "log_start_offset": -1,
            "replica_directory_id": _ZERO_ID,
        }
        for index, offset, max_bytes in rows
    ]


def decode_fetch_request(buf, pos, version):
    """``(body, end)`` for a Fetch v4-v17 request body at ``buf[pos:]`` (a
    memoryview), or ``None`` when the generic decoder must decide."""
    try:
        return _decode(buf, pos, version)
    except (NotFast, *_DECODE_ERRORS):
        return None


def _decode(buf, pos, version):
    size = len(buf)
    flexible = version >= _FIRST_FLEXIBLE
    replica_id = -1
    session_id, session_epoch = 0, -1
    if version >= 15:
        max_wait, min_bytes, max_bytes, isolation, session_id, session_epoch = (
            _REQ_V15.unpack_from(buf, pos)
        )
        pos += _REQ_V15.size
    elif version >= 7:
        replica_id, max_wait, min_bytes, max_bytes, isolation, session_id, session_epoch = (
            _REQ_V7.unpack_from(buf, pos)
        )
        pos += _REQ_V7.size
    else:
        replica_id, max_wait, min_bytes, max_bytes, isolation = _REQ_V4.unpack_from(buf, pos)
        pos += _REQ_V4.size
    by_id = version >= _FIRST_TOPIC_ID
    part = _part_struct(version)
    width = part.size
    count, pos = _count(buf, pos, flexible)
    if count < 0 or count > size - pos:
        raise NotFast
    topics = []
    for _ in range(count):
        if by_id:
            end = pos + 16
            if end > size:
                raise NotFast
            topic_id, name = uuid.UUID(bytes=bytes(buf[pos:end])), ""
        else:
            name, end = _string(buf, pos, size, flexible)
            topic_id = _ZERO_ID
        pos = end
        n, pos = _count(buf, pos, flexible)
        end = pos + n * width
        if n < 0 or end > size:
            raise NotFast
        partitions = _partitions(part.iter_unpack(buf[pos:end]), version)
        pos = end
        if flexible:
            if buf[pos]:
                raise NotFast  # the topic's tagged fields
            pos += 1
        topics.append({"topic": name, "partitions": partitions, "topic_id": topic_id})
    rack_id = ""
    if version >= 7:
        n, pos = _count(buf, pos, flexible)
        if n != 0:
            raise NotFast  # forgotten topics (a session's): the generic decoder
    if version >= 11:
        rack_id, pos = _string(buf, pos, size, flexible)
    if flexible:
        if buf[pos]:
            raise NotFast  # cluster id, replica state: the generic decoder
        pos += 1
    body = {
        "replica_id": replica_id,
        "max_wait_ms": max_wait,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation,
        "session_id": session_id,
        "session_epoch": session_epoch,
        "topics": topics,
        "forgotten_topics_data": [],
        "rack_id": rack_id,
        "cluster_id": None,
        "replica_state": None,
    }
    return body, pos
