"""Reading one log segment: where an offset's batch starts, and which whole
batches a fetch's limits allow.

:class:`SegmentReads` is the read side of
:class:`~pluglog.storage.segment.LogSegment` (a mixin: it uses the
segment's ``size``, ``index``, ``time_index``, ``_file`` and lazily loaded
state, and adds nothing of its own). A read returns a
:class:`~pluglog.storage.results.FileRange` that fetch sends with
``os.sendfile``; locating it costs one index bisect plus a short
header-only scan (at most ``index.interval.bytes`` of headers), never
record decoding, and a read that takes every batch to the segment's end (a
consumer catching up) scans nothing past the first header.

Threading: reactor thread only, as the segment.
"""

from bisect import bisect_left, bisect_right

from pluglog.storage.logscan import batches_end, find_batch, first_at_time, iter_headers
from pluglog.storage.records import LOG_OVERHEAD
from pluglog.storage.results import FileRange


class SegmentReads:
    """Offset lookups and range reads over a segment's ``.log`` file.

    ``_found`` (set by the segment to None, and again whenever its file is
    cut: batches never move otherwise) remembers ``(offset, position,
    base_offset, batch_length)`` of the batch holding ``offset`` that the
    last read found, or of the first batch it left out. The next read of a
    consumer starts at one of those: after a range cut by its byte limit, or
    a partition left out of a full answer, whose same offset every later
    fetch of the session reads again until it fits."""

    def _locate(self, offset):
        """Return ``(position, header)`` of the first batch with last offset >= offset."""
        self._ensure_indexes()
        _, position = self.index.lookup(offset)
        for batch_position, header in iter_headers(self._file, position, self.size):
            if header.base_offset + header.last_offset_delta >= offset:
                return batch_position, header
        return None, None

    def read(self, offset, max_bytes, max_offset=None, min_one_batch=True):
        """Return ``(records, first_offset)`` for whole batches from the one
        containing ``offset``: a FileRange, or ``b""`` when a limit leaves
        nothing to return, or ``None`` when this segment holds no batch at or
        after ``offset`` (the caller moves on to the next segment).

        Once per partition of every fetch: header fields are unpacked only
        as far as a step needs (:func:`~pluglog.storage.logscan.find_batch`,
        :func:`~pluglog.storage.logscan.batches_end`)."""
        if not self._indexes_loaded:
            self._ensure_indexes()
        index = self.index
        size = self.size
        found = self._found
        if found is None or found[0] != offset:
            found = find_batch(self._file, index.lookup(offset)[1], size, offset)
            if found is None:
                return None, -1
            found = self._found = (offset, *found)
        _, start, first_offset, length = found
        if max_offset is not None and first_offset >= max_offset:
            return b"", -1
        first_size = length + LOG_OVERHEAD
        if first_size > max_bytes:
            if min_one_batch:
                return FileRange(self.fileno, start, first_size), first_offset
            return b"", -1
        limit = start + max_bytes
        known = self._next_offset
        if limit >= size and known is not None and (max_offset is None or max_offset >= known):
            # Every batch from the first to the segment's end fits (a
            # consumer catching up): no header walk to find the end.
            return FileRange(self.fileno, start, size - start), first_offset
        # Skip whole batches using the index: entries are batch starts, so
        # everything before an entry at or below the limit fits.
        j = bisect_right(index.positions, limit) - 1
        if max_offset is not None:
            j = min(j, bisect_left(index.offsets, max_offset - self.base_offset) - 1)
        scan_from = start + first_size
        if j >= 0 and index.positions[j] > scan_from:
            scan_from = index.positions[j]
        end, after = batches_end(self._file, scan_from, size, limit, max_offset)
        if after is not None:
            # Where the next fetch of a consumer that got this range starts.
            self._found = (after[1], *after)
        return FileRange(self.fileno, start, end - start), first_offset

    def first_batch_needs(self, offset, max_bytes, max_offset=None):
        """After :meth:`read` of ``offset`` returned ``b""``: the size of the
        batch holding ``offset`` when ``max_bytes`` alone left it out (the
        batch it found is remembered), else 0."""
        found = self._found
        if found is None or found[0] != offset:
            return 0
        if max_offset is not None and found[2] >= max_offset:
            return 0
        size = found[3] + LOG_OVERHEAD
        return size if size > max_bytes else 0

    def find_timestamp(self, timestamp, min_offset=0):
        """Return ``(base_offset, max_timestamp)`` of the first batch holding
        offsets >= ``min_offset`` whose max timestamp is >= ``timestamp``."""
        if self.largest_timestamp < timestamp:
            return None
        before = self.time_index.lookup_before(timestamp)
        position = self.index.lookup(max(before or 0, min_offset))[1]
        return first_at_time(self._file, position, self.size, timestamp, min_offset)

    def batch_headers(self, start_offset):
        position, header = self._locate(start_offset)
        if header is None:
            return
        for _, header in iter_headers(self._file, position, self.size):
            yield header
