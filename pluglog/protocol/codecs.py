"""Kafka's record batch compression codecs: gzip, snappy, lz4 and zstd.

:func:`compress` and :func:`decompress` turn a batch's record array into its
payload and back, by the codec id in the batch attributes' low three bits
(``CODEC_NAMES`` maps the names clients and tools use to those ids). They
are the one implementation of the codecs: record building and decoding
(:mod:`pluglog.protocol.records`), the client's fetcher, produce-time
validation and compaction all use them.

The formats are Kafka's, all through cramjam (gzip through the standard
library): gzip members; raw snappy blocks, written with xerial framing (as
the Java client and kafka-python do) and read in both xerial and raw form;
one LZ4 frame with independent blocks (the Java client decompresses each
block on its own, so linked blocks over 64 KiB would not read there); zstd
frames. An unknown codec id raises :class:`UnsupportedCodecError`, bytes a
codec cannot read raise :class:`~pluglog.errors.CorruptRecordError`.
"""

import gzip
import struct

import cramjam

from pluglog.errors import CorruptRecordError, InvalidRecordError

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
CODEC_NAMES = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_U32 = struct.Struct(">I")


class UnsupportedCodecError(InvalidRecordError):
    """A batch names a compression codec that Kafka does not have (an id over 4)."""


def _lz4_frame(data):
    # Independent blocks and no content checksum, as the Java client and
    # kafka-python write them; cramjam.lz4.compress would link the blocks.
    compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


def compress(codec, data):
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return gzip.compress(data)
    if codec == COMPRESSION_SNAPPY:
        blocks = [_XERIAL_HEADER]
        for start in range(0, len(data), _XERIAL_BLOCK):
            block = cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK])
            blocks += [_U32.pack(len(block)), bytes(block)]
        return b"".join(blocks)
    if codec == COMPRESSION_LZ4:
        return _lz4_frame(data)
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise UnsupportedCodecError(f"unknown compression codec {codec}")


def decompress(codec, data):
    data = bytes(data)
    if codec == COMPRESSION_NONE:
        return data
    try:
        if codec == COMPRESSION_GZIP:
            return gzip.decompress(data)
        if codec == COMPRESSION_SNAPPY:
            if not data.startswith(_XERIAL_HEADER[:8]):
                return bytes(cramjam.snappy.decompress_raw(data))
            out, position = [], 16
            while position < len(data):
                (length,) = _U32.unpack_from(data, position)
                position += 4
                out.append(
                    bytes(cramjam.snappy.decompress_raw(data[position : position + length]))
                )
                position += length
            return b"".join(out)
        if codec == COMPRESSION_LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == COMPRESSION_ZSTD:
            # Frames that do not record their size (streaming writers) too.
            return bytes(cramjam.zstd.decompress(data))
    except Exception as exc:
        raise CorruptRecordError(f"cannot decompress codec {codec}: {exc}") from exc
    raise UnsupportedCodecError(f"unknown compression codec {codec}")
