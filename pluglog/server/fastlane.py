"""The produce fast lane: one-partition Produce v3-v11 from frame bytes to response bytes.

Almost every Produce request a real producer sends has one topic and one
partition (librdkafka sends one request per partition batch it has ready),
acks=1 or acks=-1 and no transactional id. For that shape this module does in
one function what the general path does in five layers (header parse,
generic body decode into dicts, :class:`RequestContext`, the Produce handler,
response dicts and their encoder): it reads the fields with precompiled
structs, appends through the same :meth:`Partition.append` and packs the
response directly.

Why it exists: on the live broker most of a produce round trip is spent with
cold CPU caches (the client and the kernel run between two requests), and
then every layer, dict and function touched costs several times its warm
micro-benchmark figure. bench/RESULTS.md ("produce fast lane") has the
before/after numbers.

It is a pure shortcut, never a different behaviour:

* :func:`produce_fast` returns ``None`` for anything that is not exactly
  that shape (several topics or partitions, acks=0 or invalid acks, a
  transactional id, a body that is not one whole v2 batch, trailing bytes,
  a client id that is not UTF-8, acks=all on a replicated partition, ...).
  The caller then runs the general path, which answers or refuses the
  frame as it always did.
* It applies the general path's rules through the same pieces
  (``one_batch``, ``Partition.append``) and answers errors (unknown
  partition, CRC mismatch, too large, out-of-order sequence, ...) with the
  general path's result dict and encoder; only the success answer is packed
  here. tests/unit/test_server_fastlane.py holds the two paths to byte
  equality on valid, invalid and random frames.

The flexible versions (v9-v11: compact strings and arrays, tag buffers)
have their own parse (:func:`_py_flex_shape`, in C too) and answer; a request
with any tagged field, in its header or body, is left to the general path.
librdkafka >= 2.5 sends v10, so this is the shape most producers use.
"""

import struct

from twisted.logger import Logger

from pluglog import protocol as codec
from pluglog.errors import FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, KafkaError
from pluglog.protocol.hotpath import encode_produce_response
from pluglog.protocol.primitives import read_uvarint
from pluglog.server.handlers.produce import error_result, one_batch

#: Produce versions the fast lane takes: v3 (record batches) to v11.
FAST_VERSIONS = range(3, 12)
_FIRST_FLEXIBLE = 9
_MOVED = (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH)

_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_INT16 = struct.Struct(">h").unpack_from
_ACKS_TIMEOUT_TOPICS = struct.Struct(">hii").unpack_from
_PARTS_INDEX_SIZE = struct.Struct(">iii").unpack_from
_SIZE_CORRELATION_TOPICS = struct.Struct(">iii")  # frame size, correlation id, topic count 1
_CORRELATION = struct.Struct(">i")
# After the topic name: partition count (1), index, error code, base offset,
# log append time; v5+ log start offset; v8+ record error count 0 and a null
# error message; then throttle time.
_TAIL_V3 = struct.Struct(">iihqqi")
_TAIL_V5 = struct.Struct(">iihqqqi")
_TAIL_V8 = struct.Struct(">iihqqqihi")
# Flexible (v9+): after the compact topic name, the compact partition array
# (1 entry), index, error code, base offset, log append time, log start
# offset, an empty record error array, a null error message, the partition's
# and the topic's empty tag buffers, throttle time and the body's tag buffer.
_FLEX_HEAD = struct.Struct(">iib")  # frame size, correlation id, header tags
_FLEX_TAIL = struct.Struct(">bihqqqbbbbib")
_ACKS_TIMEOUT = struct.Struct(">hi").unpack_from
_INDEX = struct.Struct(">i").unpack_from

log = Logger()


def produce_fast(broker, buf, send=None, metrics=None):
    """The whole response frame (size prefix included) for a one-partition
    Produce v3-v8 request payload ``buf``, or ``None`` for the general path.

    With ``send`` (a callable taking that frame), the frame goes to it
    instead, as early as the log allows (``Partition.append``'s ``answer``:
    once the batch is written, before the log's bookkeeping), and the
    return value is ``True``.

    ``metrics`` (a :class:`~pluglog.metrics.recorder.RequestMetrics`) counts
    an error answer's code; the caller times the request, and the records and
    bytes in are counted by the partition per batch.

    The caller has checked that ``buf`` holds api key 0 and a version in 3-11.
    """
    shape = _produce_shape(buf)
    if shape is None:
        return None
    version, correlation_id, acks, name, name_at, name_end, index, records_at = shape
    if buf[records_at + 22] & 0x10:
        return None  # a transactional batch: verified on the general path
    name_field = buf[name_at:name_end]
    # v9+: the partition's, topic's and body's tag buffers follow the records.
    records = buf[records_at:] if version < _FIRST_FLEXIBLE else buf[records_at:-3]
    answered = []

    def answer(first_offset, log_append_time, log_start_offset):
        answered.append(True)
        send(
            _ok_frame(
                version,
                correlation_id,
                name_field,
                index,
                first_offset,
                log_append_time,
                log_start_offset,
            )
        )

    try:
        part = broker.partition(name, index)
        if acks == -1 and part.replicated:
            return None  # acks=all waits for followers: the general path's delayed answer
        if send is None:
            info = part.append(records, broker.now_ms(), acks)
        else:
            info = part.append(records, broker.now_ms(), acks, answer=answer)
    except KafkaError as exc:
        if answered:
            # The bookkeeping after an early answer failed: the client has its
            # acknowledgement (the batch is written); a second answer would
            # break the connection's framing.
            log.failure("after answering produce to {t}-{i}", t=name, i=index)
            return True
        if version >= 10 and exc.error_code in _MOVED:
            # Nothing was written; the general path adds KIP-951's leader
            # hint with the endpoints of the client's listener.
            return None
        if metrics is not None:
            metrics.error(0, exc.error_code)
        frame = _error_frame(version, correlation_id, name, index, exc)
        if send is None:
            return frame
        send(frame)
        return True
    if answered:
        return True
    frame = _ok_frame(
        version,
        correlation_id,
        name_field,
        index,
        info.first_offset,
        info.log_append_time,
        info.log_start_offset,
    )
    if send is None:
        return frame
    send(frame)
    return True


def _py_produce_shape(buf):
    """The fast lane's parse of a Produce v3-v8 payload: ``None`` unless it
    has the fast lane's shape, else ``(version, correlation_id, acks, name,
    name_field_start, name_end, index, records_start)``. The reference for
    (and the fallback of) ``pluglog._recordwalk.produce_shape``."""
    size = len(buf)
    if size >= 10 and _INT16(buf, 2)[0] >= _FIRST_FLEXIBLE:
        return _py_flex_shape(buf)
    try:
        _, version, correlation_id, n = _HEADER.unpack_from(buf, 0)
        if n >= 0:
            pos = 10 + n
            if pos > size:
                return None
            str(buf[10:pos], "utf-8")  # the general path refuses a bad client id
        elif n == -1:
            pos = 10
        else:
            return None
        if _INT16(buf, pos)[0] != -1:
            return None  # transactional: the general path says no
        acks, _timeout, topics = _ACKS_TIMEOUT_TOPICS(buf, pos + 2)
        pos += 12
        (n,) = _INT16(buf, pos)
        start = pos + 2
        pos = start + n
        if topics != 1 or (acks != 1 and acks != -1) or n < 0 or pos > size:
            return None
        name = str(buf[start:pos], "utf-8")
        name_end = pos
        partitions, index, length = _PARTS_INDEX_SIZE(buf, pos)
        pos += 12
        if partitions != 1 or pos + length != size:
            return None
        if not one_batch(buf[pos:]):
            return None  # the general path's INVALID_RECORD
    except (struct.error, UnicodeDecodeError):
        return None
    return version, correlation_id, acks, name, start - 2, name_end, index, pos


try:
    # Parsed in C: on the live broker, with cold caches, this parse cost
    # ~10 us per request in Python, on the way to the produce answer.
    from pluglog._recordwalk import produce_shape as _produce_shape
except ImportError:  # pragma: no cover - a checkout without build_ext
    _produce_shape = _py_produce_shape


def _py_flex_shape(buf):
    """:func:`_py_produce_shape` for the flexible versions (v9+): compact
    strings and arrays, no tagged fields anywhere."""
    size = len(buf)
    try:
        (n,) = _INT16(buf, 8)
        if n >= 0:
            pos = 10 + n
            if pos > size:
                return None
            str(buf[10:pos], "utf-8")
        elif n == -1:
            pos = 10
        else:
            return None
        if buf[pos] != 0 or buf[pos + 1] != 0:
            return None  # header tags, or a transactional id: the general path
        acks, _timeout = _ACKS_TIMEOUT(buf, pos + 2)
        pos += 8
        if buf[pos] != 2 or (acks != 1 and acks != -1):
            return None  # not exactly one topic
        name_at = pos + 1
        length, start = read_uvarint(buf, name_at)
        end = start + length - 1
        if length == 0 or end > size:
            return None
        name = str(buf[start:end], "utf-8")
        if buf[end] != 2:
            return None  # not exactly one partition
        (index,) = _INDEX(buf, end + 1)
        length, records_at = read_uvarint(buf, end + 5)
        records_end = records_at + length - 1
        # Then the partition's, the topic's and the body's empty tag buffers.
        if length == 0 or records_end + 3 != size or bytes(buf[records_end:]) != b"\0\0\0":
            return None
        if not one_batch(buf[records_at:records_end]):
            return None
    except (struct.error, UnicodeDecodeError, IndexError, ValueError, codec.DecodeError):
        return None
    (version,) = _INT16(buf, 2)
    (correlation_id,) = _CORRELATION.unpack_from(buf, 4)
    return version, correlation_id, acks, name, name_at, end, index, records_at


def _ok_frame(
    version, correlation_id, name_field, index, first_offset, log_append_time, log_start_offset
):
    if version >= _FIRST_FLEXIBLE:
        tail = _FLEX_TAIL.pack(
            2, index, 0, first_offset, log_append_time, log_start_offset, 1, 0, 0, 0, 0, 0
        )
        head = _FLEX_HEAD.pack(6 + len(name_field) + len(tail), correlation_id, 0)
        return b"".join((head, b"\x02", name_field, tail))
    if version >= 8:
        tail = _TAIL_V8.pack(
            1, index, 0, first_offset, log_append_time, log_start_offset, 0, -1, 0
        )
    elif version >= 5:
        tail = _TAIL_V5.pack(1, index, 0, first_offset, log_append_time, log_start_offset, 0)
    else:
        tail = _TAIL_V3.pack(1, index, 0, first_offset, log_append_time, 0)
    return b"".join(
        (
            _SIZE_CORRELATION_TOPICS.pack(8 + len(name_field) + len(tail), correlation_id, 1),
            name_field,
            tail,
        )
    )


def _error_frame(version, correlation_id, name, index, exc):
    # Rare: the general path's own result dict and encoder, so errors read the same.
    body = {
        "responses": [
            {
                "name": name,
                "partition_responses": [error_result(index, exc)],
            }
        ],
        "throttle_time_ms": 0,
    }
    if version >= _FIRST_FLEXIBLE:
        parts = codec.encode_response(0, version, correlation_id, body)
        payload = b"".join(bytes(p) for p in parts)
        return _CORRELATION.pack(len(payload)) + payload
    out = [_CORRELATION.pack(correlation_id)]
    encode_produce_response(version, body, out)
    payload = b"".join(out)
    return _CORRELATION.pack(len(payload)) + payload
