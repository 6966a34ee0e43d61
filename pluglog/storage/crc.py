"""The record batch CRC-32C helper, for storage code and storage plugins.

The checksum is part of the wire format, so it lives in
:mod:`pluglog.protocol.crc` (the client and the protocol layer use it too);
storage providers may import :func:`crc32c` from either module.
"""

from pluglog.protocol.crc import crc32c

__all__ = ["crc32c"]
