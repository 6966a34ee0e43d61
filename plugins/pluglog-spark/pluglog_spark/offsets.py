"""Offset arithmetic for reads: ranges, admission control, splitting, JSON.

Pure functions, no network. Offsets travel between Spark and the reader as
the JSON that Spark's Kafka source writes into checkpoints,
``{"topic": {"0": 123, "1": 45}}`` (partition numbers are JSON strings);
inside the package they are ``{(topic, partition): offset}`` dicts.

Ranges are half-open ``[start, end)``. The splitting and rate-limiting rules
follow Spark's KafkaOffsetRangeCalculator and KafkaMicroBatchStream so that
``minPartitions`` and ``maxOffsetsPerTrigger`` behave as Kafka users expect.
"""

import math
from typing import NamedTuple


class OffsetRange(NamedTuple):
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self):
        return max(0, self.end - self.start)


def to_json(offsets):
    """``{(topic, partition): offset}`` -> Spark's checkpoint JSON object."""
    out = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(obj):
    """Spark's checkpoint JSON object (or None) -> ``{(topic, partition): offset}``."""
    if not obj:
        return {}
    return {
        (topic, int(partition)): int(offset)
        for topic, parts in obj.items()
        for partition, offset in parts.items()
    }


def rate_limit(start, latest, max_rows):
    """Return end offsets admitting at most about ``max_rows`` records.

    Like Spark's Kafka source, the budget is shared in proportion to each
    partition's backlog; a partition whose share rounds below one record
    still gets one, so every backlog drains eventually.
    """
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    end = {}
    for tp, until in latest.items():
        begin = start.get(tp, until)
        share = max_rows * backlog[tp] / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        end[tp] = min(until, begin + step)
    return end


def split_ranges(ranges, min_partitions):
    """One range per topic-partition, split further when ``minPartitions``
    asks for more input partitions than there are non-empty ranges; big
    ranges are split in proportion to their share of all records."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out = []
    for r in ranges:
        parts = max(1, round(r.size / total * min_partitions))
        parts = min(parts, r.size)
        step, extra = divmod(r.size, parts)
        start = r.start
        for i in range(parts):
            end = start + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out
