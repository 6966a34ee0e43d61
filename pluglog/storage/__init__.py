"""Durable partition logs (``segments``) and their in-memory twin (``memory``).

The broker stores magic-2 record batches as received, with only baseOffset and
partitionLeaderEpoch patched, in Kafka-style segment files (docs/storage.rst).
Providers implement :class:`pluglog.interfaces.ILogStorage` /
:class:`pluglog.interfaces.IPartitionLog`; the plugin registry builds them
through the factories below, each called as ``factory(config, reactor)``
with a :class:`pluglog.config.BrokerConfig`.

It may import protocol, plugins, the plugin contract and the leaf helpers
(docs/architecture.rst, Layers); nothing of the broker.
"""

from pluglog.storage.manager import SegmentLogStorage
from pluglog.storage.memory import MemoryLogStorage


def make_segment_storage(config, reactor):
    """Segment files under ``config.data_dirs`` with ``config.fsync`` policy."""
    return SegmentLogStorage(
        config.data_dirs,
        config.topic_defaults,
        reactor,
        config.fsync,
        max_open_segments=config.log_max_open_segments,
        max_open_files=config.log_max_open_files,
    )


def make_memory_storage(config, reactor):
    """Logs kept in memory; nothing survives the process."""
    return MemoryLogStorage(config.topic_defaults, reactor)


__all__ = ["MemoryLogStorage", "SegmentLogStorage", "make_memory_storage", "make_segment_storage"]
