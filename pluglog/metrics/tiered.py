"""Tiered storage's series, read on scrape (KIP-405's RemoteLogManager metrics).

Per partition with a remote tier (any replica): the remote segments' bytes,
the remote start and end offsets, and on the leader the upload lag: bytes
of closed local segments not yet uploaded (Kafka's RemoteCopyLagBytes).
Broker-wide, from the remote log manager: segments and bytes copied,
segments deleted, failed passes, and the remote reads' count, errors and
total seconds (a summary: rate(sum) / rate(count) is the mean latency), and
the chunk cache's size and hits.
"""

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

from pluglog.interfaces import ITieredLog


def _gauge(name, documentation):
    return GaugeMetricFamily(name, documentation, labels=["topic", "partition"])


class TieredCollector:
    """The remote tier's gauges and the remote log manager's counters."""

    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        manager = self.broker.remote_log_manager
        if manager is None:
            return
        size = _gauge("pluglog_remote_log_size_bytes", "Bytes of the partition's remote segments.")
        start = _gauge("pluglog_remote_log_start_offset", "First offset the remote tier serves.")
        end = _gauge("pluglog_remote_log_end_offset", "One past the last uploaded offset.")
        lag = _gauge(
            "pluglog_remote_copy_lag_bytes",
            "On the leader: bytes of closed local segments not uploaded yet.",
        )
        for (topic, index), part in sorted(self.broker.partitions.items()):
            plog = part.log
            if not ITieredLog.providedBy(plog) or plog.remote_tier is None:
                continue
            tier = plog.remote_tier
            labels = [topic, str(index)]
            size.add_metric(labels, tier.size_bytes)
            first = tier.log_start_offset
            start.add_metric(labels, -1 if first is None else first)
            end.add_metric(labels, tier.next_offset)
            if part.is_leader:
                copied = max(tier.next_offset, tier.start_offset)
                pending = sum(
                    info.size_bytes
                    for info in plog.segment_infos()
                    if not info.active and info.next_offset > copied
                )
                lag.add_metric(labels, pending)
        yield from (size, start, end, lag)
        for value, name, doc in (
            (manager.segments_copied, "pluglog_remote_copied_segments", "Segments uploaded."),
            (manager.bytes_copied, "pluglog_remote_copied_bytes", "Bytes uploaded."),
            (manager.segments_deleted, "pluglog_remote_deleted_segments", "Segments expired."),
            (
                manager.catch_up_copies,
                "pluglog_remote_catch_up_copies",
                "Uploads run at catch-up priority: local data beyond local.retention.* waited.",
            ),
            (
                manager.copy_failures,
                "pluglog_remote_copy_failures",
                "Upload or expiry passes that failed (the store, or the metadata write).",
            ),
            (manager.remote_read_errors, "pluglog_remote_read_errors", "Remote reads failed."),
            (
                manager.quota.waited_s,
                "pluglog_remote_copy_quota_wait_seconds",
                "Time uploads waited for remote.log.manager.copy.max.bytes.per.second (KIP-956).",
            ),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        yield SummaryMetricFamily(
            "pluglog_remote_read_seconds",
            "Remote reads (an offset index or a 1 MiB chunk) and their time, queueing included.",
            count_value=manager.remote_reads,
            sum_value=manager.remote_read_seconds,
        )
        cache = manager.cache
        yield GaugeMetricFamily(
            "pluglog_remote_cache_bytes", "Bytes in the remote chunk cache.", value=cache.size
        )
        yield CounterMetricFamily(
            "pluglog_remote_cache_hits", "Remote reads answered from the cache.", value=cache.hits
        )
        yield CounterMetricFamily(
            "pluglog_remote_cache_misses", "Cache lookups that missed.", value=cache.misses
        )
