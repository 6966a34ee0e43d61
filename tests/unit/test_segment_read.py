"""A segment's fetch reads (pluglog.storage.segment_read) against a reference.

The reference is computed from the batches' own layout (positions and
offsets as appended), not from the code under test: the batch holding the
offset, then every following whole batch within the byte limit that starts
below the max offset. Reads run in orders that use the remembered last
batch (the same offset again, the offset after a cut range), also after the
file was cut and written again.
"""

import itertools
import random

from pluglog.config import TopicConfig
from pluglog.storage.manager import SegmentLogStorage
from tests.unit.test_storage_segments import make_batch

LOG_OVERHEAD = 12


def layout(segment):
    """(position, base, last, size) of every batch, from the raw file."""
    data = open(segment.log_path, "rb").read()
    out = []
    position = 0
    while position < len(data):
        base = int.from_bytes(data[position : position + 8], "big")
        length = int.from_bytes(data[position + 8 : position + 12], "big")
        delta = int.from_bytes(data[position + 23 : position + 27], "big")
        out.append((position, base, base + delta, length + LOG_OVERHEAD))
        position += length + LOG_OVERHEAD
    return out


def reference(batches, offset, max_bytes, max_offset, min_one_batch):
    """What read() must return: ((position, size) or None or b"", first offset)."""
    i = next((i for i, b in enumerate(batches) if b[2] >= offset), None)
    if i is None:
        return None, -1
    position, base, _, size = batches[i]
    if max_offset is not None and base >= max_offset:
        return b"", -1
    if size > max_bytes:
        return ((position, size), base) if min_one_batch else (b"", -1)
    total = size
    for _, next_base, _, next_size in batches[i + 1 :]:
        if total + next_size > max_bytes or (max_offset is not None and next_base >= max_offset):
            break
        total += next_size
    return (position, total), base


def shape(got):
    records, first = got
    if records is None or isinstance(records, bytes):
        return records, first
    return (records.position, records.size), first


def filled(tmp_path, interval, counts):
    config = TopicConfig(index_interval_bytes=interval, segment_bytes=1 << 20)
    store = SegmentLogStorage(str(tmp_path), topic_defaults=config)
    log = store.open_log("t", 0, config)
    for i, count in enumerate(counts):
        log.append(make_batch(count, ts=i, value=b"v" * (5 + 37 * (i % 7))), now_ms=0)
    return store, log, log.segments[-1]


def test_every_read_matches_the_reference_in_any_order(tmp_path):
    rng = random.Random(7)
    counts = [1 + rng.randrange(5) for _ in range(80)]
    for interval, sub in ((0, "a"), (300, "b"), (4096, "c")):
        store, log, segment = filled(tmp_path / sub, interval, counts)
        batches = layout(segment)
        end = log.log_end_offset
        cases = list(
            itertools.product(
                range(end + 2),
                (1, 70, 250, 900, 5000, 1 << 20),
                (None, 3, end // 2, end, end + 9),
                (True, False),
            )
        )
        rng.shuffle(cases)
        for offset, max_bytes, max_offset, min_one in cases:
            got = shape(segment.read(offset, max_bytes, max_offset, min_one))
            want = reference(batches, offset, max_bytes, max_offset, min_one)
            assert got == want, (interval, offset, max_bytes, max_offset, min_one)
            # The same read again (the remembered batch) answers the same.
            assert shape(segment.read(offset, max_bytes, max_offset, min_one)) == want
        store.close()


def test_a_consumer_reading_on_from_each_cut_range_gets_the_file_byte_for_byte(tmp_path):
    store, log, segment = filled(tmp_path, 4096, [1 + i % 4 for i in range(200)])
    whole = open(segment.log_path, "rb").read()
    for max_bytes in (300, 1000, 4500):
        offset, got = 0, []
        while offset < log.log_end_offset:
            result = log.read(offset, max_bytes, max_offset=log.log_end_offset)
            data = result.records.read()
            got.append(data)
            last = layout_of(data)[-1]
            offset = last + 1
        assert b"".join(got) == whole, max_bytes
    store.close()


def layout_of(data):
    """Last offsets of the batches in ``data``."""
    out, position = [], 0
    while position < len(data):
        base = int.from_bytes(data[position : position + 8], "big")
        length = int.from_bytes(data[position + 8 : position + 12], "big")
        out.append(base + int.from_bytes(data[position + 23 : position + 27], "big"))
        position += length + LOG_OVERHEAD
    return out


def test_the_remembered_batch_is_forgotten_when_the_file_is_cut(tmp_path):
    store, log, segment = filled(tmp_path, 300, [2] * 30)
    # The segment remembers one batch: the one after a range cut short,
    # then the one holding offset 40.
    assert shape(segment.read(40, 1200))[1] == 40
    assert segment._found[0] > 40
    assert shape(segment.read(40, 1 << 20))[1] == 40
    assert segment._found[0] == 40
    log.truncate_to(30)
    # Written again with other batch sizes: 30, 33, 36, ... hold 3 records.
    for i in range(10):
        log.append(make_batch(3, ts=100 + i, value=b"w" * (11 * i + 3)), now_ms=0)
    batches = layout(segment)
    for offset in (40, 20, 30, 31, 33, 50):
        for max_bytes in (1, 200, 1 << 20):
            want = reference(batches, offset, max_bytes, None, True)
            assert shape(segment.read(offset, max_bytes)) == want, (offset, max_bytes)
    store.close()
