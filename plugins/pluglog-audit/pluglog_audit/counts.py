"""Time windows and the audit records producers publish.

An audit record is one producer's count of records for one topic in one
window: key ``<producer>|<topic>|<window start>`` and a JSON value
``{"producer", "topic", "window_start", "window_ms", "count"}``. Counts are
deltas (a producer publishes each flush's new counts), so readers sum them.
"""

import json
import re

AUDIT_TOPIC = "_audit"
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_window(text):
    """``500ms``, ``30s``, ``5m``, ``1h``, ``1d`` or plain milliseconds -> ms."""
    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|h|d)?\s*", str(text))
    if not match or int(match.group(1)) <= 0:
        raise ValueError(f"window must be a positive duration like 60s, 5m or 1h, got {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2) or "ms"]


def window_start(timestamp_ms, window_ms):
    return timestamp_ms - timestamp_ms % window_ms


def encode(producer, topic, start, window_ms, count):
    key = f"{producer}|{topic}|{start}".encode()
    value = {
        "producer": producer,
        "topic": topic,
        "window_start": start,
        "window_ms": window_ms,
        "count": count,
    }
    return key, json.dumps(value, sort_keys=True).encode()


def decode(value):
    """``(topic, window_start, window_ms, count)`` of an audit record value."""
    doc = json.loads(value)
    return doc["topic"], int(doc["window_start"]), int(doc["window_ms"]), int(doc["count"])
