"""Time- and size-based retention decides how many old segments go."""

from types import SimpleNamespace

from pluglog.config import TopicConfig
from pluglog.retention import DeleteRetentionPolicy


def _log(*segments):
    infos = [
        SimpleNamespace(base_offset=i * 10, size_bytes=size, largest_timestamp=ts)
        for i, (size, ts) in enumerate(segments)
    ]
    return SimpleNamespace(segment_infos=lambda: infos, size_bytes=sum(s for s, _ in segments))


POLICY = DeleteRetentionPolicy()


def test_time_based():
    log = _log((100, 1000), (100, 2000), (100, 3000), (100, 9000))
    config = TopicConfig(retention_ms=5000)
    assert POLICY.segments_to_delete(log, config, now_ms=7500) == 2
    assert POLICY.segments_to_delete(log, config, now_ms=1000) == 0


def test_active_segment_never_deleted():
    log = _log((100, 1000), (100, 2000))
    assert POLICY.segments_to_delete(log, TopicConfig(retention_ms=0), now_ms=10**12) == 1


def test_size_based():
    log = _log((100, 1), (100, 2), (100, 3), (100, 4))
    config = TopicConfig(retention_ms=-1, retention_bytes=150)
    assert POLICY.segments_to_delete(log, config, now_ms=5) == 2


def test_compacted_topic_is_left_alone():
    log = _log((100, 1), (100, 2))
    config = TopicConfig(retention_ms=0, cleanup_policy="compact")
    assert POLICY.segments_to_delete(log, config, now_ms=10**12) == 0


def test_compact_delete_keeps_time_and_size_retention():
    log = _log((100, 1), (100, 2))
    for policy in ("compact,delete", "delete,compact"):
        config = TopicConfig().with_overrides({"cleanup.policy": policy, "retention.ms": "0"})
        assert config.cleanup_policy == "compact,delete"
        assert POLICY.segments_to_delete(log, config, now_ms=10**12) == 1
