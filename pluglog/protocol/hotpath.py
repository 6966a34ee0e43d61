"""Straight-line codecs for the request every producer sends per batch: Produce v3-v8.

The generic codec (:mod:`.compiler`) walks one closure per field and array,
about 12 µs per Produce round trip in CPython. Produce runs once per producer
round trip, so its request decoder and response encoder are written out here
with precompiled structs (about a quarter of that). They are drop-ins:

* :func:`decode_produce_request` returns exactly the dict the generic decoder
  returns (``records`` as zero-copy memoryview slices). It does no error
  reporting of its own: on anything that is not a well-formed body it returns
  ``None`` and the caller runs the generic decoder, which raises the usual
  :class:`~pluglog.protocol.errors.DecodeError` with the usual message.
* :func:`encode_produce_response` writes the same bytes as the generic
  encoder for the bodies the Produce handler builds.

tests/unit/test_protocol_hotpath.py holds both to the generic codec on
random, edge-case and truncated input. Only non-flexible versions live here:
the broker advertises Produce up to v8 (shared protocol notes).
"""

import struct

from pluglog.protocol import primitives as _p

#: Produce versions served by this module (v3 = first record-batch version,
#: v9 = first flexible version).
PRODUCE_VERSIONS = range(3, 9)

_INT16 = struct.Struct(">h").unpack_from
_INT32 = struct.Struct(">i").unpack_from
_ACKS_TIMEOUT_COUNT = struct.Struct(">hii").unpack_from
_INDEX_SIZE = struct.Struct(">ii").unpack_from
_DECODE_ERRORS = (struct.error, UnicodeDecodeError, IndexError, ValueError)


class _NotFast(Exception):  # noqa: N818 - control flow, never leaves this module
    """The body needs the generic decoder (malformed or unusual)."""


def _string(buf, pos):
    (n,) = _INT16(buf, pos)
    pos += 2
    end = pos + n
    if n < 0 or end > len(buf):
        raise _NotFast
    return str(buf[pos:end], "utf-8"), end


def decode_produce_request(buf, pos):
    """``(body, end)`` for a Produce v3-v8 request body at ``buf[pos:]``, or
    ``None`` when the generic decoder must decide. ``buf`` is a memoryview."""
    size = len(buf)
    try:
        (n,) = _INT16(buf, pos)
        if n == -1:
            transactional_id = None
            pos += 2
        else:
            transactional_id, pos = _string(buf, pos)
        acks, timeout_ms, topic_count = _ACKS_TIMEOUT_COUNT(buf, pos)
        pos += 10
        if topic_count < 0 or topic_count > size - pos:
            return None
        topic_data = []
        for _ in range(topic_count):
            name, pos = _string(buf, pos)
            (count,) = _INT32(buf, pos)
            pos += 4
            if count < 0 or count > size - pos:
                return None
            partition_data = []
            for _ in range(count):
                index, length = _INDEX_SIZE(buf, pos)
                pos += 8
                if length == -1:
                    records = None
                else:
                    end = pos + length
                    if length < 0 or end > size:
                        return None
                    records = buf[pos:end]
                    pos = end
                partition_data.append({"index": index, "records": records})
            topic_data.append({"name": name, "partition_data": partition_data})
    except (_NotFast, *_DECODE_ERRORS):
        return None
    body = {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topic_data": topic_data,
    }
    return body, pos


_PARTITION_V3 = struct.Struct(">ihqq").pack  # index, error, base offset, append time
_PARTITION_V5 = struct.Struct(">ihqqq").pack  # + log start offset
_COUNT = struct.Struct(">i").pack


def encode_produce_response(version, body, out):
    """Append the Produce response ``body`` (as built by the handler) to ``out``."""
    write_string = _p.write_string
    write_nullable_string = _p.write_nullable_string
    responses = body["responses"]
    out.append(_COUNT(len(responses)))
    for topic in responses:
        write_string(out, topic["name"])
        partitions = topic["partition_responses"]
        out.append(_COUNT(len(partitions)))
        for part in partitions:
            if version >= 5:
                out.append(
                    _PARTITION_V5(
                        part["index"],
                        part["error_code"],
                        part["base_offset"],
                        part.get("log_append_time_ms", -1),
                        part.get("log_start_offset", -1),
                    )
                )
            else:
                out.append(
                    _PARTITION_V3(
                        part["index"],
                        part["error_code"],
                        part["base_offset"],
                        part.get("log_append_time_ms", -1),
                    )
                )
            if version >= 8:
                errors = part.get("record_errors") or ()
                out.append(_COUNT(len(errors)))
                for error in errors:
                    out.append(_COUNT(error["batch_index"]))
                    write_nullable_string(out, error.get("batch_index_error_message"))
                write_nullable_string(out, part.get("error_message"))
    out.append(_COUNT(body.get("throttle_time_ms", 0)))
