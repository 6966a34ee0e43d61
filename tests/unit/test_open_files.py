"""The descriptor budget of segment files (pluglog.storage.openfiles), on real files.

The budget counts descriptors actually held: a segment that is only read
holds one (its .log), so a budget of N keeps N read segments open, not
N / 3; the count always equals the descriptors the process really has
open for segment files; evicted segments reopen and read back byte for
byte; closing everything leaves no descriptor behind; an open that meets
EMFILE closes half and succeeds.
"""

import os
import resource

import pytest

from pluglog.config import TopicConfig
from pluglog.storage import openfiles
from pluglog.storage.manager import SegmentLogStorage
from pluglog.storage.openfiles import OpenSegments, descriptor_budget
from tests.unit.test_storage_segments import data_of, make_batch

CONFIG = TopicConfig(segment_bytes=1 << 20, index_interval_bytes=150)


def segment_fds(root):
    """Descriptors this process holds on files under ``root``."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the listing's own descriptor, closed meanwhile
        if target.startswith(str(root)):
            count += 1
    return count


def filled(tmp_path, partitions, budget, batches=3):
    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG, max_open_files=budget)
    logs = [store.open_log("wide", p, CONFIG) for p in range(partitions)]
    for round_ in range(batches):
        for p, log in enumerate(logs):
            log.append(make_batch(2, ts=round_, value=f"p{p}r{round_}".encode()), now_ms=0)
    return store, logs


def read_all(log):
    return data_of(log.read(0, 1 << 20))


def test_the_budget_counts_descriptors_held_not_segments(tmp_path):
    store, logs = filled(tmp_path, partitions=120, budget=100)
    cache = store.open_segments
    assert cache.budget == 100
    assert cache.held <= 100
    assert cache.held == segment_fds(tmp_path)
    # Readers hold one descriptor per segment: 90 segments fit a budget of
    # 100 (the old count, three per segment, kept 33), and a second cycle
    # over them closes and reopens nothing.
    for log in logs[:90]:
        read_all(log)
    assert len(cache) >= 90
    evicted = cache.evictions
    for _ in range(3):
        for log in logs[:90]:
            read_all(log)
    assert cache.evictions == evicted
    assert cache.held == segment_fds(tmp_path) <= 100
    store.close()


def test_a_cycle_larger_than_the_budget_stays_bounded_and_reads_byte_for_byte(tmp_path):
    store, logs = filled(tmp_path, partitions=60, budget=20)
    expected = [read_all(log) for log in logs]
    cache = store.open_segments
    for _ in range(3):
        got = [read_all(log) for log in logs]
        assert got == expected
        assert cache.held == segment_fds(tmp_path) <= 20
    assert cache.evictions > 3 * 40
    # A range taken before its segment is evicted still sends its bytes:
    # fileno() reopens the file at send time.
    ranged = logs[0].read(0, 1 << 20).records
    for log in logs[1:]:
        read_all(log)
    assert logs[0].segments[0]._fd is None
    assert ranged.read() == expected[0]
    # Appends after an eviction land where they should (the index file is
    # reopened and its pending entries written).
    for log in logs:
        log.append(make_batch(1, value=b"late"), now_ms=0)
    assert cache.held == segment_fds(tmp_path) <= 20
    store.close()
    assert segment_fds(tmp_path) == 0
    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG, max_open_files=20)
    reopened = {log.partition: log for log in store.logs()}
    for p in range(len(logs)):
        assert reopened[p].log_end_offset == 7
        assert read_all(reopened[p]).startswith(expected[p])
        assert store.open_segments.held <= 20
    store.close()
    assert segment_fds(tmp_path) == 0


def test_index_and_transaction_index_descriptors_are_counted_and_closed(tmp_path):
    store, logs = filled(tmp_path, partitions=4, budget=1000, batches=40)
    cache = store.open_segments
    segment = logs[0].segments[-1]
    # Appends past a page of index entries hold the index files open.
    segment.txn_index.append((7, 0, 3, 0))
    assert segment.txn_index._fd is not None
    assert cache.held == segment_fds(tmp_path)
    held = cache._open[segment]
    assert held >= 2
    segment.release_files()  # what an eviction does
    assert segment._fd is None and segment.txn_index._fd is None
    assert cache.held == segment_fds(tmp_path)
    assert segment not in cache._open
    # The transaction index was fsynced and is read back whole.
    assert segment.txn_index.entries == [(7, 0, 3, 0)]
    store.close()
    assert segment_fds(tmp_path) == 0


def test_an_open_that_runs_out_of_descriptors_closes_half_and_succeeds(tmp_path):
    store, logs = filled(tmp_path, partitions=80, budget=10_000)
    cache = store.open_segments
    expected = [read_all(log) for log in logs]
    assert cache.held >= 80
    used = len(os.listdir("/proc/self/fd"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Room for 20 more descriptors only: evicted ones are needed back.
    for log in logs:
        log.segments[0].release_files()
    assert cache.held == 0
    resource.setrlimit(resource.RLIMIT_NOFILE, (used - 80 + 20, hard))
    try:
        got = [read_all(log) for log in logs]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert got == expected
    assert cache.out_of_descriptors > 0
    assert cache.held == segment_fds(tmp_path)
    store.close()


def test_a_segment_in_use_is_never_closed_under_it(tmp_path):
    # A budget smaller than one segment's own files: the segment being
    # used keeps them; everything else is closed.
    store, logs = filled(tmp_path, partitions=3, budget=1, batches=40)
    for log in logs:
        assert read_all(log)
        assert len(store.open_segments) == 1
    store.close()


@pytest.mark.parametrize(
    ("files", "segments", "soft", "budget"),
    [
        (500, 0, 20_000, 500),  # log.max.open.files as set
        (500, 9, 20_000, 500),  # ... wins over log.max.open.segments
        (0, 100, 20_000, 300),  # the older key: three descriptors a segment
        (0, 0, 20_000, 15_000),  # auto: a quarter left for sockets and the rest
        (0, 0, 1_024, 512),  # ... at least 512 of them
        (0, 0, 300, openfiles.MIN_AUTO),
    ],
)
def test_budget_from_settings_and_limit(monkeypatch, files, segments, soft, budget):
    monkeypatch.setattr(openfiles.resource, "getrlimit", lambda _which: (soft, soft))
    assert descriptor_budget(files, segments) == budget
    assert OpenSegments(files, segments).budget == budget
