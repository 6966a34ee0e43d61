"""Swapping cleaned segments into a live log, and finishing or undoing a swap after a crash.

File protocol (Kafka's ``replaceSegments``), for a group of source segments
``S`` (contiguous, first base ``b``) cleaned into ``<b>.*.cleaned``:

1. ``<b>.index.cleaned``, ``<b>.timeindex.cleaned`` (and ``<b>.txnindex.cleaned``
   when the sources had aborted transactions) -> ``*.swap``, then
   ``<b>.log.cleaned`` -> ``<b>.log.swap`` (the commit point); directory fsync;
2. every segment of ``S`` -> ``*.deleted`` (unlinked after
   ``file.delete.delay.ms``: a fetch holding a FileRange of one keeps reading
   it through its descriptor);
3. ``<b>.index.swap``, ``<b>.timeindex.swap`` -> live, then
   ``<b>.log.swap`` -> ``<b>.log``; directory fsync.

Recovery (:func:`recover_swaps`, called when a log directory is opened,
before anything else looks at it):

* ``*.cleaned`` files are an unfinished pass: removed, the sources are intact;
* a ``<b>.log.swap`` was complete and fsynced before it got that name, so
  the swap is finished: every live file of a segment whose base offset lies
  in ``[b, end of the swap)`` is removed (the sources; the last batch of a
  group is always kept, so the swap spans exactly its sources' offsets), the
  swap files get their live names, and an index missing afterwards is
  rebuilt from the log by the normal open;
* ``*.swap`` index files without their ``.log.swap`` are leftovers: removed.

So a crash after any rename leaves either the old segments or the new one,
never both and never neither.

Threading: :func:`swap_in` runs on the reactor thread (it edits the log's
segment list, which appends, reads and retention use there); it is only file
renames and opening one segment, no data I/O. :func:`recover_swaps` runs
before the log exists.
"""

import os

from pluglog.fileutil import fsync_directory
from pluglog.storage.cleaner import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    clean,
    iter_file_headers,
    plan_clean,
)
from pluglog.storage.filenames import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_segment_file,
    segment_path,
)

_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


class SwapAborted(Exception):  # noqa: N818 - a decision, not a failure
    """The log changed while the pass ran; its result was dropped."""


def discard_cleaned(directory, base_offset):
    """Remove the ``.cleaned`` files of one group (an aborted pass)."""
    for suffix in SEGMENT_SUFFIXES:
        try:
            os.unlink(segment_path(directory, base_offset, suffix) + CLEANED_SUFFIX)
        except FileNotFoundError:
            pass


def _sources_in_log(log, group):
    """Index of the group's first source in ``log.segments`` if every source
    is still there, in order, not deleted and not active; else ``None``."""
    segments = log.segments
    bases = [s.base_offset for s in segments]
    try:
        start = bases.index(group.sources[0])
    except ValueError:
        return None
    stop = start + len(group.sources)
    if stop >= len(segments) or tuple(bases[start:stop]) != tuple(group.sources):
        return None
    if any(s.deleted for s in segments[start:stop]):
        return None
    if segments[stop - 1].next_offset != group.next_offset:
        return None
    return start


def swap_in(log, group, stop_after=None):
    """Replace ``group``'s sources in ``log`` by its cleaned segment.

    Raises :class:`SwapAborted` (after removing the cleaned files) when the
    sources are no longer the log's. ``stop_after`` (1, 2 or 3) makes a test
    stop after that step, as a crash would.
    """
    directory = log.directory
    base = group.base_offset
    start = None if log.closed else _sources_in_log(log, group)
    if start is None:
        discard_cleaned(directory, base)
        raise SwapAborted(f"{log.topic}-{log.partition} changed while it was cleaned")
    path = {suffix: segment_path(directory, base, suffix) for suffix in SEGMENT_SUFFIXES}
    txn = path[TXN_INDEX_SUFFIX] + CLEANED_SUFFIX
    # The cleaned aborted-transaction index exists only when the sources had one.
    optional = () if os.path.exists(txn) else (TXN_INDEX_SUFFIX,)
    for suffix in (*_INDEX_SUFFIXES, LOG_SUFFIX):
        if suffix not in optional:
            os.replace(path[suffix] + CLEANED_SUFFIX, path[suffix] + SWAP_SUFFIX)
    fsync_directory(directory)
    if stop_after == 1:
        return None
    stop = start + len(group.sources)
    old = log.segments[start:stop]
    for segment in old:
        log._delete_segment(segment)
    if stop_after == 2:
        return None
    for suffix in (*_INDEX_SUFFIXES, LOG_SUFFIX):
        if suffix not in optional:
            os.replace(path[suffix] + SWAP_SUFFIX, path[suffix])
    fsync_directory(directory)
    if stop_after == 3:
        return None
    segment = log._open_segment(base)
    log._set_segments(log.segments[:start] + [segment] + log.segments[stop:])
    log._dirty = [s for s in log._dirty if not s.deleted]
    return segment


#: keys one :func:`compact_inline` pass maps (the cleaner's default 128 MiB buffer)
INLINE_MAP_ENTRIES = 4_000_000


def compact_inline(log, now_ms):
    """One cleaner pass over a segment-file log on the calling thread, swapped
    in at once (``SegmentPartitionLog.compact``); returns the records
    removed. The log remembers its first dirty offset in ``_first_dirty``."""
    found = plan_clean(log, log.config, log._first_dirty, now_ms, INLINE_MAP_ENTRIES)
    if found is None:
        return 0
    result = clean(found[0])
    for group in result.groups:
        segment = swap_in(log, group)
        if group.dirty:
            os.utime(segment.log_path, ns=(now_ms * 1_000_000, now_ms * 1_000_000))
    log._directory_dirty = True
    log._first_dirty = result.end_offset
    return result.records_removed


def _swap_end(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        end = None
        for header in iter_file_headers(fd, os.fstat(fd).st_size):
            end = header.next_offset
        return end
    finally:
        os.close(fd)


def recover_swaps(directory):
    """Finish or undo interrupted swaps in a log directory; return how many
    swaps were finished. See the module docstring."""
    names = os.listdir(directory)
    swaps = []
    for name in names:
        full = os.path.join(directory, name)
        if name.endswith(CLEANED_SUFFIX):
            os.unlink(full)
        elif name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            parsed = parse_segment_file(name[: -len(SWAP_SUFFIX)])
            if parsed:
                swaps.append(parsed[0])
    for name in names:
        if name.endswith(SWAP_SUFFIX) and not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            parsed = parse_segment_file(name[: -len(SWAP_SUFFIX)])
            if not parsed or parsed[0] not in swaps:
                os.unlink(os.path.join(directory, name))
    for base in sorted(swaps):
        log_swap = segment_path(directory, base, LOG_SUFFIX) + SWAP_SUFFIX
        end = _swap_end(log_swap)
        end = base + 1 if end is None else end
        for name in os.listdir(directory):
            parsed = parse_segment_file(name)
            if parsed and base <= parsed[0] < end:
                os.unlink(os.path.join(directory, name))
        for suffix in (*_INDEX_SUFFIXES, LOG_SUFFIX):
            swap = segment_path(directory, base, suffix) + SWAP_SUFFIX
            if os.path.exists(swap):
                os.replace(swap, segment_path(directory, base, suffix))
    if swaps:
        fsync_directory(directory)
    return len(swaps)
