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

from pluglog.storage.logscan import first_at_time, iter_headers
from pluglog.storage.results import FileRange


class SegmentReads:
    """Offset lookups and range reads over a segment's ``.log`` file."""

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
        after ``offset`` (the caller moves on to the next segment)."""
        start, header = self._locate(offset)
        if header is None:
            return None, -1
        if max_offset is not None and header.base_offset >= max_offset:
            return b"", -1
        first_size = header.batch_length + 12
        if first_size > max_bytes:
            if min_one_batch:
                return FileRange(self.fileno, start, first_size), header.base_offset
            return b"", -1
        limit = start + max_bytes
        known = self._next_offset
        if (
            limit >= self.size
            and known is not None
            and (max_offset is None or max_offset >= known)
        ):
            # Every batch from the first to the segment's end fits (a
            # consumer catching up): no header walk to find the end.
            return FileRange(self.fileno, start, self.size - start), header.base_offset
        # Skip whole batches using the index: entries are batch starts, so
        # everything before an entry at or below the limit fits.
        index = self.index
        j = bisect_right(index.positions, limit) - 1
        if max_offset is not None:
            j = min(j, bisect_left(index.offsets, max_offset - self.base_offset) - 1)
        scan_from = start + first_size
        if j >= 0 and index.positions[j] > scan_from:
            scan_from = index.positions[j]
        end = scan_from
        for position, next_header in iter_headers(self._file, scan_from, self.size):
            batch_end = position + next_header.batch_length + 12
            if batch_end > limit or (
                max_offset is not None and next_header.base_offset >= max_offset
            ):
                break
            end = batch_end
        return FileRange(self.fileno, start, end - start), header.base_offset

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
