"""Retention policies are chosen by name: ``--retention``, ``log.retention.policy``
and the per-topic ``retention.policy``; a registered third-party policy is used."""

import contextlib
import sys

import pytest
from twisted.internet.task import Clock
from twisted.python import usage

from pluglog.broker.core import Broker
from pluglog.config import BrokerConfig, parse_settings
from pluglog.errors import InvalidConfigError, PluginError
from pluglog.plugins import make_plugin_manager
from pluglog.registry import Registry
from pluglog.tap import Options
from tests.unit.test_plugins import EXAMPLE_RETENTION
from tests.unit.test_storage_segments import make_batch


@contextlib.contextmanager
def example_plugin():
    """The example third-party retention policy's module
    (tests/data/example_retention)."""
    sys.path.insert(0, EXAMPLE_RETENTION)
    try:
        import pluglog_example_retention

        yield pluglog_example_retention
    finally:
        sys.path.remove(EXAMPLE_RETENTION)
        sys.modules.pop("pluglog_example_retention", None)


@pytest.fixture
def example():
    with example_plugin() as module:
        yield module


def _broker(tmp_path, plugins=(), **settings):
    clock = Clock()
    clock.advance(1_700_000_000)
    config = parse_settings(settings, BrokerConfig(data_dir=str(tmp_path), storage="memory"))
    manager = make_plugin_manager(extra_plugins=plugins, autoload=False)
    broker = Broker(config, Registry(manager), clock)
    broker.start()
    return broker


def _fill(broker, topic, batches=6):
    log = broker.partitions[(topic, 0)].log
    for _ in range(batches):
        log.append(make_batch(), broker.now_ms(), 0)
    return log


def test_per_topic_policy_from_a_plugin_is_used(tmp_path, example):
    broker = _broker(tmp_path, [example])
    small = {"segment.bytes": "100", "retention.ms": "-1"}
    broker.create_topic("mine", 1, configs=dict(small, **{"retention.policy": "example-keep-two"}))
    broker.create_topic("plain", 1, configs=small)
    mine, plain = _fill(broker, "mine"), _fill(broker, "plain")
    assert len(mine.segment_infos()) == len(plain.segment_infos()) == 6
    assert broker.run_retention() == 4
    assert len(mine.segment_infos()) == 2 and mine.log_start_offset == 4
    assert len(plain.segment_infos()) == 6  # delete with retention.ms=-1 keeps all


def test_broker_default_policy_by_key(tmp_path, example):
    broker = _broker(tmp_path, [example], **{"log.retention.policy": "example-keep-two"})
    assert broker.config.topic_defaults.retention_policy == "example-keep-two"
    broker.create_topic("t", 1, configs={"segment.bytes": "100"})
    log = _fill(broker, "t")
    broker.run_retention()
    assert len(log.segment_infos()) == 2
    assert type(broker.retention).__name__ == "KeepTwoPolicy"


def test_unknown_topic_policy_is_refused_naming_known_ones(tmp_path):
    broker = _broker(tmp_path)
    failures = []
    broker.create_topic("t", 1, configs={"retention.policy": "nope"}).addErrback(failures.append)
    assert failures and failures[0].check(InvalidConfigError)
    message = str(failures[0].value)
    assert "'nope'" in message and "delete" in message and "\n" not in message
    assert "t" not in broker.coordinator.topics()


def test_unknown_broker_policy_fails_the_broker(tmp_path):
    with pytest.raises(PluginError, match="'nope'.*available: delete"):
        _broker(tmp_path, **{"log.retention.policy": "nope"})


def test_retention_option(tmp_path):
    options = Options()
    options.parseOptions(["--data-dir", str(tmp_path), "--retention", "delete"])
    assert options.broker_config.topic_defaults.retention_policy == "delete"
    with pytest.raises(usage.UsageError) as info:
        Options().parseOptions(["--data-dir", str(tmp_path), "--retention", "nope"])
    message = str(info.value)
    assert "--retention" in message and "'nope'" in message and "delete" in message
    assert "\n" not in message
