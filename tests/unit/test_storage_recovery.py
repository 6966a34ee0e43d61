"""Restart and crash recovery of the segment storage (real files in tmp_path)."""

import dataclasses
import os

import pytest
from twisted.internet.task import Clock

from pluglog.config import TopicConfig
from pluglog.storage.filenames import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT
from pluglog.storage.manager import SegmentLogStorage, read_checkpoint
from tests.unit.test_storage_segments import make_batch, read_offsets

CONFIG = TopicConfig(segment_bytes=1000, index_interval_bytes=150)


def fill(path, batches=30, records=3, config=CONFIG):
    """Write ``batches`` batches; return (storage, log, [(first, last, position)])."""
    store = SegmentLogStorage(str(path), topic_defaults=config)
    log = store.open_log("orders", 0, config)
    spans = []
    for i in range(batches):
        info = log.append(make_batch(records, ts=1000 + i), now_ms=i)
        spans.append((info.first_offset, info.last_offset))
    return store, log, spans


def reopen(path):
    # Logs found on disk are recovered with the storage's topic defaults.
    store = SegmentLogStorage(str(path), topic_defaults=CONFIG)
    return store, store.get_log("orders", 0)


def log_dir(path):
    return os.path.join(str(path), "orders-0")


def segment_file(path, base, suffix=".log"):
    return os.path.join(log_dir(path), f"{base:020d}{suffix}")


def test_clean_close_and_reopen_keeps_everything(tmp_path):
    store, log, spans = fill(tmp_path)
    infos = log.segment_infos()
    store.close()
    assert os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)
    store, log = reopen(tmp_path)
    assert store.opened_clean
    assert not os.path.exists(tmp_path / CLEAN_SHUTDOWN_FILE)  # a crash now is unclean
    assert log.log_end_offset == 90
    # created_ms is only known for segments created by this process.
    assert log.segment_infos() == [dataclasses.replace(i, created_ms=-1) for i in infos]
    assert read_offsets(log) == list(range(90))
    assert log.append(make_batch(1), now_ms=0).first_offset == 90
    store.close()


def test_clean_reopen_loads_old_indexes_lazily(tmp_path):
    store, log, _ = fill(tmp_path)
    store.close()
    store, log = reopen(tmp_path)
    assert len(log.segments) > 2
    assert [s._indexes_loaded for s in log.segments[:-1]] == [False] * (len(log.segments) - 1)
    log.read(1, 100)
    assert log.segments[0]._indexes_loaded
    store.close()


def test_reopen_without_close_keeps_everything(tmp_path):
    store, log, _ = fill(tmp_path)
    store, log = reopen(tmp_path)  # the first storage was never closed: a crash
    assert not store.opened_clean
    assert log.log_end_offset == 90
    assert read_offsets(log) == list(range(90))
    assert log.append(make_batch(2), now_ms=0).first_offset == 90
    store.close()


@pytest.mark.parametrize("closed", [False, True])
def test_torn_tail_is_cut(tmp_path, closed):
    store, log, spans = fill(tmp_path)
    active = log.segments[-1]
    positions = [p for p, _ in active._iter_headers(0, active.size)]
    base, size = active.base_offset, active.size
    if closed:
        store.close()
    # Cut the last batch in half, as a crash mid-write would.
    with open(segment_file(tmp_path, base), "r+b") as handle:
        handle.truncate(positions[-1] + 30)
    store, log = reopen(tmp_path)
    assert store.opened_clean is closed
    assert log.log_end_offset == 87
    assert read_offsets(log) == list(range(87))
    assert log.segments[-1].size == positions[-1] < size
    assert log.append(make_batch(1), now_ms=0).first_offset == 87
    assert read_offsets(log) == list(range(88))
    store.close()


def test_flipped_byte_cuts_from_the_damaged_batch(tmp_path):
    store, log, spans = fill(tmp_path)
    active = log.segments[-1]
    entries = list(active._iter_headers(0, active.size))
    victim_position, victim = entries[1]
    with open(segment_file(tmp_path, active.base_offset), "r+b") as handle:
        handle.seek(victim_position + 70)
        byte = handle.read(1)
        handle.seek(victim_position + 70)
        handle.write(bytes([byte[0] ^ 0x40]))
    store, log = reopen(tmp_path)
    assert log.log_end_offset == victim.base_offset
    assert read_offsets(log) == list(range(victim.base_offset))
    assert log.append(make_batch(1), now_ms=0).first_offset == victim.base_offset
    store.close()


def test_damage_in_older_segment_drops_later_segments(tmp_path):
    store, log, _ = fill(tmp_path)
    second = log.segments[1]
    later = [s.base_offset for s in log.segments[2:]]
    first_batch_end = next(iter(second._iter_headers(0, second.size)))[1].size
    with open(segment_file(tmp_path, second.base_offset), "r+b") as handle:
        handle.seek(first_batch_end + 65)
        handle.write(b"\xff\xff\xff")
    store, log = reopen(tmp_path)  # unclean, recovery point 0: everything is re-scanned
    assert log.log_end_offset == second.base_offset + 3
    assert read_offsets(log) == list(range(second.base_offset + 3))
    for base in later:
        assert not os.path.exists(segment_file(tmp_path, base))
    store.close()


def test_segments_below_recovery_point_are_not_rescanned(tmp_path):
    store, log, _ = fill(tmp_path)
    store.flush_all()
    assert read_checkpoint(str(tmp_path / RECOVERY_POINT_CHECKPOINT)) == {("orders", 0): 90}
    first = log.segments[0]
    with open(segment_file(tmp_path, 0), "r+b") as handle:
        handle.seek(first.size - 5)
        handle.write(b"\x00\x01\x02")  # only a full rescan would notice
    store, log = reopen(tmp_path)
    assert not store.opened_clean
    assert log.log_end_offset == 90
    assert log.segments[0].size == first.size
    store.close()


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_missing_index_is_rebuilt(tmp_path, suffix):
    store, log, spans = fill(tmp_path)
    store.close()
    os.unlink(segment_file(tmp_path, 0, suffix))
    active_base = log.segments[-1].base_offset
    os.unlink(segment_file(tmp_path, active_base, suffix))
    store, log = reopen(tmp_path)
    assert os.path.exists(segment_file(tmp_path, 0, suffix))
    assert os.path.getsize(segment_file(tmp_path, 0, ".index")) > 0
    for first, last in spans:
        assert log.read(last, 1).first_offset == first
    assert log.offset_for_timestamp(1010)[0] == spans[10][0]
    assert log.append(make_batch(1), now_ms=0).first_offset == 90
    store.close()


def test_corrupt_index_is_rebuilt_when_loaded(tmp_path):
    store, log, spans = fill(tmp_path)
    store.close()
    with open(segment_file(tmp_path, 0, ".index"), "ab") as handle:
        handle.write(b"\x01\x02\x03")  # not a multiple of the entry size
    with open(segment_file(tmp_path, 0, ".timeindex"), "r+b") as handle:
        handle.write(b"\x7f" * 12)  # a huge first timestamp: out of order
    store, log = reopen(tmp_path)
    for first, _last in spans:
        assert log.read(first, 1).first_offset == first
    assert log.offset_for_timestamp(1001) == (3, 1001)
    assert os.path.getsize(segment_file(tmp_path, 0, ".index")) % 8 == 0
    store.close()


def test_leftover_deleted_and_tmp_files_removed(tmp_path):
    store, log, _ = fill(tmp_path)
    store.close()
    junk = [
        os.path.join(log_dir(tmp_path), "00000000000000000007.log.deleted"),
        os.path.join(log_dir(tmp_path), "00000000000000000000.index.tmp"),
        str(tmp_path / (RECOVERY_POINT_CHECKPOINT + ".tmp")),
    ]
    for path in junk:
        with open(path, "wb") as handle:
            handle.write(b"junk")
    os.makedirs(tmp_path / "gone-0.abc.deleted")
    store, log = reopen(tmp_path)
    assert not any(os.path.exists(p) for p in junk)
    assert not os.path.exists(tmp_path / "gone-0.abc.deleted")
    assert log.log_end_offset == 90
    store.close()


def test_checkpoint_file_format(tmp_path):
    store = SegmentLogStorage(str(tmp_path))
    for topic, partition in (("a-b", 3), ("a-b", 0), ("z", 1)):
        log = store.open_log(topic, partition, CONFIG)
        log.append(make_batch(partition + 1), now_ms=0)
    store.close()
    with open(tmp_path / RECOVERY_POINT_CHECKPOINT) as handle:
        assert handle.read() == "0\n3\na-b 0 1\na-b 3 4\nz 1 2\n"
    store = SegmentLogStorage(str(tmp_path))
    assert sorted((log.topic, log.partition, log.log_end_offset) for log in store.logs()) == [
        ("a-b", 0, 1),
        ("a-b", 3, 4),
        ("z", 1, 2),
    ]
    store.close()


def test_malformed_checkpoint_forces_full_recovery(tmp_path):
    store, log, _ = fill(tmp_path)
    store.close()
    with open(tmp_path / RECOVERY_POINT_CHECKPOINT, "w") as handle:
        handle.write("0\n5\norders 0\n")
    store, log = reopen(tmp_path)
    assert log.log_end_offset == 90
    assert log.recovery_point == 90
    store.close()


def test_log_start_offset_survives_restart(tmp_path):
    store, log, _ = fill(tmp_path)
    log.delete_records_before(40)
    store.close()
    store, log = reopen(tmp_path)
    assert log.log_start_offset == 40
    store.close()


def test_delete_log_renames_then_removes(tmp_path):
    clock = Clock()
    store = SegmentLogStorage(str(tmp_path), reactor=clock)
    log = store.open_log("orders", 0, TopicConfig(file_delete_delay_ms=1000))
    log.append(make_batch(2), now_ms=0)
    store.delete_log("orders", 0)
    assert store.get_log("orders", 0) is None
    assert not os.path.exists(log_dir(tmp_path))
    assert [n for n in os.listdir(tmp_path) if n.endswith(".deleted")]
    clock.advance(1)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".deleted")]
    assert store.open_log("orders", 0, CONFIG).log_end_offset == 0
    store.close()


def test_delete_log_of_a_249_character_topic(tmp_path):
    # Found by bench/fuzz.py: the ".<uuid>.deleted" suffix pushed the name of
    # a maximal (249-character) topic's directory past NAME_MAX.
    topic = "x" * 249
    clock = Clock()
    store = SegmentLogStorage(str(tmp_path), reactor=clock)
    log = store.open_log(topic, 0, TopicConfig(file_delete_delay_ms=1000))
    log.append(make_batch(2), now_ms=0)
    store.delete_log(topic, 0)
    [deleted] = [n for n in os.listdir(tmp_path) if n.endswith(".deleted")]
    assert len(deleted) == 255 and deleted.startswith("x" * 200)
    clock.advance(1)
    assert not os.listdir(tmp_path) or not [n for n in os.listdir(tmp_path) if "xxx" in n]


def test_flipped_byte_in_active_segment_after_clean_close_is_cut(tmp_path):
    # A clean close used to skip every check below the last index entry: the
    # log end stayed past a batch no consumer could read.
    store, log, _ = fill(tmp_path, config=dataclasses.replace(CONFIG, segment_bytes=100_000))
    active = log.segments[-1]
    entries = list(active._iter_headers(0, active.size))
    victim_position, victim = entries[len(entries) // 2]
    store.close()
    with open(segment_file(tmp_path, active.base_offset), "r+b") as handle:
        handle.seek(victim_position + 70)
        byte = handle.read(1)
        handle.seek(victim_position + 70)
        handle.write(bytes([byte[0] ^ 0x40]))
    store, log = reopen(tmp_path)
    assert store.opened_clean
    assert log.log_end_offset == victim.base_offset
    assert read_offsets(log) == list(range(victim.base_offset))
    store.close()


def test_unopenable_log_is_offline_and_others_open(tmp_path):
    from pluglog.errors import KafkaStorageError

    store, log, _ = fill(tmp_path)
    other = store.open_log("orders", 1, CONFIG)
    other.append(make_batch(2), now_ms=0)
    store.close()
    path = segment_file(tmp_path, 0)
    os.rename(path, path + ".moved")
    os.mkdir(path)  # opening a directory as the segment file fails
    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG)
    assert list(store.offline_logs()) == [("orders", 0)]
    with pytest.raises(KafkaStorageError, match="orders-0 could not be opened"):
        store.open_log("orders", 0, CONFIG)
    assert store.open_log("orders", 1, CONFIG).log_end_offset == 2
    store.close()


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_descriptors_scale_with_segments_in_use(tmp_path):
    from pluglog.storage.results import FileRange

    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG, max_open_segments=8)
    before = _open_fds()
    logs = [store.open_log("many", p, CONFIG) for p in range(200)]
    for round_ in range(3):
        for log in logs:
            log.append(make_batch(2, ts=round_), now_ms=round_)
    # 200 partitions; log.max.open.segments=8 is a budget of 24 descriptors.
    assert store.open_segments.budget == 8 * 3
    assert store.open_segments.held <= 8 * 3
    assert _open_fds() - before <= 8 * 3
    assert store.open_segments.evictions > 0
    # Evicted segments read back (reopened on use), through a FileRange too.
    for log in logs:
        assert read_offsets(log) == list(range(6))
    ranged = logs[0].read(0, 1 << 20).records
    assert isinstance(ranged, FileRange)
    for log in logs[1:50]:
        log.read(0, 1 << 20)  # evicts logs[0]'s segment
    assert ranged.read()[:8] == (0).to_bytes(8, "big")
    store.close()
    assert _open_fds() <= before
    # Reopen: a clean start opens nothing but the active segments it checks.
    store = SegmentLogStorage(str(tmp_path), topic_defaults=CONFIG, max_open_segments=8)
    assert _open_fds() - before <= 8 * 3
    assert [log.log_end_offset for log in store.logs()] == [6] * 200
    store.close()


class ThreadedClock(Clock):
    """A Clock with the reactor's ``callInThread``, run when the test says."""

    def __init__(self):
        super().__init__()
        self.in_thread = []

    def callInThread(self, function, *args):  # noqa: N802 - Twisted's name
        self.in_thread.append((function, args))


def test_a_deleted_segments_files_are_unlinked_off_the_event_loop(tmp_path):
    # Unlinking a page-cached segment frees its pages in the calling thread
    # (0.4-1.6 ms for 8 MiB): retention must not do it on the reactor.
    clock = ThreadedClock()
    store = SegmentLogStorage(str(tmp_path), reactor=clock)
    batch = make_batch(2)
    log = store.open_log("orders", 0, TopicConfig(segment_bytes=len(batch) * 2))
    for _ in range(6):
        log.append(batch, now_ms=0)
    assert log.delete_records_before(5) == 1
    directory = log_dir(tmp_path)
    clock.advance(60)  # file.delete.delay.ms has passed
    deleted = [n for n in os.listdir(directory) if n.endswith(".deleted")]
    assert any(n.endswith(".log.deleted") for n in deleted)
    [(function, args)] = clock.in_thread
    function(*args)
    assert not [n for n in os.listdir(directory) if n.endswith(".deleted")]
    assert [i.base_offset for i in log.segment_infos()] == [4, 8]
    store.close()


def synced(path, batches):
    """A storage on a Clock with ``batches`` batches of 3, flushed and checkpointed."""
    clock = Clock()
    store = SegmentLogStorage(str(path), topic_defaults=CONFIG, reactor=clock)
    log = store.open_log("orders", 0, CONFIG)
    for i in range(batches):
        log.append(make_batch(3, ts=1000 + i), now_ms=i)
    store.flush_all()
    return clock, store, log


def test_a_truncation_below_the_checkpoint_is_checkpointed_before_new_writes(tmp_path):
    # A follower cuts synced data and writes new data in its place; after a
    # crash the segment holding it must be re-scanned, so the checkpoint on
    # disk may not keep the old, higher recovery point (Kafka's truncateTo).
    clock, store, log = synced(tmp_path, 30)
    checkpoint = str(tmp_path / RECOVERY_POINT_CHECKPOINT)
    assert read_checkpoint(checkpoint) == {("orders", 0): 90}
    log.truncate_to(6)
    clock.advance(0)  # once per reactor turn, before the next Fetch answer
    assert read_checkpoint(checkpoint) == {("orders", 0): 6}
    for i in range(20):
        log.append(make_batch(3, ts=2000 + i), now_ms=i)
    assert len(log.segments) > 1 and log.log_end_offset == 66
    # The crash tears a rewritten batch of the first segment (never synced).
    first = log.segments[0]
    position, victim = list(first._iter_headers(0, first.size))[3]
    assert victim.base_offset >= 6
    with open(segment_file(tmp_path, 0), "r+b") as handle:
        handle.seek(position + 65)
        handle.write(b"\xff\xff\xff")
    store, log = reopen(tmp_path)
    assert log.log_end_offset == victim.base_offset
    assert read_offsets(log) == list(range(victim.base_offset))
    store.close()


def test_a_truncation_above_the_checkpoint_writes_nothing(tmp_path):
    clock, store, log = synced(tmp_path, 10)
    for i in range(10):
        log.append(make_batch(3, ts=2000 + i), now_ms=i)
    log.truncate_to(45)  # only unsynced data is cut: the checkpoint still holds
    assert store._truncation_call is None
    clock.advance(0)
    assert read_checkpoint(str(tmp_path / RECOVERY_POINT_CHECKPOINT)) == {("orders", 0): 30}
    store.close()
