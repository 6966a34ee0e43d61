"""One broker's ``CollectorRegistry``: its collectors and the process collector.

A registry per broker (not prometheus_client's global ``REGISTRY``), so
several brokers in one process (tests) never mix their series. Collectors
are registered without being called (``auto_describe`` off): they read the
broker only when ``/metrics`` is scraped.
"""

from prometheus_client import CollectorRegistry, ProcessCollector

from pluglog.metrics.state import (
    CleanerCollector,
    FetchSessionCollector,
    GroupCollector,
    PartitionCollector,
    ReplicationCollector,
)
from pluglog.metrics.tiered import TieredCollector
from pluglog.metrics.traffic import TrafficCollector


def broker_registry(broker, metrics):
    """The registry of ``broker``; ``metrics`` is its RequestMetrics (or None)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TrafficCollector(broker, metrics))
    registry.register(PartitionCollector(broker))
    registry.register(ReplicationCollector(broker))
    registry.register(GroupCollector(broker))
    registry.register(CleanerCollector(broker))
    registry.register(FetchSessionCollector(broker))
    registry.register(TieredCollector(broker))
    # process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds, ...
    ProcessCollector(registry=registry)
    return registry
