"""The broker-side Spark sink: ``[sink:NAME]`` with ``plugin = spark``.

Registered through the ``pluglog`` entry point group
(``pluglog_register_sinks`` -> ``{"spark": factory}``). The ISink provider
turns a config section into a :class:`~pluglog_spark.supervisor.SupervisedProcess`
running ``python -m pluglog_spark.sink_runner``: a Structured Streaming query
from ``format("pluglog")`` into a Parquet or JSON table partitioned by date.
Spark never runs inside the broker process (design.md §3: blocking libraries
stay off the reactor); the child is started and stopped with the broker,
restarted with backoff when it dies, and its per-batch progress lines are
relayed into the broker's log.

Settings (keys of the section; relative paths are under the broker data dir):
``topics`` (comma list, required), ``path`` (default ``spark-sink/NAME/table``),
``format`` (parquet or json), ``trigger.interval`` (seconds, default 10),
``checkpoint`` (default ``spark-sink/NAME/checkpoint``), ``master``
(default ``local[2]``), ``starting.offsets`` (earliest or latest, default
earliest), ``max.offsets.per.trigger``, ``bootstrap.servers`` (default: the
broker's advertised listener), ``restart.min.delay`` / ``restart.max.delay``
(seconds, default 1 / 60) and ``stop.timeout`` (seconds, default 30).
"""

import os
import sys

import pluggy
from zope.interface import implementer

from pluglog.errors import ConfigError
from pluglog.interfaces import ISink

hookimpl = pluggy.HookimplMarker("pluglog")

FORMATS = ("parquet", "json")
KNOWN = {
    "topics",
    "path",
    "format",
    "trigger.interval",
    "checkpoint",
    "master",
    "starting.offsets",
    "max.offsets.per.trigger",
    "bootstrap.servers",
    "restart.min.delay",
    "restart.max.delay",
    "stop.timeout",
}


def _number(name, settings, key, default, kind=float, minimum=0):
    raw = settings.get(key)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"[sink:{name}] {key} = {raw!r}: expected a number") from None
    if value < minimum:
        raise ConfigError(f"[sink:{name}] {key} = {raw!r}: must be >= {minimum}")
    return value


def sink_command(config, name, settings):
    """Validate ``settings`` and return ``(argv, env)`` for the child process."""
    unknown = sorted(set(settings) - KNOWN)
    if unknown:
        raise ConfigError(f"[sink:{name}] unknown key {unknown[0]!r} (known: {sorted(KNOWN)})")
    topics = [t.strip() for t in settings.get("topics", "").split(",") if t.strip()]
    if not topics:
        raise ConfigError(f"[sink:{name}] topics: at least one topic is required")
    fmt = settings.get("format", "parquet").strip().lower()
    if fmt not in FORMATS:
        raise ConfigError(f"[sink:{name}] format = {fmt!r}: expected parquet or json")
    starting = settings.get("starting.offsets", "earliest").strip().lower()
    if starting not in ("earliest", "latest"):
        raise ConfigError(f"[sink:{name}] starting.offsets = {starting!r}: earliest or latest")
    interval = _number(name, settings, "trigger.interval", 10.0, minimum=0)
    max_rows = _number(name, settings, "max.offsets.per.trigger", None, int, minimum=1)

    def where(key, default):
        value = settings.get(key) or default
        return os.path.join(config.data_dir, value)  # absolute values stay absolute

    path = where("path", os.path.join("spark-sink", name, "table"))
    checkpoint = where("checkpoint", os.path.join("spark-sink", name, "checkpoint"))
    bootstrap = settings.get("bootstrap.servers") or (
        f"{config.advertised_host}:{config.advertised_port}"
    )
    argv = [
        sys.executable,
        "-m",
        "pluglog_spark.sink_runner",
        "--name",
        name,
        "--bootstrap",
        bootstrap,
        "--topics",
        ",".join(topics),
        "--path",
        path,
        "--format",
        fmt,
        "--checkpoint",
        checkpoint,
        "--trigger-interval",
        repr(interval),
        "--master",
        settings.get("master", "local[2]"),
        "--starting-offsets",
        starting,
    ]
    if max_rows:
        argv += ["--max-offsets-per-trigger", str(max_rows)]
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["PYTHONUNBUFFERED"] = "1"
    # The child must import what this broker imports (pluglog, pluglog_spark).
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    return argv, env


@implementer(ISink)
class SparkSink:
    """ISink provider: one supervised Spark child process per sink section."""

    def __init__(self, config, reactor):
        self.config = config
        self.reactor = reactor

    def make_service(self, broker, name, settings):
        from pluglog_spark.supervisor import SupervisedProcess

        argv, env = sink_command(self.config, name, settings)
        return SupervisedProcess(
            self.reactor,
            f"spark sink {name}",
            argv,
            env,
            min_delay=_number(name, settings, "restart.min.delay", 1.0),
            max_delay=_number(name, settings, "restart.max.delay", 60.0),
            stop_timeout=_number(name, settings, "stop.timeout", 30.0),
        )


@hookimpl
def pluglog_register_sinks():
    return {"spark": SparkSink}
