"""The remote part of one partition's log: which offsets are remote, and reads of them.

A :class:`RemoteTier` is attached to a partition log as ``log.remote_tier``
by the remote log manager (:mod:`pluglog.tiered.manager`); it holds the
partition's finished remote segments (:class:`~.metadata.RemoteSegment`,
from ``__remote_log_metadata``) and serves the log's reads of offsets
below the local log start.

Reads never block the reactor. What a read needs (a segment's offset index,
then 1 MiB chunks of its records) comes from a :class:`ChunkCache` shared
by the broker's partitions and bounded in bytes; a miss starts the fetch in
the reader thread pool (``run_in_thread``, which returns a Deferred) and the
read answers "nothing yet": an empty result, so the fetch long-polls like
any fetch at the log end. When the bytes arrive ``on_ready()`` wakes the
partition's parked fetches, which read again from the cache. While reading
a chunk the next one is fetched ahead, so a consumer reading history in
order rarely waits.

Runs on the reactor thread, except the provider calls in the pool.
"""

import struct
from bisect import bisect_right
from collections import OrderedDict

from twisted.internet.defer import succeed
from twisted.logger import Logger

from pluglog.storage.results import ReadResult

_log = Logger()

CHUNK_BYTES = 1 << 20
_HEADER = 61
_BASE_LENGTH = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")
_INDEX_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


class ChunkCache:
    """An LRU of remote bytes (indexes and record chunks) bounded in bytes."""

    def __init__(self, max_bytes):
        self.max_bytes = max_bytes
        self.size = 0
        self._items = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key):
        data = self._items.get(key)
        if data is None:
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return data

    def __contains__(self, key):
        return key in self._items

    def put(self, key, data):
        old = self._items.pop(key, None)
        if old is not None:
            self.size -= len(old)
        self._items[key] = data
        self.size += len(data)
        while self.size > self.max_bytes and len(self._items) > 1:
            _key, dropped = self._items.popitem(last=False)
            self.size -= len(dropped)

    def drop_segment(self, segment_id):
        for key in [k for k in self._items if k[0] == segment_id]:
            self.size -= len(self._items.pop(key))


def trim_index(index):
    """The valid prefix of an offset index: entries while their relative
    offsets increase. A preallocated or partly written tail is cut, since
    the index is only a hint (reads walk batches from its position)."""
    count = len(index) // _INDEX_ENTRY.size
    valid = 0
    last = -1
    for rel, _pos in _INDEX_ENTRY.iter_unpack(memoryview(index)[: count * _INDEX_ENTRY.size]):
        if rel <= last:
            break
        last = rel
        valid += 1
    return bytes(index[: valid * _INDEX_ENTRY.size])


def trim_time_index(index):
    """The valid prefix of a time index: entries while their timestamps
    increase (a preallocated tail of zeros is cut)."""
    count = len(index) // _TIME_ENTRY.size
    valid = 0
    last = None
    for timestamp, _rel in _TIME_ENTRY.iter_unpack(memoryview(index)[: count * _TIME_ENTRY.size]):
        if last is not None and timestamp <= last:
            break
        last = timestamp
        valid += 1
    return bytes(index[: valid * _TIME_ENTRY.size])


def time_index_before(index, timestamp):
    """The relative offset of the last entry of a trimmed time index whose
    timestamp is < ``timestamp`` (every batch up to it is older), or 0."""
    lo, hi, found = 0, len(index) // _TIME_ENTRY.size, 0
    while lo < hi:
        mid = (lo + hi) // 2
        ts, rel = _TIME_ENTRY.unpack_from(index, mid * _TIME_ENTRY.size)
        if ts < timestamp:
            found = rel
            lo = mid + 1
        else:
            hi = mid
    return found


def index_position(index, relative_offset):
    """The file position of the last entry of a trimmed offset index at or
    before ``relative_offset`` (0 when there is none)."""
    lo, hi, found = 0, len(index) // _INDEX_ENTRY.size, 0
    while lo < hi:
        mid = (lo + hi) // 2
        rel, pos = _INDEX_ENTRY.unpack_from(index, mid * _INDEX_ENTRY.size)
        if rel <= relative_offset:
            found = pos
            lo = mid + 1
        else:
            hi = mid
    return found


class RemoteTier:
    """One partition's finished remote segments and the reads of them."""

    def __init__(self, topic, partition, storage, cache, run_in_thread):
        self.topic = topic
        self.partition = partition
        self.storage = storage
        self.cache = cache
        self.run_in_thread = run_in_thread
        #: Set by the manager once the metadata is loaded; before that a
        #: read below the local start waits instead of failing.
        self.loaded = False
        self.segments = []
        self._bases = []
        #: DeleteRecords' start within the remote tier (-1: the first segment's base).
        self.start_offset = -1
        #: Called with no argument when fetched bytes arrived (wakes parked fetches).
        self.on_ready = None
        #: Called with the new start when DeleteRecords moves it (to record it).
        self.on_start_moved = None
        self._inflight = set()
        self.fetch_errors = 0

    def __repr__(self):
        return f"<RemoteTier {self.topic}-{self.partition} {len(self.segments)} segment(s)>"

    # -- state ------------------------------------------------------------------

    def set_segments(self, segments, start_offset=-1):
        """Replace the finished segments (sorted by base offset)."""
        self.segments = sorted(segments, key=lambda s: s.base_offset)
        self._bases = [s.base_offset for s in self.segments]
        self.start_offset = start_offset

    @property
    def log_start_offset(self):
        """The first offset the remote tier serves, or None when it holds nothing."""
        if not self.segments:
            return None
        return max(self.segments[0].base_offset, self.start_offset)

    @property
    def next_offset(self):
        """One past the last offset uploaded (-1 when nothing is)."""
        return self.segments[-1].next_offset if self.segments else -1

    @property
    def highest_offset(self):
        """The last offset uploaded (Kafka's ``highestOffsetInRemoteStorage``,
        what ListOffsets LATEST_TIERED answers), -1 when nothing is."""
        return self.segments[-1].end_offset if self.segments else -1

    @property
    def size_bytes(self):
        return sum(s.size_bytes for s in self.segments)

    def delete_records_before(self, offset):
        """DeleteRecords: nothing below ``offset`` is served any more; the
        manager records the start and deletes the segments wholly below."""
        if offset > self.start_offset:
            self.start_offset = offset
            if self.on_start_moved is not None:
                self.on_start_moved(offset)

    def uploaded_count(self, local_segments):
        """How many of the oldest ``local_segments`` (not the active one)
        are wholly uploaded: only those may local retention delete."""
        # Below the remote start the data is deleted anyway (DeleteRecords,
        # total retention): such a segment needs no copy.
        end = max(self.next_offset, self.start_offset)
        count = 0
        for segment in local_segments[:-1]:
            if segment.next_offset > end:
                break
            count += 1
        return count

    def _segment_for(self, offset):
        i = bisect_right(self._bases, offset) - 1
        if i < 0:
            return self.segments[0] if self.segments else None
        while i < len(self.segments) and self.segments[i].next_offset <= offset:
            i += 1
        return self.segments[i] if i < len(self.segments) else None

    # -- reads --------------------------------------------------------------------

    def read(self, offset, max_bytes, max_offset, min_one_batch, log_start, log_end):
        """A ReadResult for ``offset`` from the remote tier: whole batches
        of one remote segment, or an empty result while bytes are being
        fetched (``on_ready`` follows). None when the offset is in no
        remote segment (the caller answers OFFSET_OUT_OF_RANGE)."""
        pending = ReadResult(b"", 0, -1, log_start, log_end)
        if not self.loaded:
            return pending
        start = self.log_start_offset
        if start is None or offset < start:
            return None
        segment = self._segment_for(offset)
        if segment is None:
            return None
        index = self._get(segment, "index", -1)
        if index is None:
            return pending
        position = index_position(index, max(0, offset - segment.base_offset))
        out = []
        size = 0
        first = -1
        end_of_segment = segment.size_bytes
        while position < end_of_segment:
            header = self._bytes(segment, position, min(position + _HEADER, end_of_segment))
            if header is None:
                break
            base, length = _BASE_LENGTH.unpack_from(header, 0)
            total = 12 + length
            last = base + _LAST_DELTA.unpack_from(header, 23)[0]
            if max_offset is not None and base >= max_offset:
                break
            if last < offset:
                position += total
                continue
            if size + total > max_bytes and (size or not min_one_batch):
                break
            body = self._bytes(segment, position, position + total)
            if body is None:
                break
            out.append(body)
            size += total
            if first < 0:
                first = base
            position += total
        if position < end_of_segment:
            self._prefetch(segment, position)
        if not out:
            return pending
        records = out[0] if len(out) == 1 else b"".join(out)
        return ReadResult(records, size, first, log_start, log_end)

    def segment_for_timestamp(self, timestamp_ms):
        """The first remote segment still served whose newest record is at
        or after ``timestamp_ms``, or None."""
        start = self.log_start_offset
        for segment in self.segments:
            if segment.max_timestamp >= timestamp_ms and segment.next_offset > start:
                return segment
        return None

    def offset_for_timestamp(self, timestamp_ms):
        """``(base offset, max timestamp)`` of :meth:`segment_for_timestamp`,
        or None: a synchronous, segment-granular answer for callers that
        cannot wait; ListOffsets asks :func:`.lookup.find_timestamp`, which
        reads the segment's time and offset indexes for the exact record."""
        segment = self.segment_for_timestamp(timestamp_ms)
        if segment is None:
            return None
        return max(segment.base_offset, self.log_start_offset), segment.max_timestamp

    def load(self, segment, part, number):
        """A Deferred firing with the cached bytes of one part of a remote
        segment (a chunk ``number`` of the ``log``, or -1: a whole index),
        fetched in the reader pool on a miss and then cached."""
        key = (segment.segment_id, part, number)
        data = self.cache.get(key)
        if data is not None:
            return succeed(data)
        if number < 0:
            start, end = 0, None
        else:
            start = number * CHUNK_BYTES
            end = min(start + CHUNK_BYTES, segment.size_bytes)
        d = self.run_in_thread(self.storage.fetch, segment, part, start, end)

        def fetched(data):
            if part == "index":
                data = trim_index(data)
            elif part == "timeindex":
                data = trim_time_index(data)
            self.cache.put(key, data)
            return data

        return d.addCallback(fetched)

    def aborted_between(self, start, end):
        """The remote segments' aborted transactions that may hold data in
        ``[start, end)`` (marker at or after ``start``, first offset before
        ``end``), as ``(producer id, first offset, last offset, last stable
        offset)`` in marker order."""
        out = []
        for segment in self.segments:
            if segment.next_offset <= start:
                continue
            for entry in segment.aborted_txns:
                if entry[2] >= start and entry[1] < end:
                    out.append(entry)
        return out

    def _bytes(self, segment, start, end):
        """Bytes ``[start, end)`` of the segment's records if every chunk is
        cached; otherwise start fetching the missing ones and return None."""
        first, last = start // CHUNK_BYTES, (end - 1) // CHUNK_BYTES
        chunks = []
        missing = False
        for number in range(first, last + 1):
            data = self._get(segment, "log", number)
            if data is None:
                missing = True
            else:
                chunks.append(data)
        if missing:
            return None
        joined = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        offset = first * CHUNK_BYTES
        return joined[start - offset : end - offset]

    def _prefetch(self, segment, position):
        number = position // CHUNK_BYTES
        for ahead in (number, number + 1):
            if ahead * CHUNK_BYTES < segment.size_bytes:
                key = (segment.segment_id, "log", ahead)
                if key not in self.cache and key not in self._inflight:
                    self._fetch(segment, "log", ahead)

    def _get(self, segment, part, number):
        key = (segment.segment_id, part, number)
        data = self.cache.get(key)
        if data is None and key not in self._inflight:
            self._fetch(segment, part, number)
        return data

    def _fetch(self, segment, part, number):
        key = (segment.segment_id, part, number)
        self._inflight.add(key)
        if number < 0:
            start, end = 0, None
        else:
            start = number * CHUNK_BYTES
            end = min(start + CHUNK_BYTES, segment.size_bytes)
        d = self.run_in_thread(self.storage.fetch, segment, part, start, end)
        d.addCallbacks(self._fetched, self._failed, (key,), None, (key,))

    def _fetched(self, data, key):
        self._inflight.discard(key)
        if key[1] == "index":
            data = trim_index(data)
        self.cache.put(key, data)
        if self.on_ready is not None:
            self.on_ready()

    def _failed(self, failure, key):
        self._inflight.discard(key)
        self.fetch_errors += 1
        # One line per failure: the store may be down for a while, and each
        # waiting fetch retries (its next read starts a new fetch).
        _log.warn(
            "remote read of {topic}-{partition} failed: {error}",
            topic=self.topic,
            partition=self.partition,
            error=failure.getErrorMessage(),
        )
