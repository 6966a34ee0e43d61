"""pluglog's sans-IO Kafka wire codec: the public API for server and clients.

Nothing here touches sockets or the reactor.  The server frames bytes (int32 size),
calls :func:`parse_request_header` and :func:`decode_request` on the frame payload,
and writes the parts of :func:`encode_response` after a size prefix from
:func:`frame_size`.  Clients use :func:`encode_request` and :func:`decode_response`.

Bodies are plain dicts keyed by the snake_case of Kafka's JSON field names; nested
arrays of structs are lists of dicts.  RECORDS decode to zero-copy memoryviews.
Record batch parsing/building lives in :mod:`pluglog.protocol.records`, its
compression codecs in :mod:`pluglog.protocol.codecs`.

It may import only plugins and the layers below it (docs/architecture.rst,
Layers): storage, the client and the server all build on it.
"""

import struct

from pluglog.protocol import primitives as _p
from pluglog.protocol.api_keys import *  # noqa: F403  (named API key constants)
from pluglog.protocol.apis import (
    API_NAMES,
    API_VERSIONS_KEY,
    SUPPORTED,
    is_defined,
    is_flexible,
    is_supported,
    request_codec,
    response_codec,
    supported_api_keys,
)
from pluglog.protocol.errors import DecodeError, EncodeError, UnsupportedVersionError
from pluglog.protocol.fetchpath import (
    FETCH_VERSIONS,
    NotFast,
    decode_fetch_request,
    encode_fetch_response,
)
from pluglog.protocol.headers import (
    RequestHeader,
    parse_request_header,
    parse_response_header,
    write_request_header,
    write_response_header,
)
from pluglog.protocol.hotpath import (
    PRODUCE_VERSIONS,
    decode_produce_request,
    encode_produce_response,
)

UNSUPPORTED_VERSION = 35

__all__ = [
    "API_NAMES",
    "SUPPORTED",
    "UNSUPPORTED_VERSION",
    "DecodeError",
    "EncodeError",
    "RequestHeader",
    "UnsupportedVersionError",
    "api_versions_fallback_response",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "frame_size",
    "is_defined",
    "is_flexible",
    "is_supported",
    "parse_request_header",
    "supported_api_keys",
]

# Exceptions a decoder could raise on hostile input despite the explicit checks in
# primitives; they are all reported as DecodeError so callers handle one type.
_DECODE_FAILURES = (struct.error, IndexError, UnicodeDecodeError, OverflowError, RecursionError)

_BUFFERS = (bytes, bytearray, memoryview)


def _as_view(buf):
    return buf if isinstance(buf, memoryview) else memoryview(buf)


#: APIs a client library ends with one extra empty tag buffer (a 0 byte):
#: librdkafka's AlterUserScramCredentials (through 2.16) writes the request's
#: tags twice. Kafka ignores trailing bytes; accept exactly that one.
_EXTRA_EMPTY_TAGS = frozenset((51,))

#: librdkafka's all-topics Metadata request in a flexible version (v9+,
#: through 2.16) keeps its topic count as the int32 0 it reserved for it:
#: Kafka reads the first 0 as a null (all topics) array, reads the flags and
#: tags from the placeholder's other bytes and ignores what is left. Read
#: the last 0 as the array instead, so the flags are the ones sent.
_INT32_ZERO = b"\x00\x00\x00\x00"


def _librdkafka_all_topics(decode, buf, pos):
    """The body of librdkafka's all-topics Metadata request, or None."""
    if bytes(buf[pos : pos + 4]) != _INT32_ZERO:
        return None
    try:
        body, end = decode(buf, pos + 3)
    except (DecodeError, *_DECODE_FAILURES):
        return None
    return body if end == len(buf) and body["topics"] is None else None


def _decode_body(decode, buf, pos, what, extra_tags=False, metadata=False):
    if metadata:
        # Unambiguous: a well-formed null-topics body is 3 bytes shorter.
        body = _librdkafka_all_topics(decode, buf, pos)
        if body is not None:
            return body
    try:
        body, end = decode(buf, pos)
    except _DECODE_FAILURES as exc:
        raise DecodeError(f"malformed {what}: {exc}") from None
    if extra_tags and end == len(buf) - 1 and buf[end] == 0:
        return body
    if end != len(buf):
        # Every version's layout is exact; leftovers mean the frame does not match.
        raise DecodeError(f"{len(buf) - end} trailing bytes after {what}")
    return body


def decode_request(header, buf):
    """Decode the request body of a frame payload ``buf`` whose header is ``header``.

    ``buf`` should be a memoryview of the whole frame payload (header included);
    RECORDS in the result are slices of it.  Raises :class:`UnsupportedVersionError`
    if the header's key/version isn't defined, :class:`DecodeError` if malformed.
    """
    if header.body_offset is None:
        raise UnsupportedVersionError(header.api_key, header.api_version)
    if header.api_key == 0 and header.api_version in PRODUCE_VERSIONS:
        buf = _as_view(buf)
        fast = decode_produce_request(buf, header.body_offset)
        if fast is not None and fast[1] == len(buf):
            return fast[0]
        # Malformed or trailing bytes: the generic decoder says what is wrong.
    elif header.api_key == 1 and header.api_version in FETCH_VERSIONS:
        buf = _as_view(buf)
        fast = decode_fetch_request(buf, header.body_offset, header.api_version)
        if fast is not None and fast[1] == len(buf):
            return fast[0]
    decode, _ = request_codec(header.api_key, header.api_version)
    return _decode_body(
        decode,
        _as_view(buf),
        header.body_offset,
        _name(header.api_key, "req"),
        header.api_key in _EXTRA_EMPTY_TAGS,
        header.api_key == 3 and header.api_version >= 9,
    )


def _coalesce(chunks):
    """Join runs of small buffers; keep file-range objects as their own parts."""
    parts = []
    run = []
    for chunk in chunks:
        if isinstance(chunk, _BUFFERS):
            run.append(chunk)
        else:
            if run:
                parts.append(b"".join(run))
                run = []
            parts.append(chunk)
    if run:
        parts.append(b"".join(run))
    return parts


def encode_response(api_key, api_version, correlation_id, body):
    """Encode header + body; return parts (``bytes`` or objects with ``size``/``read()``).

    The 4-byte frame size is not included: write ``frame_size(parts)`` first.
    RECORDS values may be bytes, memoryview, None or a file range (``size`` and
    ``read()``), which is placed in the parts list unread for ``sendfile``.
    """
    _check_body(body)
    if api_key == 0 and api_version in PRODUCE_VERSIONS:
        out = [_p.INT32.pack(correlation_id)]
        try:
            encode_produce_response(api_version, body, out)
            return [b"".join(out)]
        except (KeyError, TypeError, ValueError, AttributeError, struct.error, EncodeError):
            pass  # the generic encoder raises the EncodeError that explains it
    elif api_key == 1 and api_version in FETCH_VERSIONS:
        out = [_p.INT32.pack(correlation_id)]
        if api_version >= 12:
            out.append(b"\x00")  # the flexible response header's tag buffer
        try:
            return encode_fetch_response(api_version, body, out)
        except (NotFast, KeyError, TypeError, ValueError, AttributeError, struct.error):
            pass  # the generic encoder writes it, or raises the EncodeError
    _, encode = response_codec(api_key, api_version)
    flexible = is_flexible(api_key, api_version)
    out = []
    write_response_header(out, api_key, correlation_id, flexible)
    encode(body, out)
    return _coalesce(out)


def frame_size(parts):
    """The int32 frame size for ``parts`` from :func:`encode_response`."""
    return sum(len(part) if isinstance(part, bytes) else part.size for part in parts)


def encode_request(api_key, api_version, correlation_id, client_id, body):
    """Encode a complete request frame (int32 size prefix included) as bytes."""
    _, encode = request_codec(api_key, api_version)
    _check_body(body)
    out = [b"\x00\x00\x00\x00"]
    write_request_header(
        out, api_key, api_version, correlation_id, client_id, is_flexible(api_key, api_version)
    )
    encode(body, out)
    for chunk in out:
        if not isinstance(chunk, _BUFFERS):
            raise EncodeError("requests carry RECORDS as bytes or memoryview, not file ranges")
    frame = bytearray(b"".join(out))
    _p.INT32.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def decode_response(api_key, api_version, buf):
    """Decode a response frame payload (without the int32 size): ``(correlation_id, body)``.

    An ApiVersions response with a non-zero error code is decoded as v0, because a
    broker answers versions it doesn't know with a v0-format body.
    """
    buf = _as_view(buf)
    flexible = is_flexible(api_key, api_version)
    try:
        correlation_id, pos = parse_response_header(buf, api_key, flexible)
    except _DECODE_FAILURES as exc:
        raise DecodeError(f"malformed response header: {exc}") from None
    if api_key == API_VERSIONS_KEY and api_version > 0:
        error_code, _ = _p.read_int16(buf, pos)
        if error_code != 0:
            api_version = 0
    decode, _ = response_codec(api_key, api_version)
    return correlation_id, _decode_body(decode, buf, pos, _name(api_key, "resp"))


def api_versions_fallback_response(correlation_id):
    """Parts of the answer to an ApiVersions request of an unknown version.

    Like Kafka: header v0 and a v0 body with UNSUPPORTED_VERSION (35) listing only
    ApiVersions' own range, so the client can retry with a version we know.
    """
    lo, hi = SUPPORTED[API_VERSIONS_KEY]
    body = {
        "error_code": UNSUPPORTED_VERSION,
        "api_keys": [{"api_key": API_VERSIONS_KEY, "min_version": lo, "max_version": hi}],
    }
    return encode_response(API_VERSIONS_KEY, 0, correlation_id, body)


def _check_body(body):
    if not isinstance(body, dict):
        raise EncodeError(f"a message body must be a dict, got {type(body).__name__}")


def _name(api_key, kind):
    return f"{API_NAMES.get(api_key, api_key)} {kind}"


def unsupported_version_response(api_key, api_version, correlation_id):
    """Parts of an UNSUPPORTED_VERSION answer for a defined but unadvertised version.

    Only APIs whose response carries a top-level ``error_code`` can say so; for
    the others (and for versions we cannot encode) this returns None and the
    server closes the connection, as Kafka does.
    """
    if not is_defined(api_key, api_version):
        return None
    try:
        parts = encode_response(api_key, api_version, correlation_id, {"error_code": 35})
        plain = encode_response(api_key, api_version, correlation_id, {"error_code": 0})
    except (EncodeError, KeyError, TypeError, ValueError):
        return None
    # If the body ignores error_code, this version has no top-level error field.
    return parts if parts != plain else None
