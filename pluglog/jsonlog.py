"""JSON log lines: ``twistd pluglog --log-format json`` (issue 23).

One JSON object per line, for log shippers (Vector, Fluent Bit, Filebeat,
Loki's promtail) that parse lines without a regex:

``time``
    ISO 8601 UTC with microseconds (``2026-11-26T09:12:03.120532Z``).
``level``
    twisted.logger's level name: ``debug``, ``info``, ``warn``, ``error``,
    ``critical``.
``namespace``
    the logger's namespace, usually the module (``pluglog.service``).
``message``
    the formatted text, exactly what the text format shows.
``traceback``
    only when the event carries a failure (``log.failure``).

and then every field of the event that is not twisted.logger's own
(``log_*``) or the legacy ``twisted.python.log`` keys: e.g. ``peer``,
``reason``, ``topic``, ``index``. Values that JSON has no type for are
written as their ``str()``; bytes are decoded as UTF-8 with escapes.
Control characters are escaped by JSON itself, so one event is one line.

twistd builds the observer through its ``--logger`` hook
(:func:`observer`), which takes no arguments: :func:`configure`, called by
:mod:`pluglog.tap`, records where twistd would have written the text log
(``--logfile``, stdout under ``-n``) so the JSON goes to the same place.
"""

import json
import math
import sys
from datetime import UTC, datetime

from twisted.logger import ILogObserver, formatEvent
from twisted.python import logfile
from zope.interface import implementer

#: What twistd's --logger hook names (``pluglog.jsonlog.observer``).
OBSERVER = f"{__name__}.observer"

#: Legacy ``twisted.python.log`` keys and twisted.logger's own, never copied.
_SKIP = frozenset(("format", "message", "isError", "system", "time", "why", "failure"))

_destination = {"logfile": None, "nodaemon": True}


def configure(logfile_name, nodaemon):
    """Where :func:`observer` writes: twistd's ``--logfile`` and ``-n``."""
    _destination["logfile"] = logfile_name
    _destination["nodaemon"] = nodaemon


def observer():
    """twistd's log observer factory: JSON lines to twistd's log destination."""
    name = _destination["logfile"]
    if name == "-" or (not name and _destination["nodaemon"]):
        return JsonLinesObserver(sys.stdout)
    return JsonLinesObserver(logfile.LogFile.fromFullPath(name or "twistd.log"))


def _safe(value, depth=0):
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "backslashreplace")
    if depth < 4 and isinstance(value, list | tuple | set | frozenset):
        return [_safe(item, depth + 1) for item in value]
    if depth < 4 and isinstance(value, dict):
        return {str(key): _safe(item, depth + 1) for key, item in value.items()}
    return str(value)


def event_as_dict(event):
    """The JSON-safe dict of one twisted.logger event."""
    when = event.get("log_time")
    level = event.get("log_level")
    out = {
        "time": (
            None
            if when is None
            else datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        ),
        "level": getattr(level, "name", None),
        "namespace": event.get("log_namespace"),
        "message": formatEvent(event),
    }
    failure = event.get("log_failure")
    if failure is not None:
        try:
            out["traceback"] = failure.getTraceback()
        except Exception:
            out["traceback"] = repr(failure)
    for key, value in event.items():
        if key.startswith("log_") or key in _SKIP or key in out:
            continue
        out[key] = _safe(value)
    return out


@implementer(ILogObserver)
class JsonLinesObserver:
    """An ``ILogObserver`` writing :func:`event_as_dict` as one line per event."""

    def __init__(self, out):
        self.out = out

    def __call__(self, event):
        try:
            line = json.dumps(event_as_dict(event), ensure_ascii=False)
        except Exception as exc:  # never lose the event because a field is odd
            line = json.dumps({"message": formatEvent(event), "encode_error": str(exc)})
        self.out.write(line + "\n")
        flush = getattr(self.out, "flush", None)
        if flush is not None:
            flush()
