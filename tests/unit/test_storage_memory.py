"""The memory twin and the plugin factories."""

from twisted.internet.task import Clock
from zope.interface.verify import verifyObject

from pluglog.config import BrokerConfig, TopicConfig
from pluglog.interfaces import ILogStorage, IPartitionLog
from pluglog.protocol.records import iter_batches
from pluglog.storage import (
    MemoryLogStorage,
    SegmentLogStorage,
    make_memory_storage,
    make_segment_storage,
)
from pluglog.storage.memory import MemoryPartitionLog
from tests.unit.test_storage_segments import make_batch, read_offsets


def test_factories_build_verified_providers(tmp_path):
    config = BrokerConfig(
        data_dir=str(tmp_path / "d"), fsync="always", topic_defaults=TopicConfig(segment_bytes=500)
    )
    clock = Clock()
    segments = make_segment_storage(config, clock)
    memory = make_memory_storage(config, clock)
    assert isinstance(segments, SegmentLogStorage) and isinstance(memory, MemoryLogStorage)
    for storage in (segments, memory):
        assert verifyObject(ILogStorage, storage)
        log = storage.open_log("t", 0, None)
        assert verifyObject(IPartitionLog, log)
        assert log.config.segment_bytes == 500
    assert segments.get_log("t", 0).fsync == "always"
    assert (tmp_path / "d" / "t-0").is_dir()
    segments.close()
    memory.close()


def test_memory_reads_are_bytes_identical_to_segment_reads(tmp_path):
    memory = MemoryLogStorage()
    segments = SegmentLogStorage(str(tmp_path))
    config = TopicConfig(segment_bytes=700, index_interval_bytes=64)
    logs = [s.open_log("t", 1, config) for s in (memory, segments)]
    for i in range(40):
        for log in logs:
            log.append(make_batch(1 + i % 3, ts=i), now_ms=i, leader_epoch=2)
    mem, seg = logs
    assert mem.segment_infos() == seg.segment_infos()
    for offset in range(0, mem.log_end_offset, 7):
        a, b = mem.read(offset, 300), seg.read(offset, 300)
        assert isinstance(a.records, bytes)
        assert a.records == b.records.read()
        assert (a.size, a.first_offset) == (b.size, b.first_offset)
    segments.close()


def test_memory_log_survives_close_while_storage_lives():
    storage = MemoryLogStorage()
    log = storage.open_log("t", 0, TopicConfig())
    log.append(make_batch(3), now_ms=0)
    storage.close()
    again = storage.open_log("t", 0, TopicConfig(segment_bytes=100))
    assert again is log and again.config.segment_bytes == 100
    assert read_offsets(again) == [0, 1, 2]


def test_memory_delete_log_and_listing():
    storage = MemoryLogStorage()
    storage.open_log("a", 0, TopicConfig()).append(make_batch(1), now_ms=0)
    storage.open_log("b", 2, TopicConfig())
    assert sorted((log.topic, log.partition) for log in storage.logs()) == [("a", 0), ("b", 2)]
    storage.delete_log("a", 0)
    assert storage.get_log("a", 0) is None
    assert storage.open_log("a", 0, TopicConfig()).log_end_offset == 0


def test_memory_deleted_segment_data_dropped_after_delay():
    clock = Clock()
    batch = make_batch(2)
    log = MemoryPartitionLog("t", 0, TopicConfig(segment_bytes=len(batch)), clock)
    for _ in range(3):
        log.append(batch, now_ms=0)
    oldest = log.segments[0]
    log.delete_oldest_segments(1)
    assert oldest.deleted and oldest.size == len(batch)
    clock.advance(60)
    assert oldest.size == 0
    assert [b.base_offset for b in iter_batches(log.read(2, 1000).records)] == [2]
