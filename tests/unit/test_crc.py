"""CRC-32C: the crc32c package is in use and it computes Castagnoli CRCs."""

import random

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
    assert crc.IMPLEMENTATION == "crc32c"
    # This machine's CPU has CRC instructions; software CRC would be a regression here.
    assert crc.HARDWARE


@pytest.mark.parametrize(("data", "expected"), VECTORS)
def test_known_vectors(data, expected):
    assert crc.crc32c(data) == expected


def test_accepts_memoryview_and_bytearray():
    data = b"xx123456789yy"
    assert crc.crc32c(memoryview(data)[2:11]) == 0xE3069283
    assert crc.crc32c(bytearray(b"123456789")) == 0xE3069283


def test_running_crc_continues():
    assert crc.crc32c(b"56789", crc.crc32c(b"1234")) == 0xE3069283


def _reference_crc32c(data):
    # Bit by bit with the reflected Castagnoli polynomial: slow and plainly right.
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_agrees_with_a_bitwise_reference():
    rng = random.Random(27)
    for size in (1, 7, 8, 9, 63, 64, 65, 1000, 4099):
        data = rng.randbytes(size)
        assert crc.crc32c(data) == _reference_crc32c(data)
    assert _reference_crc32c(b"123456789") == 0xE3069283
