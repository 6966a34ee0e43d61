"""The log cleaner on real segment files in tmp_path, driven by a task.Clock.

Compaction keeps the latest record per key, tombstones for
delete.retention.ms after their segment was cleaned, compressed batches in
their codec, offsets and producer batches; swaps recover after a crash at
each step.
"""

import os
from types import SimpleNamespace

import pytest
from twisted.internet.task import Clock

from pluglog import errors
from pluglog.broker.log_cleaner import ILogCleaner, LogCleaner, _inline_runner, cleanable_range
from pluglog.config import BrokerConfig, TopicConfig
from pluglog.protocol.control import marker_batch
from pluglog.protocol.records import Record, build_batch, iter_batches
from pluglog.storage import cleaner as cleaner_module
from pluglog.storage import compaction
from pluglog.storage.manager import SegmentLogStorage
from pluglog.storage.swap import SwapAborted, swap_in

COMPACT = TopicConfig(
    segment_bytes=2048,
    index_interval_bytes=256,
    cleanup_policy="compact",
    delete_retention_ms=10_000,
    file_delete_delay_ms=0,
)


def keyed(key, value, ts=1000, codec=0, **kw):
    value = None if value is None else value.encode()
    return build_batch([Record(key.encode(), value, timestamp=ts)], compression=codec, **kw)


class Harness:
    """A storage with one compacted log, a Clock and a LogCleaner running inline."""

    def __init__(self, path, topic_config=COMPACT, **broker_changes):
        self.clock = Clock()
        self.clock.advance(1_000)
        self.path = str(path)
        self.config = BrokerConfig(data_dir=self.path, **broker_changes)
        self.storage = SegmentLogStorage(self.path, topic_config, self.clock)
        self.log = self.storage.open_log("t", 0, topic_config)
        part = SimpleNamespace(
            topic="t",
            index=0,
            log=self.log,
            config=topic_config,
            # No transactions in these logs: nothing unstable, nothing aborted.
            transactions_for_cleaning=lambda: (None, []),
            # Fetch sessions forget what they knew of the log (Partition.log_rewritten).
            log_rewritten=lambda: self.rewritten.append(self.log.log_end_offset),
        )
        self.rewritten = []
        self.broker = SimpleNamespace(
            config=self.config,
            reactor=self.clock,
            partitions={("t", 0): part},
            now_ms=lambda: int(self.clock.seconds() * 1000),
        )
        self.cleaner = LogCleaner(self.broker, runner=_inline_runner)

    def append(self, batch):
        return self.log.append(batch, int(self.clock.seconds() * 1000))

    def clean(self):
        results = []
        self.cleaner.run_once().addCallback(results.extend)
        return results

    def batches(self):
        out = []
        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, 1 << 20).records
            data = data.read() if hasattr(data, "read") else data
            found = list(iter_batches(data))
            if not found:
                break
            out += found
            offset = found[-1].base_offset + found[-1].last_offset_delta + 1
        return out

    def records(self):
        out = []
        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            result = self.log.read(offset, 1 << 20)
            data = result.records.read() if hasattr(result.records, "read") else result.records
            if not data:
                break
            for batch in iter_batches(data):
                for record in batch.records:
                    if record.offset >= offset:
                        out.append((record.offset, record.key, record.value))
                offset = batch.base_offset + batch.last_offset_delta + 1
        return out


def latest_per_key(history):
    latest = {}
    for offset, key, value in history:
        latest[key] = (offset, value)
    return latest


def test_provides_interface(tmp_path):
    from zope.interface.verify import verifyObject

    assert verifyObject(ILogCleaner, Harness(tmp_path).cleaner)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_keeps_latest_value_per_key_with_offsets(tmp_path, codec):
    h = Harness(tmp_path)
    history = []
    for i in range(300):
        key, value = f"k{i % 20}", f"v{i}"
        # Several records per batch, compressed: the batch is filtered whole.
        batch = build_batch(
            [Record(key.encode(), value.encode(), timestamp=1000 + i)]
            + [Record(f"k{(i + 7) % 20}".encode(), f"w{i}".encode(), timestamp=1000 + i)],
            compression=codec,
        )
        info = h.append(batch)
        history += [
            (info.first_offset, key.encode(), value.encode()),
            (info.first_offset + 1, f"k{(i + 7) % 20}".encode(), f"w{i}".encode()),
        ]
    before = h.log.size_bytes
    end = h.log.log_end_offset
    h.log.roll(0)
    assert h.rewritten == []
    [result] = h.clean()
    assert result.end_offset == end
    assert h.rewritten == [end]  # told once, after the swap
    got = h.records()
    assert {key: (o, v) for o, key, v in got} == latest_per_key(history)
    assert len(got) == 20  # exactly one record per key
    assert h.log.size_bytes < before / 5
    assert h.log.log_end_offset == end  # offsets preserved, appends continue
    assert h.append(keyed("k0", "after")).first_offset == end
    # Batches keep their codec.
    assert {b.compression for b in h.batches() if b.records and b.base_offset < end} == {codec}


def test_tombstones_kept_for_delete_retention_then_removed(tmp_path):
    h = Harness(tmp_path)
    for i in range(100):
        h.append(keyed(f"k{i % 10}", f"v{i}"))
    h.append(keyed("k3", None))  # delete k3
    h.append(keyed("k4", None))
    h.log.roll(0)
    h.clean()
    got = latest_per_key(h.records())
    assert got[b"k3"][1] is None and got[b"k4"][1] is None  # tombstones still visible
    assert len(h.records()) == 10
    h.clock.advance(5)  # 5 s < delete.retention.ms (10 s): nothing due
    assert h.clean() == []
    h.clock.advance(6)  # past the horizon: due without new data
    h.clean()
    keys = [key for _, key, _ in h.records()]
    assert b"k3" not in keys and b"k4" not in keys
    assert len(keys) == 8


def test_min_compaction_lag_leaves_young_segments(tmp_path):
    config = TopicConfig(**{**COMPACT.__dict__, "min_compaction_lag_ms": 60_000})
    h = Harness(tmp_path, config)
    for i in range(60):
        h.append(keyed(f"k{i % 3}", f"v{i}", ts=int(h.clock.seconds() * 1000)))
    h.log.roll(0)
    assert h.clean() == []  # every record is younger than the lag
    h.clock.advance(61)
    [result] = h.clean()
    assert len(h.records()) == 3 and result.records_removed == 57


def test_dirty_ratio_threshold(tmp_path):
    config = TopicConfig(**{**COMPACT.__dict__, "min_cleanable_dirty_ratio": 0.99})
    h = Harness(tmp_path, config)
    for i in range(60):
        h.append(keyed(f"k{i}", "v"))
    h.log.roll(0)
    [result] = h.clean()  # everything dirty: ratio 1.0
    h.append(keyed("k0", "new"))
    h.log.roll(0)
    # One small dirty segment against 60 clean records: below 0.99.
    found = cleanable_range(h.log, config, h.cleaner.first_dirty[("t", 0)], 0)
    assert 0 < found[2] < 0.99
    assert h.clean() == []


def test_dedupe_buffer_bounds_a_pass(tmp_path):
    # Room for 30 keys per pass: the pass stops at a segment boundary.
    config = TopicConfig(**{**COMPACT.__dict__, "min_cleanable_dirty_ratio": 0.0})
    h = Harness(tmp_path, config, log_cleaner_dedupe_buffer_size=30 * 24 * 10 // 9 + 24)
    for i in range(200):
        h.append(keyed(f"key-{i}", "v"))
    h.log.roll(0)
    [first] = h.clean()
    assert 0 < first.end_offset < 200
    assert h.cleaner.first_dirty[("t", 0)] == first.end_offset
    while h.cleaner.first_dirty[("t", 0)] < 200:
        assert h.clean()
    assert len(h.records()) == 200  # all keys distinct: nothing removed


def test_last_batch_of_each_producer_is_retained_empty(tmp_path):
    h = Harness(tmp_path)
    h.append(keyed("a", "1", producer_id=7, producer_epoch=0, base_sequence=0))
    h.append(keyed("b", "1"))
    h.append(keyed("a", "2"))  # supersedes the producer's only batch
    h.log.roll(0)
    h.clean()
    headers = list(h.log.batch_headers(0))
    producer = [x for x in headers if x.producer_id == 7]
    assert len(producer) == 1
    assert producer[0].records_count == 0 and producer[0].base_sequence == 0
    assert [(o, k) for o, k, _ in h.records()] == [(1, b"b"), (2, b"a")]


def test_reads_of_replaced_segments_keep_working(tmp_path):
    config = TopicConfig(**{**COMPACT.__dict__, "file_delete_delay_ms": 60_000})
    h = Harness(tmp_path, config)
    for i in range(100):
        h.append(keyed(f"k{i % 5}", f"v{i}"))
    h.log.roll(0)
    held = h.log.read(0, 1 << 20).records
    before = held.read()
    h.clean()
    assert held.read() == before  # the old file is renamed, not gone
    h.clock.advance(61)
    assert not [n for n in os.listdir(h.log.directory) if n.endswith(".deleted")]


def test_swap_aborts_when_retention_removed_a_source(tmp_path):
    h = Harness(tmp_path)
    for i in range(100):
        h.append(keyed(f"k{i % 5}", f"v{i}"))
    h.log.roll(0)
    [_, _, job] = h.cleaner.due_logs()[0]
    result = cleaner_module.clean(job)
    h.log.delete_oldest_segments(1)
    with pytest.raises(SwapAborted):
        swap_in(h.log, result.groups[0])
    base = f"{result.groups[0].base_offset:020d}"
    assert not [n for n in os.listdir(h.log.directory) if n.startswith(base) and ".cleaned" in n]


@pytest.mark.parametrize("stop_after", [0, 1, 2, 3])
def test_crash_after_each_swap_step_recovers(tmp_path, stop_after):
    """0: crash with only .cleaned files; 1: after .cleaned -> .swap; 2: after
    the sources became .deleted; 3: after .swap -> live (list not updated)."""
    h = Harness(tmp_path)
    history = []
    for i in range(200):
        info = h.append(keyed(f"k{i % 10}", f"v{i}"))
        history.append((info.first_offset, f"k{i % 10}".encode(), f"v{i}".encode()))
    h.log.roll(0)
    h.log.flush()
    [_, _, job] = h.cleaner.due_logs()[0]
    result = cleaner_module.clean(job)
    assert len(result.groups) >= 1
    if stop_after:
        swap_in(h.log, result.groups[0], stop_after=stop_after)
    # "Crash": drop the objects without closing and reopen the directory.
    storage = SegmentLogStorage(h.path, COMPACT)
    log = storage.get_log("t", 0)
    names = os.listdir(log.directory)
    assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
    h.log, h.broker.partitions[("t", 0)].log = log, log
    got = h.records()
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(offsets)
    assert latest_per_key(got) == latest_per_key(history)  # nothing lost, nothing stale
    if stop_after >= 1:
        assert len(got) < 200  # the committed swap took effect
    else:
        assert len(got) == 200
    assert log.log_end_offset == 200
    storage.close()


def test_compaction_module_round_trip():
    batch = build_batch(
        [Record(b"a", b"1"), Record(None, b"x"), Record(b"b", None)], base_offset=10, compression=3
    )
    assert list(compaction.iter_keys(batch)) == [
        (10, b"a", False),
        (11, None, False),
        (12, b"b", True),
    ]
    assert compaction.first_keyless_record(batch) == 1
    assert compaction.keyless_records(batch) == [1]
    with pytest.raises(errors.InvalidRecordsError) as refused:
        compaction.require_keys(batch)
    assert refused.value.record_errors == [
        (1, "a compacted topic cannot accept a record without a key")
    ]
    assert refused.value.error_code == errors.INVALID_RECORD
    new, kept, removed = compaction.filter_batch(batch, lambda o, k, n: k is not None)
    assert (kept, removed) == (2, 1)
    [parsed] = list(iter_batches(new))  # CRC verified
    assert parsed.base_offset == 10 and parsed.last_offset_delta == 2
    assert [(r.offset, r.key, r.value) for r in parsed.records] == [
        (10, b"a", b"1"),
        (12, b"b", None),
    ]
    assert compaction.filter_batch(batch, lambda *a: True)[0] is batch


def test_tombstone_clock_starts_when_the_cleaned_segment_is_swapped_in(tmp_path):
    from twisted.internet import defer

    h = Harness(tmp_path)
    for i in range(50):
        h.append(keyed(f"k{i % 5}", f"v{i}"))
    h.append(keyed("k1", None))
    h.log.roll(0)
    pending = []

    def slow_runner(job):
        # The pass "takes" 30 s, longer than delete.retention.ms (10 s).
        d = defer.Deferred()
        pending.append((d, job))
        return d

    h.cleaner.runner = slow_runner
    h.cleaner.run_once()
    [(d, job)] = pending
    result = cleaner_module.clean(job)
    h.clock.advance(30)
    d.callback(result)
    h.cleaner.runner = _inline_runner
    assert (b"k1", None) in [(k, v) for _, k, v in h.records()]
    assert h.clean() == []  # the horizon is 10 s after the swap, not after the start
    h.clock.advance(11)
    h.clean()
    assert b"k1" not in [k for _, k, _ in h.records()]


def test_io_rate_limit_sleeps_to_hold_the_rate():
    now = [0.0]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    throttle = cleaner_module.Throttler(1000.0, clock=lambda: now[0], sleep=sleep)
    throttle(500)  # 0.5 s worth of bytes at once: sleep 0.5 s
    assert slept == [pytest.approx(0.5)]
    now[0] += 2.0
    throttle(1000)  # 1,500 bytes in 2.5 s: under the rate, no sleep
    assert len(slept) == 1
    unlimited = cleaner_module.Throttler(float("inf"), clock=lambda: 0.0, sleep=sleep)
    unlimited(10**9)
    assert len(slept) == 1


def test_stale_checkpoint_of_a_recreated_topic_is_ignored(tmp_path):
    h = Harness(tmp_path)
    for i in range(60):
        h.append(keyed(f"k{i % 3}", "v"))
    h.log.roll(0)
    h.cleaner.first_dirty[("t", 0)] = 10**6  # left by an older topic of that name
    [result] = h.clean()
    assert result.records_removed == 57


def test_aborted_transactions_are_dropped_and_their_index_carried(tmp_path):
    h = Harness(tmp_path)
    # A committed value of k0, then an aborted transaction writing k0 again.
    h.append(keyed("k0", "committed"))
    h.append(keyed("k0", "aborted", producer_id=7, producer_epoch=0, is_transactional=True))
    marker = marker_batch(7, 0, False, 0, 1000)
    info = h.log.append(marker, 1000)
    h.log.append_aborted_txn(7, 1, info.first_offset, info.first_offset + 1)
    for i in range(40):
        h.append(keyed(f"f{i}", "x" * 100))  # roll the segments past the transaction
    h.broker.partitions[("t", 0)].transactions_for_cleaning = lambda: (
        None,
        [(7, 1, info.first_offset)],
    )
    h.clock.advance(1)
    h.clean()
    values = {key: value for _offset, key, value in h.records() if key == b"k0"}
    # The aborted write did not shadow the committed one, and is gone.
    assert values == {b"k0": b"committed"}
    assert h.log.aborted_txns() == [(7, 1, info.first_offset, info.first_offset + 1)]
    assert any(s.txn_index.entries for s in h.log.segments)


def test_a_marker_goes_once_its_transaction_has_no_record_left(tmp_path):
    h = Harness(tmp_path)
    # Transaction 1 (producer 7) writes k0 and commits; transaction 2
    # (producer 8) writes k1 and commits; later plain writes supersede k0 only.
    h.append(keyed("k0", "t1", producer_id=7, producer_epoch=0, is_transactional=True))
    h.append(marker_batch(7, 0, True, 0, 1000))
    h.append(keyed("k1", "t2", producer_id=8, producer_epoch=0, is_transactional=True))
    h.append(marker_batch(8, 0, True, 0, 1000))
    h.append(keyed("k0", "later"))
    for i in range(40):
        h.append(keyed(f"f{i}", "x" * 100))

    def markers():
        return sorted(b.producer_id for b in h.batches() if b.is_control)

    h.clock.advance(1)
    h.clean()
    assert markers() == [7, 8]  # within delete.retention.ms of the first cleaning
    h.clock.advance(COMPACT.delete_retention_ms / 1000 + 1)
    h.append(keyed("f0", "y"))
    h.clean()
    # Producer 7's transaction has no record left: its marker went; producer
    # 8's k1 is still there, so its marker stays.
    assert markers() == [8]
    assert {k: v for _o, k, v in h.records()}[b"k1"] == b"t2"
