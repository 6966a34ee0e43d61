"""The storage contract is the interfaces: exact signatures checked when a
log is opened, capabilities declared and checked with ``providedBy``."""

import dataclasses
import os
import re
import types

from twisted.internet.task import Clock
from zope.interface import implementer_only

from pluglog import hookimpl
from pluglog.broker.core import Broker
from pluglog.broker.log_cleaner import LogCleaner, _inline_runner
from pluglog.config import BrokerConfig
from pluglog.errors import InvalidConfigError, PluginError
from pluglog.interfaces import ICompactingStorage, ILogStorage, IPartitionLog
from pluglog.plugins import make_plugin_manager
from pluglog.protocol.records import Record, build_batch, iter_batches
from pluglog.registry import Registry
from pluglog.storage import api
from pluglog.storage.memory import MemoryLogStorage, MemoryPartitionLog

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


@implementer_only(IPartitionLog)
class PlainLog(MemoryPartitionLog):
    """Only the base contract: no compaction, replication or interval flush."""


@implementer_only(IPartitionLog)
class OldSignatureLog(MemoryPartitionLog):
    """A wrapper written against the old text: no ``answer`` argument."""

    def append(self, batches, now_ms, leader_epoch=0):
        return super().append(batches, now_ms, leader_epoch)


def _storage_plugin(log_class, storage_interfaces=(ILogStorage,)):
    @implementer_only(*storage_interfaces)
    class Storage(MemoryLogStorage):
        def open_log(self, topic, partition, topic_config=None):
            log = self._logs.get((topic, partition))
            if log is None:
                log = log_class(topic, partition, topic_config or self.topic_defaults)
                self._logs[(topic, partition)] = log
            log.closed = False
            return log

    Storage.log_class = log_class
    storage = Storage()  # one per broker: a restart in a test reuses it
    factory = hookimpl(lambda: {"plain": lambda config, reactor: storage})
    return types.SimpleNamespace(pluglog_register_storage=factory)


def _broker(tmp_path, plugin, storage="plain"):
    clock = Clock()
    clock.advance(1_700_000_000)
    config = BrokerConfig(data_dir=str(tmp_path), storage=storage)
    registry = Registry(make_plugin_manager(extra_plugins=[plugin], autoload=False))
    return Broker(config, registry, clock)


def _started(broker):
    out = []
    broker.start().addBoth(out.append)
    return out[0] if out else None


def test_append_signature_is_exact_and_documented():
    method = IPartitionLog["append"]
    assert method.getSignatureString() == "(batches, now_ms, leader_epoch=0, answer=None)"
    assert "back to back" in method.__doc__ and "positionally" in method.__doc__


def test_value_types_are_public_with_documented_fields():
    text = open(os.path.join(ROOT, "docs", "storage.rst"), encoding="utf-8").read()
    for cls in (api.AppendInfo, api.ReadResult, api.BatchHeader, api.SegmentInfo):
        assert f"``{cls.__name__}``" in text, cls
        fields = getattr(cls, "_fields", None) or cls.__dataclass_fields__
        for field in fields:
            assert f"``{field}``" in text, (cls.__name__, field)
    empty = api.empty_read(3, 9)
    assert (empty.records, empty.size, empty.first_offset) == (b"", 0, -1)
    assert "empty_read" in text and "crc32c" in text


def test_wrong_signature_fails_at_start_in_one_line(tmp_path):
    plugin = _storage_plugin(OldSignatureLog)
    # A fresh data dir, no topic yet: the declared log_class is verified at start.
    failure = _started(_broker(tmp_path, plugin))
    assert failure is not None and failure.check(PluginError), failure
    message = str(failure.value)
    assert "\n" not in message
    assert "IPartitionLog" in message and "'append'" in message
    assert "append(batches, now_ms, leader_epoch=0, answer=None)" in message
    assert "OldSignatureLog" in message
    assert repr(failure.value.plugin) in message


def test_an_opened_log_of_another_class_is_verified_too(tmp_path):
    """A storage whose log_class is right but whose open_log returns another
    class: that log is refused at open (its partition offline, with the
    reason), and at the next start the same log stops the broker."""
    plugin = _storage_plugin(OldSignatureLog)
    plugin.pluglog_register_storage()["plain"](None, None).__class__.log_class = MemoryPartitionLog
    broker = _broker(tmp_path, plugin)
    broker.start()
    broker.create_topic("t", 1)
    assert broker.partitions[("t", 0)].log.reason
    broker.stop()  # releases the data dir for the next start
    failure = _started(_broker(tmp_path, plugin))
    assert failure is not None and failure.check(PluginError), failure
    assert "append(batches, now_ms, leader_epoch=0, answer=None)" in str(failure.value)


def test_compacted_topic_refused_without_the_capability(tmp_path):
    broker = _broker(tmp_path, _storage_plugin(PlainLog))
    broker.start()
    failures = []
    d = broker.create_topic("c", 1, configs={"cleanup.policy": "compact"})
    d.addErrback(failures.append)
    assert failures and failures[0].check(InvalidConfigError)
    assert "ICompactingStorage" in str(failures[0].value)
    assert "\n" not in str(failures[0].value)
    # A log that claims the storage compacts but cannot is refused at start.
    plugin = _storage_plugin(PlainLog, (ICompactingStorage,))
    broker = _broker(tmp_path / "b", plugin)
    broker.start()
    broker.create_topic("c", 1, configs={"cleanup.policy": "compact"})
    broker.stop()  # releases the data dir for the next start
    failure = _started(_broker(tmp_path / "b", plugin))
    assert failure.check(PluginError) and "cannot compact" in str(failure.value)


def test_interval_flush_only_for_logs_declaring_it(tmp_path):
    class Spy(PlainLog):
        def maybe_flush(self, now_ms):  # not declared: never called
            raise AssertionError("duck typed")

    broker = _broker(tmp_path, _storage_plugin(Spy))
    broker.start()
    broker.create_topic("t", 1, configs={"flush.ms": "1"})
    broker.flush_due()


def test_interval_flush_asks_only_logs_with_a_flush_ms(tmp_path):
    """flush.ms at its default (never) is never due by time: the broker's
    once-a-second walk skips those logs; a log with flush.ms is flushed."""
    clock = Clock()
    clock.advance(1_700_000_000)
    config = BrokerConfig(data_dir=str(tmp_path), storage="segments")
    broker = Broker(config, Registry(make_plugin_manager(autoload=False)), clock)
    broker.start()
    broker.create_topic("timed", 1, configs={"flush.ms": "500"})
    broker.create_topic("never", 1)
    asked = []
    for name in ("timed", "never"):
        plog = broker.partitions[(name, 0)].log
        plog.append(_keyed("k", "v"), broker.now_ms(), 0)
        real = plog.maybe_flush
        plog.maybe_flush = lambda now, real=real, name=name: asked.append(name) or real(now)
    clock.advance(1)
    broker.flush_due()
    assert asked == ["timed"]
    assert not broker.partitions[("timed", 0)].log.has_unflushed()
    assert broker.partitions[("never", 0)].log.has_unflushed()
    broker.stop()


def _keyed(key, value):
    return build_batch([Record(key.encode(), value.encode(), timestamp=1000)])


def test_memory_storage_compacts_through_the_cleaner(tmp_path):
    clock = Clock()
    clock.advance(1_700_000_000)
    config = BrokerConfig(data_dir=str(tmp_path), storage="memory")
    broker = Broker(config, Registry(make_plugin_manager(autoload=False)), clock)
    broker.start()
    broker.create_topic("c", 1, configs={"cleanup.policy": "compact", "segment.bytes": "200"})
    log = broker.partitions[("c", 0)].log
    for i in range(30):
        log.append(_keyed(f"k{i % 3}", f"v{i}"), broker.now_ms(), 0)
    cleaner = LogCleaner(broker, runner=_inline_runner)
    cleaner.run_once()
    assert cleaner.stats["records_removed"] > 0
    seen = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        batches = list(iter_batches(log.read(offset, 1 << 20).records))
        for batch in batches:
            for record in batch.records:
                seen.setdefault(record.key, []).append(record.value)
        offset = batches[-1].last_offset + 1
    assert sorted(seen) == [b"k0", b"k1", b"k2"]
    assert seen[b"k2"][-1] == b"v29" and log.log_end_offset == 30


def test_broker_never_duck_types_logs_or_storages():
    pattern = re.compile(r"(hasattr|getattr)\((part\.log|plog|log|self\.log|[\w.]*storage)\b")
    for directory in ("broker", "replication", "group", "server"):
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, "pluglog", directory)):
            for name in files:
                if name.endswith(".py"):
                    text = open(os.path.join(dirpath, name), encoding="utf-8").read()
                    assert not pattern.search(text), os.path.join(dirpath, name)


def test_alter_to_compact_refused_and_a_stray_one_is_logged(tmp_path):
    from twisted.logger import globalLogPublisher

    from pluglog.errors import INVALID_CONFIG
    from pluglog.protocol.headers import RequestHeader
    from pluglog.server.handlers import RequestContext
    from pluglog.server.handlers.admin import handle_incremental_alter_configs

    broker = _broker(tmp_path, _storage_plugin(PlainLog))
    broker.start()
    broker.create_topic("t", 1)
    body = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "t",
                "configs": [{"name": "cleanup.policy", "config_operation": 0, "value": "compact"}],
            }
        ],
        "validate_only": False,
    }
    ctx = RequestContext(broker, RequestHeader(44, 0, 1, "test", 0), "peer")
    out = []
    handle_incremental_alter_configs(ctx, body).addBoth(out.append)
    (entry,) = out[0]["responses"]
    assert entry["error_code"] == INVALID_CONFIG and "ICompactingStorage" in entry["error_message"]
    # Compacted behind the broker's back (another broker's AlterConfigs): logged, once.
    meta = dataclasses.replace(
        broker.coordinator.topics()["t"], configs={"cleanup.policy": "compact"}
    )
    broker._open_topic(meta)
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        cleaner = LogCleaner(broker, runner=_inline_runner)
        cleaner.run_once()
        cleaner.run_once()
    finally:
        globalLogPublisher.removeObserver(events.append)
    errors = [e for e in events if "ICompactableLog" in e.get("log_format", "")]
    assert len(errors) == 1


def test_a_declared_capability_is_verified_too(tmp_path):
    from pluglog.interfaces import ICompactableLog

    @implementer_only(IPartitionLog, ICompactableLog)
    class BadCompact(MemoryPartitionLog):
        def compact(self):  # the interface says compact(now_ms)
            return 0

    plugin = _storage_plugin(BadCompact, (ICompactingStorage,))
    # The declared log_class is verified at start, capabilities included.
    failure = _started(_broker(tmp_path, plugin))
    assert failure is not None and failure.check(PluginError), failure
    assert "ICompactableLog" in str(failure.value) and "compact(now_ms)" in str(failure.value)
