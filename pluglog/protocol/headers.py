"""Request and response headers.

Request header v1 = api_key, api_version, correlation_id, client_id (nullable,
*non-compact* string); v2 adds a tag buffer and is used iff the API version is
flexible.  Response header v0 = correlation_id; v1 adds a tag buffer iff flexible,
except that ApiVersions responses always use v0 (KIP-511: a client that sent a
version the broker doesn't know must still be able to read the reply).
"""

import struct
from typing import NamedTuple

from pluglog.protocol import primitives as p
from pluglog.protocol.apis import API_VERSIONS_KEY, APIS
from pluglog.protocol.errors import DecodeError

_FIXED = struct.Struct(">hhi")


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # Offset of the body in the frame; None when the key/version isn't defined,
    # so the server can still answer (ApiVersions fallback) or close by correlation id.
    body_offset: int | None


def parse_request_header(buf):
    """Parse a request header from a frame payload (without the int32 size)."""
    if len(buf) < _FIXED.size:
        raise DecodeError(f"request header needs 8 bytes, frame has {len(buf)}")
    api_key, api_version, correlation_id = _FIXED.unpack_from(buf, 0)
    api = APIS.get(api_key)
    if api is None or not api.defines(api_version):
        try:
            client_id, _ = p.read_nullable_string(buf, _FIXED.size)
        except DecodeError:
            client_id = None
        return RequestHeader(api_key, api_version, correlation_id, client_id, None)
    client_id, pos = p.read_nullable_string(buf, _FIXED.size)
    if api.is_flexible(api_version):
        pos = p.skip_tagged_fields(buf, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def write_request_header(out, api_key, api_version, correlation_id, client_id, flexible):
    out.append(_FIXED.pack(api_key, api_version, correlation_id))
    p.write_nullable_string(out, client_id)
    if flexible:
        out.append(b"\x00")


def response_header_flexible(api_key, flexible):
    return flexible and api_key != API_VERSIONS_KEY


def write_response_header(out, api_key, correlation_id, flexible):
    out.append(p.INT32.pack(correlation_id))
    if response_header_flexible(api_key, flexible):
        out.append(b"\x00")


def parse_response_header(buf, api_key, flexible):
    """Return ``(correlation_id, body_offset)``."""
    correlation_id, pos = p.read_int32(buf, 0)
    if response_header_flexible(api_key, flexible):
        pos = p.skip_tagged_fields(buf, pos)
    return correlation_id, pos
