"""File and directory names of the segment storage.

Layout of a data directory (Kafka's, so tools and intuition carry over)::

    <data-dir>/recovery-point-offset-checkpoint
    <data-dir>/log-start-offset-checkpoint
    <data-dir>/.pluglog_cleanshutdown          only between close() and the next open
    <data-dir>/<topic>-<partition>/
        00000000000000000000.log               record batches
        00000000000000000000.index             sparse offset index
        00000000000000000000.timeindex         sparse time index
        00000000000000000000.txnindex          aborted transactions (only when there are any)
        00000000000000000000.snapshot          producer state (pluglog.broker.partition_txns)
        00000000000000001234.log.deleted       waiting for file.delete.delay.ms
    <data-dir>/<topic>-<partition>.<hex>.deleted/   a deleted partition

Segment names are the 20-digit zero-padded base offset, so lexical order is
offset order. Pure functions; no I/O.
"""

import os

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
TMP_SUFFIX = ".tmp"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".pluglog_cleanshutdown"


def offset_name(offset):
    """The 20-digit name Kafka gives a segment starting at ``offset``."""
    return f"{offset:020d}"


def segment_path(directory, base_offset, suffix):
    return os.path.join(directory, offset_name(base_offset) + suffix)


def log_dir_name(topic, partition):
    return f"{topic}-{partition}"


def parse_log_dir_name(name):
    """Return ``(topic, partition)`` for ``<topic>-<partition>``, else None."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def parse_segment_file(name):
    """Return ``(base_offset, suffix)`` for a segment file name, else None."""
    stem, dot, ext = name.partition(".")
    suffix = dot + ext
    if suffix not in SEGMENT_SUFFIXES or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem), suffix
