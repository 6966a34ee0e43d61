"""Errors raised by the wire codec.

The codec never lets ``struct.error``, ``IndexError`` or ``UnicodeDecodeError``
escape: a malformed frame must be distinguishable from a bug in a handler, so the
server can close the offending connection and keep serving everyone else.
"""

from pluglog.errors import PluglogError


class DecodeError(PluglogError, ValueError):
    """Input bytes are truncated or do not match the schema."""


class EncodeError(PluglogError, ValueError):
    """A value cannot be written in the requested API version (type, range, null)."""


class UnsupportedVersionError(PluglogError, ValueError):
    """The API key is unknown or the version is outside the defined range."""

    def __init__(self, api_key, api_version):
        self.api_key = api_key
        self.api_version = api_version
        super().__init__(f"api key {api_key} version {api_version} is not supported")
