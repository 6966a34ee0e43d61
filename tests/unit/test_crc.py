"""CRC-32C: a native implementation is in use and it computes Castagnoli CRCs."""

import sys

import crcmod.predefined
import pytest

from pluglog.protocol import crc

# RFC 3720 (iSCSI) appendix B.4 test vectors plus the classic check value.
VECTORS = [
    (b"123456789", 0xE3069283),
    (b"", 0x00000000),
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
]


def test_native_implementation_in_use():
    assert crc.is_native()
    assert crc.IMPLEMENTATION in ("crc32c", "google_crc32c", "crcmod")
    # The fastest one is installed in this environment; falling back would be a regression.
    assert crc.IMPLEMENTATION == "crc32c"


@pytest.mark.parametrize(("data", "expected"), VECTORS)
def test_known_vectors(data, expected):
    assert crc.crc32c(data) == expected


def test_accepts_memoryview_and_bytearray():
    data = b"xx123456789yy"
    assert crc.crc32c(memoryview(data)[2:11]) == 0xE3069283
    assert crc.crc32c(bytearray(b"123456789")) == 0xE3069283


def test_running_crc_continues():
    assert crc.crc32c(b"56789", crc.crc32c(b"1234")) == 0xE3069283


def test_crcmod_installed_with_c_extension_agrees():
    # crcmod silently installs pure Python without a compiler; the fallback
    # order in crc.py relies on this flag, so check it is what we think.
    assert sys.modules["crcmod.crcmod"]._usingExtension is True
    fun = crcmod.predefined.mkCrcFun("crc-32c")
    data = bytes(range(256)) * 17
    assert fun(data) == crc.crc32c(data)
