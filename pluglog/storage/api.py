"""The public toolkit of storage providers: value types and batch helpers.

A third-party :class:`~pluglog.interfaces.ILogStorage` needs nothing else
from pluglog (docs/storage.rst, "The contract for storage providers"). Everything
here is a pure function or an immutable value, safe on any thread:

* :class:`AppendInfo`, :class:`ReadResult`, :class:`BatchHeader`,
  :class:`SegmentInfo`: what ``IPartitionLog`` methods return;
  :func:`empty_read` is the result of a read that found nothing;
  :class:`FileRange` lets a file-backed log hand out ``sendfile`` ranges.
* :func:`prepare_append` validates a client's batches (structure, CRC-32C,
  max.message.bytes) and assigns offsets; :func:`prepare_replicated` checks
  batches fetched from a leader; :func:`append_info` turns either into an
  :class:`AppendInfo`.
* :func:`parse_header` and :func:`scan_batches` read stored batches (the
  latter stops at the first torn or corrupt one: recovery after a crash).
* :func:`filter_batch` and :func:`iter_keys` are compaction's batch rewrite
  and key walk; :func:`crc32c` is the CRC-32C (Castagnoli) of magic-2
  batches, computed over ``batch[21:]``.
"""

from pluglog.storage.compaction import filter_batch, iter_keys
from pluglog.storage.crc import crc32c
from pluglog.storage.records import (
    HEADER_SIZE,
    BatchHeader,
    PreparedAppend,
    parse_header,
    prepare_append,
    prepare_replicated,
    scan_batches,
)
from pluglog.storage.results import AppendInfo, FileRange, ReadResult, SegmentInfo


def empty_read(log_start_offset, log_end_offset):
    """The ReadResult of a read that found no batch."""
    return ReadResult(b"", 0, -1, log_start_offset, log_end_offset)


def append_info(prepared, log_append_time, log_start_offset):
    """The AppendInfo of a stored :class:`PreparedAppend`."""
    return AppendInfo(
        prepared.first_offset,
        prepared.last_offset,
        prepared.max_timestamp,
        prepared.offset_of_max_timestamp,
        log_append_time,
        len(prepared.batches),
        prepared.size_bytes,
        log_start_offset,
        prepared.records,
    )


def log_append_time(topic_config, now_ms):
    """``now_ms`` for a LogAppendTime topic, else -1 (prepare_append's argument)."""
    return now_ms if topic_config.message_timestamp_type == "LogAppendTime" else -1


__all__ = [
    "HEADER_SIZE",
    "AppendInfo",
    "BatchHeader",
    "FileRange",
    "PreparedAppend",
    "ReadResult",
    "SegmentInfo",
    "append_info",
    "crc32c",
    "empty_read",
    "filter_batch",
    "iter_keys",
    "log_append_time",
    "parse_header",
    "prepare_append",
    "prepare_replicated",
    "scan_batches",
]
