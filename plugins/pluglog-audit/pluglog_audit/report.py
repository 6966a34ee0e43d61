"""``pluglog audit``: produced counts vs a consumer group's consumption.

Produced: the sum of the audit topic's counts per (topic, window). Consumed:
for every partition of each audited topic, the records below the group's
committed offset, read from the log start and bucketed by their timestamps
(the producer stamped them, so windows agree exactly). Windows of the report
(``--window``) must be multiples of the producers' windows.
"""

import datetime
import sys
from collections import Counter

from pluglog import protocol as codec
from pluglog.cli.common import check, partitions_of
from pluglog.cli.groups import group_offsets
from pluglog.cli.main import CliError
from pluglog.cli.topics import end_offsets
from pluglog.protocol.records import iter_batches
from pluglog_audit import counts


def _read(client, topic, partition, start, stop):
    """Yield ``(offset, timestamp, key, value)`` of records in [start, stop)."""
    position = start
    while position < stop:
        parts = client.fetch(topic, {partition: position}, partition_max_bytes=4 << 20)
        part = parts[0]
        check(part["error_code"], f"{topic}-{partition}")
        data = part["records"] or b""
        progressed = False
        for batch in iter_batches(data):
            for record in batch.records:
                if position <= record.offset < stop:
                    yield record.offset, record.timestamp, record.key, record.value
            if batch.base_offset + batch.last_offset_delta + 1 > position:
                position = min(stop, batch.base_offset + batch.last_offset_delta + 1)
                progressed = True
        if not progressed:
            return  # nothing more readable (e.g. below the high watermark)


def _topic_exists(client, topic):
    body = {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
    meta = client.request(codec.METADATA, 8, body)["topics"][0]
    return meta["error_code"] == 0


def produced_counts(client, audit_topic, window_ms, topics=None):
    """``{(topic, window start): count}`` from the audit topic."""
    out = Counter()
    if not _topic_exists(client, audit_topic):
        return out
    partitions = partitions_of(client, audit_topic)
    starts = end_offsets(client, audit_topic, partitions, -2)
    ends = end_offsets(client, audit_topic, partitions, -1)
    for p in partitions:
        for _offset, _ts, _key, value in _read(client, audit_topic, p, starts[p], ends[p]):
            try:
                topic, start, producer_window, count = counts.decode(value)
            except (ValueError, KeyError, TypeError):
                continue
            if topics and topic not in topics:
                continue
            if window_ms % producer_window:
                raise CliError(
                    f"--window {window_ms} ms is not a multiple of a producer's "
                    f"{producer_window} ms window"
                )
            out[(topic, counts.window_start(start, window_ms))] += count
    return out


def consumed_counts(client, group, topics, window_ms):
    """``{(topic, window start): count}`` of records below ``group``'s commits."""
    offsets = group_offsets(client, group)
    out = Counter()
    for topic in sorted(topics):
        partitions = partitions_of(client, topic)
        starts = end_offsets(client, topic, partitions, -2)
        for p in partitions:
            stop = offsets.get((topic, p), -1)
            for _offset, timestamp, _key, _value in _read(client, topic, p, starts[p], stop):
                out[(topic, counts.window_start(timestamp, window_ms))] += 1
    return out


def _when(ms):
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_audit(client, args):
    try:
        window_ms = counts.parse_window(args.window)
    except ValueError as exc:
        raise CliError(f"--window: {exc}") from None
    topics = set(args.topic or ())
    produced = produced_counts(client, args.audit_topic, window_ms, topics)
    audited = topics or {topic for topic, _start in produced}
    consumed = consumed_counts(client, args.group, audited, window_ms)
    out = sys.stdout
    print("topic\twindow_start\tproduced\tconsumed\tgap", file=out)
    total_gap = 0
    for topic, start in sorted(set(produced) | set(consumed)):
        made, got = produced[(topic, start)], consumed[(topic, start)]
        gap = made - got
        total_gap += abs(gap)
        print(f"{topic}\t{_when(start)}\t{made}\t{got}\t{gap}", file=out)
    made, got = sum(produced.values()), sum(consumed.values())
    verdict = "OK: every window matches" if not total_gap else f"GAP: {made - got} record(s)"
    print(f"total\t-\t{made}\t{got}\t{made - got}\t{verdict}", file=out)
    return 1 if total_gap else 0


def add_parser(subparsers):
    audit = subparsers.add_parser(
        "audit", help="compare produced record counts with a consumer group's consumption"
    )
    audit.add_argument("--group", required=True, help="consumer group to audit")
    audit.add_argument("--window", default="1h", help="report window: 30s, 5m, 1h... (default 1h)")
    audit.add_argument("--topic", action="append", help="audit only this topic (repeatable)")
    audit.add_argument("--audit-topic", default=counts.AUDIT_TOPIC, help="where counts are")
    audit.set_defaults(run=run_audit)
