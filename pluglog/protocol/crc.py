"""CRC-32C (Castagnoli), the checksum of Kafka record batches (magic 2).

The broker computes one CRC per produced batch over ``batch[21:]``, so this
sits on the produce hot path. It is the ``crc32c`` package's C extension:
SSE4.2 / ARMv8 instructions where the CPU has them (~20 GB/s), else its
slicing-by-8 C code (~1-2 GB/s). Nothing else is needed: crcmod's C
extension (~0.35 GB/s, and pure Python at ~7 MB/s when it failed to build)
and google-crc32c were fallbacks that ``crc32c``, a hard requirement, never
left room for.

Contract: :func:`crc32c` is a pure function, safe from any thread.
``crc32c(data, crc)`` continues a running checksum, so a CRC over
``header + body`` can be computed without concatenating them.
"""

import crc32c as _pkg

__all__ = ["HARDWARE", "IMPLEMENTATION", "crc32c", "is_native"]

#: The library in use (one, since there are no fallbacks).
IMPLEMENTATION = "crc32c"
#: True when the CPU's CRC instructions do the work.
HARDWARE = bool(getattr(_pkg, "hardware_based", False))

#: ``crc32c(data, crc=0) -> int``: the CRC-32C of the bytes-like ``data``,
#: continuing from ``crc``. Used directly (no wrapper): its second positional
#: argument is the running CRC, which is the signature this module promises.
crc32c = _pkg.crc32c


def is_native():
    """Return True: the ``crc32c`` package is C code either way."""
    return True
