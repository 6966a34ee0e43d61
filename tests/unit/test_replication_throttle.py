"""The reassignment throttle's rate over sliding windows, and the config lists it reads."""

import pytest

from pluglog.config import TopicConfig
from pluglog.errors import ConfigError
from pluglog.replication.throttle import UNLIMITED, ReplicationThrottle


def test_unlimited_never_holds_back():
    throttle = ReplicationThrottle(UNLIMITED)
    throttle.record(10**12, 0)
    assert not throttle.limited and not throttle.exceeded(0)


def test_rate_over_windows_with_kafkas_minimum_span():
    throttle = ReplicationThrottle(1000, samples=3, window_ms=1000)
    throttle.record(1500, 0)
    # One fresh window counts as (samples - 1) whole windows: 1500 B / 2 s.
    assert throttle.measured(0) == 750.0 and not throttle.exceeded(0)
    throttle.record(1000, 500)
    assert throttle.exceeded(500)  # 2500 B / 2 s
    throttle.record(0, 1200)
    assert throttle.measured(2999) == pytest.approx(2500 * 1000 / 2999)
    # Windows older than samples * window fall out: the quota opens again.
    assert throttle.measured(3001) == 0.0 and not throttle.exceeded(3001)


def test_throttled_replica_lists():
    config = TopicConfig().with_overrides(
        {
            "leader.replication.throttled.replicas": "0:1,2:3",
            "follower.replication.throttled.replicas": "*",
        }
    )
    assert config.throttled("leader", 0, 1) and config.throttled("leader", 2, 3)
    assert not config.throttled("leader", 0, 3)
    assert config.throttled("follower", 7, 9)
    assert not TopicConfig().throttled("follower", 0, 1)
    with pytest.raises(ConfigError, match="partition:broker"):
        TopicConfig().with_overrides({"leader.replication.throttled.replicas": "0-1"})
