"""CRC-32C (Castagnoli), the checksum of Kafka record batches (magic 2).

The broker computes one CRC per produced batch over ``batch[21:]``, so this
sits on the produce hot path. Implementations are tried fastest first:

1. the ``crc32c`` package (SSE4.2 / ARMv8 hardware CRC, ~20 GB/s),
2. ``google_crc32c`` (C extension, ~6 GB/s),
3. ``crcmod``'s C extension (~370 MB/s).

crcmod silently installs a pure-Python fallback (~7 MB/s) when its extension
fails to build; that would make the broker unusably slow without any error, so
this module refuses it and raises :class:`ImportError` instead.

Contract: :func:`crc32c` is a pure function, safe from any thread.
``crc32c(data, crc)`` continues a running checksum, so a CRC over
``header + body`` can be computed without concatenating them.
"""

import sys

__all__ = ["IMPLEMENTATION", "crc32c", "is_native"]


def _load():
    try:
        import crc32c as _pkg

        # Used directly (no wrapper): its second positional argument is the
        # running CRC, which is the signature this module promises.
        return "crc32c", _pkg.crc32c
    except ImportError:
        pass
    try:
        import google_crc32c as _google

        if getattr(_google, "implementation", "c") == "c":
            return "google_crc32c", lambda data, crc=0: _google.extend(crc, bytes(data))
    except ImportError:
        pass
    try:
        import crcmod.predefined

        # ``crcmod.crcmod`` is shadowed by the package's own re-export, so the
        # flag must be read from sys.modules (see environment.md §1).
        if sys.modules["crcmod.crcmod"]._usingExtension:
            fun = crcmod.predefined.mkCrcFun("crc-32c")
            return "crcmod", lambda data, crc=0: fun(data, crc)
    except ImportError:
        pass
    raise ImportError(
        "pluglog needs a native CRC-32C implementation: pip install crc32c "
        "(or google-crc32c, or crcmod built with its C extension)"
    )


#: ``crc32c(data, crc=0) -> int``: the CRC-32C of the bytes-like ``data``,
#: continuing from ``crc``.
IMPLEMENTATION, crc32c = _load()


def is_native():
    """Return True: importing this module fails unless a C implementation is used."""
    return IMPLEMENTATION in ("crc32c", "google_crc32c", "crcmod")
