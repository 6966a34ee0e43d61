"""Tiered storage's storage side: segment metadata, the filesystem provider,
the remote tier's reads and the log's rules with a tier attached.

Uploads here are real copies through the ``filesystem`` provider into a
temporary directory; the reader pool is replaced by a synchronous call
(the pool is the manager's, tested with real brokers in
tests/integration/test_tiered_storage.py).
"""

import os
import struct

import pytest
from twisted.internet import defer

from pluglog.broker.remote_config import check_remote_storage
from pluglog.config import BrokerConfig, TopicConfig, parse_settings
from pluglog.errors import InvalidConfigError, OffsetOutOfRangeError, RemoteStorageError
from pluglog.protocol.records import Record, build_batch, iter_batches
from pluglog.storage.manager import SegmentLogStorage
from pluglog.storage.remote.filesystem import FilesystemRemoteStorage
from pluglog.storage.remote.metadata import (
    COPY_SEGMENT_FINISHED,
    RemoteSegment,
    epoch_checkpoint_bytes,
    epochs_in_range,
)
from pluglog.storage.remote.tier import (
    CHUNK_BYTES,
    ChunkCache,
    RemoteTier,
    index_position,
    trim_index,
)

CONFIG = TopicConfig(segment_bytes=16384, index_interval_bytes=1024, remote_storage_enable=True)


def batch(i, size=300):
    value = (b"value-%06d-" % i).ljust(size, b"x")
    return build_batch([Record(b"k%d" % i, value, [], 1000 + i)])


def synchronous(function, *args):
    return defer.maybeDeferred(function, *args)


def upload_closed(log, remote):
    """Copy every closed segment of ``log`` as the manager does; return the
    finished RemoteSegments."""
    out = []
    for segment in log.segments[:-1]:
        meta = RemoteSegment.new(
            log.topic,
            log.partition,
            segment.base_offset,
            segment.next_offset - 1,
            segment.largest_timestamp,
            segment.size,
            [(0, 0)],
        ).with_state(COPY_SEGMENT_FINISHED, 1, 0)
        segment.flush()
        remote.copy_segment(
            meta,
            {
                "log": segment.log_path,
                "index": segment.index.path,
                "timeindex": segment.time_index.path,
                "leader_epoch": epoch_checkpoint_bytes(meta.leader_epochs),
            },
        )
        out.append(meta)
    return out


def drain(log, start):
    """Read from ``start`` to the log end, retrying while the tier fetches."""
    offset, out = start, []
    while offset < log.log_end_offset:
        result = log.read(offset, 5000, max_offset=log.log_end_offset)
        if not result.size:
            continue  # synchronous fetches: the next read hits the cache
        data = result.records if isinstance(result.records, bytes) else result.records.read()
        batches = list(iter_batches(data))
        out.append((offset, data))
        offset = batches[-1].last_offset + 1
    return out


@pytest.fixture
def tiered(tmp_path):
    storage = SegmentLogStorage(str(tmp_path / "data"))
    log = storage.open_log("t", 0, CONFIG)
    for i in range(400):
        log.append(batch(i), 1000 + i)
    remote = FilesystemRemoteStorage(str(tmp_path / "remote"))
    remote.check()
    yield log, remote
    storage.close()


def test_segment_metadata_round_trips_and_names_its_objects():
    seg = RemoteSegment.new("orders", 3, 120, 199, 5000, 4096, [(2, 100), (3, 150)])
    again = RemoteSegment.from_json(seg.with_state(COPY_SEGMENT_FINISHED, 7, 1).to_json())
    assert again.state == COPY_SEGMENT_FINISHED
    assert again.leader_epochs == ((2, 100), (3, 150))
    assert (again.base_offset, again.end_offset, again.next_offset) == (120, 199, 200)
    assert seg.object_key("log") == f"orders-3/00000000000000000120-{seg.segment_id}.log"
    assert seg.object_key("leader_epoch").endswith(".leader-epoch-checkpoint")
    assert RemoteSegment.new("t", 0, 0, 0, 0, 0, []).segment_id != seg.segment_id


def test_leader_epoch_slice_covers_only_the_segment():
    entries = [(0, 0), (1, 50), (4, 130), (5, 400)]
    assert epochs_in_range(entries, 100, 200) == [(1, 100), (4, 130)]
    assert epochs_in_range(entries, 0, 50) == [(0, 0)]
    assert epoch_checkpoint_bytes([(1, 100), (4, 130)]) == b"0\n2\n1 100\n4 130\n"


def test_offset_index_is_trimmed_and_searched():
    entries = b"".join(
        rel.to_bytes(4, "big") + pos.to_bytes(4, "big")
        for rel, pos in [(3, 100), (9, 400), (20, 900)]
    )
    index = trim_index(entries + b"\0" * 16)  # a preallocated tail
    assert len(index) == 24
    assert index_position(index, 2) == 0
    assert index_position(index, 9) == 400
    assert index_position(index, 19) == 400
    assert index_position(index, 10**6) == 900


def test_chunk_cache_stays_within_its_bound():
    cache = ChunkCache(1000)
    for i in range(10):
        cache.put(("s", "log", i), b"x" * 300)
    assert cache.size <= 1000
    assert cache.get(("s", "log", 9)) is not None
    assert cache.get(("s", "log", 0)) is None
    cache.drop_segment("s")
    assert cache.size == 0


def test_filesystem_provider_copies_fetches_and_deletes(tmp_path):
    remote = FilesystemRemoteStorage(str(tmp_path / "remote"))
    source = tmp_path / "seg.log"
    source.write_bytes(bytes(range(256)) * 10)
    seg = RemoteSegment.new("t", 0, 0, 9, 1, 2560, [])
    remote.copy_segment(seg, {"log": str(source), "leader_epoch": b"0\n0\n"})
    assert remote.fetch(seg, "log", 10, 20) == bytes(range(10, 20))
    assert remote.fetch(seg, "log", 2550, None) == bytes(range(246, 256))
    assert not [n for n in os.listdir(tmp_path / "remote" / "t-0") if n.endswith(".tmp")]
    remote.delete_segment(seg)
    remote.delete_segment(seg)  # idempotent
    assert os.listdir(tmp_path / "remote" / "t-0") == []
    with pytest.raises(RemoteStorageError, match=r"reading .*\.log failed"):
        remote.fetch(seg, "log", 0, 1)


def test_filesystem_provider_refuses_an_unusable_root(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(RemoteStorageError) as info:
        FilesystemRemoteStorage(str(blocker / "remote")).check()
    assert "rsm.config.filesystem.root" in str(info.value)
    assert "\n" not in str(info.value)
    with pytest.raises(RemoteStorageError, match="rsm.config.filesystem.root is not set"):
        FilesystemRemoteStorage("")


def test_reads_below_the_local_start_come_from_the_remote_tier(tiered):
    log, remote = tiered
    assert len(log.segments) > 4
    before = drain(log, 0)
    uploaded = upload_closed(log, remote)
    tier = RemoteTier("t", 0, remote, ChunkCache(1 << 30), synchronous)
    woken = []
    tier.on_ready = lambda: woken.append(1)
    log.remote_tier = tier
    # Not loaded yet: a read below the local start waits rather than failing.
    tier.set_segments(uploaded)
    log.delete_oldest_segments(len(log.segments))
    assert log.log_start_offset > 0
    assert log.read(0, 5000, max_offset=log.log_end_offset).size == 0
    tier.loaded = True
    after = drain(log, 0)
    assert [d for _o, d in after] == [d for _o, d in before]
    assert woken  # fetched bytes wake parked fetches
    # A read starting mid-batch-run finds its batch through the index.
    middle = uploaded[1].base_offset + 7
    result = log.read(middle, 5000, max_offset=log.log_end_offset)
    while not result.size:
        result = log.read(middle, 5000, max_offset=log.log_end_offset)
    first = next(iter_batches(result.records))
    assert first.base_offset <= middle <= first.last_offset


def test_local_retention_keeps_segments_not_uploaded(tiered):
    log, remote = tiered
    tier = RemoteTier("t", 0, remote, ChunkCache(1 << 20), synchronous)
    tier.loaded = True
    log.remote_tier = tier
    closed = len(log.segments) - 1
    assert log.delete_oldest_segments(closed) == 0  # nothing uploaded yet
    uploaded = upload_closed(log, remote)
    tier.set_segments(uploaded[:2])
    assert log.delete_oldest_segments(closed) == 2
    assert log.log_start_offset == uploaded[2].base_offset


def test_offsets_below_the_remote_start_are_out_of_range(tiered):
    log, remote = tiered
    tier = RemoteTier("t", 0, remote, ChunkCache(1 << 20), synchronous)
    log.remote_tier = tier
    uploaded = upload_closed(log, remote)
    tier.set_segments(uploaded)
    tier.loaded = True
    log.delete_oldest_segments(len(uploaded))
    moved = []
    tier.on_start_moved = moved.append
    tier.delete_records_before(uploaded[1].base_offset + 3)
    assert moved == [uploaded[1].base_offset + 3]
    assert tier.log_start_offset == uploaded[1].base_offset + 3
    with pytest.raises(OffsetOutOfRangeError):
        log.read(uploaded[0].base_offset, 5000, max_offset=log.log_end_offset)


def test_a_followers_read_below_the_local_start_is_out_of_range(tiered):
    """KIP-405's follower bootstrap: a replica fetch (no max_offset) is not
    served from the remote tier, so the follower restarts at the local start."""
    log, remote = tiered
    tier = RemoteTier("t", 0, remote, ChunkCache(1 << 20), synchronous)
    log.remote_tier = tier
    tier.set_segments(upload_closed(log, remote))
    tier.loaded = True
    log.delete_oldest_segments(len(log.segments))
    assert log.read(0, 5000, max_offset=log.log_end_offset) is not None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 5000)


def test_remote_storage_enable_follows_kafkas_topic_rules():
    tiered = TopicConfig(remote_storage_enable=True)
    check_remote_storage(tiered, True)
    with pytest.raises(InvalidConfigError, match="^Tiered Storage functionality is disabled"):
        check_remote_storage(tiered, False)
    compacted = TopicConfig(remote_storage_enable=True, cleanup_policy="compact")
    with pytest.raises(
        InvalidConfigError, match="^Remote log storage is unsupported for the compacted topics$"
    ):
        check_remote_storage(compacted, True)
    too_much = TopicConfig(
        remote_storage_enable=True, retention_bytes=100, local_retention_bytes=200
    )
    with pytest.raises(InvalidConfigError, match="local.retention.bytes"):
        check_remote_storage(too_much, True)


def test_rsm_config_keys_are_typed_and_plugin_keys_pass_through():
    config = parse_settings(
        {
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "s3",
            "rsm.config.s3.bucket": "history",
            "rsm.config.s3.multipart.threshold.bytes": "6000000",
            "rsm.config.gcs.project": "p1",
            "log.local.retention.bytes": "1000",
        },
        BrokerConfig(),
    )
    assert config.remote_log_storage_system_enable is True
    assert config.rsm_config("s3.bucket") == "history"
    assert config.rsm_config("s3.multipart.threshold.bytes") == 6000000
    assert config.rsm_config("gcs.project") == "p1"
    assert config.topic_defaults.local_retention_bytes == 1000
    assert TopicConfig(retention_ms=5).effective_local_retention_ms == 5
    assert CHUNK_BYTES == 1 << 20


def test_the_earliest_offset_waits_for_the_remote_metadata(tiered):
    """ListOffsets EARLIEST of a tiered partition: unknown (the handler
    answers the retriable OFFSET_NOT_AVAILABLE) until the tier is loaded,
    then the remote start; DeleteRecords moves it in both tiers."""
    from pluglog.broker.partition import Partition

    log, remote = tiered
    part = Partition("t", 0, log, CONFIG)
    assert part.earliest_offset == 0  # no tier: the log's own start
    tier = RemoteTier("t", 0, remote, ChunkCache(1 << 20), synchronous)
    log.remote_tier = tier
    uploaded = upload_closed(log, remote)
    log.delete_oldest_segments(len(uploaded))  # nothing goes: not known as uploaded
    assert part.earliest_offset is None
    tier.set_segments(uploaded)
    tier.loaded = True
    log.delete_oldest_segments(len(uploaded))
    assert log.log_start_offset == uploaded[-1].next_offset
    assert part.earliest_offset == 0
    assert part.delete_records(uploaded[1].base_offset + 1) == uploaded[1].base_offset + 1


def test_the_copy_quota_paces_segment_copies_at_its_rate():
    import threading
    import time

    from pluglog.errors import RemoteStorageError
    from pluglog.tiered.copier import UNLIMITED, CopyQuota

    unlimited = CopyQuota(UNLIMITED)
    unlimited.acquire(10**12)  # Kafka's default: no wait at all
    assert unlimited.waited_s == 0

    quota = CopyQuota(10_000)  # bytes per second
    started = time.monotonic()
    for _ in range(4):
        quota.acquire(1_000)
    # The first copy goes at once, each next one after 0.1 s of the rate.
    assert time.monotonic() - started >= 0.3
    # (At most 0.3 s waited: a thread that overslept owes the next one less.)
    assert 0 < quota.waited_s <= 0.3 + 1e-6

    # Stopping wakes a waiting upload thread, which gives the copy up.
    slow = CopyQuota(1)
    slow.acquire(100)
    failed = []

    def waiter():
        try:
            slow.acquire(1)
        except RemoteStorageError as exc:
            failed.append(str(exc))

    thread = threading.Thread(target=waiter)
    thread.start()
    slow.stop()
    thread.join(5)
    assert not thread.is_alive() and "stopping" in failed[0]


def test_a_timestamp_lookup_in_a_remote_segment_finds_the_record(tiered):
    from pluglog.storage.remote.lookup import find_timestamp
    from pluglog.storage.remote.tier import time_index_before, trim_time_index

    log, remote = tiered
    segments = upload_closed(log, remote)
    tier = RemoteTier("t", 0, remote, ChunkCache(1 << 30), synchronous)
    tier.set_segments(segments)
    tier.loaded = True

    def lookup(target, min_offset=0):
        segment = tier.segment_for_timestamp(target)
        if segment is None:
            return None
        found = []
        find_timestamp(tier, segment, target, min_offset).addCallback(found.append)
        return found[0]

    # Record i has timestamp 1000 + i: every target names one record,
    # including those deep inside a segment (past several index entries).
    assert len(segments) >= 3
    for segment in segments:
        middle = (segment.base_offset + segment.end_offset) // 2
        for offset in (segment.base_offset, middle, segment.end_offset):
            assert lookup(1000 + offset) == (offset, 1000 + offset)
    assert lookup(0) == (0, 1000)
    # A start inside the tier (DeleteRecords) is respected.
    assert lookup(1000 + 5, min_offset=20) == (20, 1020)
    assert lookup(10**12) is None
    # The time index helpers: a zero-filled tail is cut, and the search
    # answers the last entry older than the target.
    entries = b"".join(struct.pack(">qI", 1000 + 10 * i, 10 * i) for i in range(5))
    trimmed = trim_time_index(entries + bytes(24))
    assert trimmed == entries
    assert time_index_before(trimmed, 1025) == 20
    assert time_index_before(trimmed, 1000) == 0
