"""Straight-line encoder for the Fetch response body, v4-v17.

A consumer without fetch sessions (librdkafka opens none) lists every
partition it is assigned in every Fetch, and the broker answers each one:
with 10,000 partitions the generic encoder (:mod:`.compiler`, a closure
call per field, struct and array) costs about 2.4 µs per partition, most of
the answer's cost when few partitions have records. This module writes the
same bytes with one precompiled struct per partition (a few hundred ns).

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

from pluglog.protocol.primitives import encode_uvarint

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
    """Append the Fetch response ``body`` (as the handler builds it) to
    ``out``; raises :class:`NotFast` (or KeyError, TypeError, ...) for a
    body the generic encoder must write."""
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
                    append(records)
                append(b"\x00")  # the partition's tag buffer
                continue
            size = -1 if records is None else _size(records)
            if preferred:
                append(_TAIL_V11(part["preferred_read_replica"], size))
            else:
                append(_TAIL_V4(size))
            if records is not None:
                append(records)
        if flexible:
            append(b"\x00")  # the topic's tag buffer
    if flexible:
        append(tags)
