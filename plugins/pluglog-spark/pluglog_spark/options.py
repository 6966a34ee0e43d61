"""Parse and validate the options of ``format("pluglog")``.

The option names are those of Spark's Kafka source and sink so users' code and
knowledge carry over: ``kafka.bootstrap.servers`` (or ``bootstrap.servers``),
``subscribe`` / ``subscribePattern`` / ``assign``, ``startingOffsets`` /
``endingOffsets`` ("earliest", "latest" or JSON per partition),
``startingTimestamp`` / ``startingOffsetsByTimestamp``,
``maxOffsetsPerTrigger``, ``minPartitions``, ``failOnDataLoss``,
``isolationLevel`` (also as ``kafka.isolation.level``), and for writes
``topic``, ``exactlyOnce`` and ``transactionalIdPrefix``. Other
``kafka.``-prefixed options pass through to librdkafka.

Spark hands options over case-insensitively, so every key is lower-cased
here first. Errors are :class:`OptionError` (a ValueError) naming the option
and the bad value. Nothing in this module touches the network.
"""

import json
import re
from dataclasses import dataclass, field

EARLIEST = -2
LATEST = -1
DEFAULT_TXN_PREFIX = "pluglog-spark"
_TXN_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,100}")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


class OptionError(ValueError):
    """A data source option is missing, unknown in this context, or malformed."""


def _lower(options):
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def _int(opts, key, minimum=None):
    if key not in opts:
        return None
    try:
        value = int(opts[key])
    except ValueError:
        raise OptionError(f"option {key}: expected an integer, got {opts[key]!r}") from None
    if minimum is not None and value < minimum:
        raise OptionError(f"option {key}: must be >= {minimum}, got {value}")
    return value


def _bool(opts, name, default):
    """``name`` as documented (camelCase); Spark hands it over lower-cased."""
    key = name.lower()
    if key not in opts:
        return default
    value = opts[key].strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {name}: expected true or false, got {opts[key]!r}")
    return value == "true"


def _json(opts, key):
    try:
        value = json.loads(opts[key])
    except ValueError as exc:
        raise OptionError(f"option {key}: not valid JSON ({exc}): {opts[key]!r}") from None
    if not isinstance(value, dict):
        raise OptionError(f"option {key}: expected a JSON object, got {opts[key]!r}")
    return value


def parse_partition_offsets(opts, key):
    """``{"topic": {"0": 23, "1": -2}}`` -> ``{topic: {0: 23, 1: -2}}``."""
    out = {}
    for topic, parts in _json(opts, key).items():
        if not isinstance(parts, dict):
            raise OptionError(f"option {key}: topic {topic!r} must map partitions to numbers")
        try:
            out[topic] = {int(p): int(v) for p, v in parts.items()}
        except (TypeError, ValueError):
            raise OptionError(f"option {key}: bad partition or number under {topic!r}") from None
    return out


def kafka_config(opts):
    """librdkafka settings: ``kafka.*`` options minus the bootstrap servers."""
    return {
        k[len("kafka.") :]: v
        for k, v in opts.items()
        if k.startswith("kafka.") and k != "kafka.bootstrap.servers"
    }


def bootstrap_of(opts):
    servers = opts.get("kafka.bootstrap.servers") or opts.get("bootstrap.servers")
    if not servers:
        raise OptionError("option kafka.bootstrap.servers (or bootstrap.servers) is required")
    return servers


@dataclass(frozen=True)
class SourceOptions:
    """What to read: the subscription, the offset bounds and the read limits."""

    bootstrap: str
    subscribe: tuple = ()
    pattern: str | None = None
    assign: dict | None = None  # {topic: [partition, ...]}
    starting: object = "latest"  # "earliest" | "latest" | {topic: {partition: offset}}
    starting_timestamps: dict | None = None  # {topic: {partition: ms}}, or {"*": ms}
    timestamp_strategy: str = "error"
    ending: object = "latest"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120000
    isolation_level: str = "read_uncommitted"
    kafka: dict = field(default_factory=dict)
    value_format: str = "binary"
    schema_registry_url: str | None = None
    value_subject: str | None = None
    #: The remote tier to read directly (pluglog_spark.remote), or None.
    remote: dict | None = None

    @classmethod
    def parse(cls, options, streaming):
        opts = _lower(options)
        chosen = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
        if len(chosen) != 1:
            raise OptionError(
                "exactly one of subscribe, subscribePattern or assign is required"
                + (f" (got {', '.join(chosen)})" if chosen else "")
            )
        subscribe, pattern, assign = (), None, None
        if "subscribe" in chosen:
            subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
            if not subscribe:
                raise OptionError(f"option subscribe: no topic in {opts['subscribe']!r}")
        elif "subscribepattern" in chosen:
            pattern = opts["subscribepattern"]
            try:
                re.compile(pattern)
            except re.error as exc:
                raise OptionError(f"option subscribePattern: {exc}: {pattern!r}") from None
        else:
            assign = {}
            for topic, parts in _json(opts, "assign").items():
                if not isinstance(parts, list) or not all(isinstance(p, int) for p in parts):
                    raise OptionError(f"option assign: {topic!r} must map to a list of ints")
                assign[topic] = sorted(set(parts))

        starting = _bound(opts, "startingoffsets", "earliest" if not streaming else "latest")
        ending = _bound(opts, "endingoffsets", "latest")
        if streaming and "endingoffsets" in opts:
            raise OptionError("option endingOffsets is for batch queries (spark.read) only")
        if not streaming and starting == "latest":
            raise OptionError("option startingOffsets: 'latest' is not allowed for batch reads")
        if ending == "earliest":
            raise OptionError("option endingOffsets: 'earliest' is not allowed")
        if isinstance(ending, dict) and any(
            o == EARLIEST for parts in ending.values() for o in parts.values()
        ):
            raise OptionError("option endingOffsets: -2 (earliest) is not allowed")
        if (
            isinstance(starting, dict)
            and any(o == LATEST for parts in starting.values() for o in parts.values())
            and not streaming
        ):
            raise OptionError("option startingOffsets: -1 (latest) is not allowed for batch reads")

        timestamps = None
        if "startingoffsetsbytimestamp" in opts:
            timestamps = parse_partition_offsets(opts, "startingoffsetsbytimestamp")
        elif "startingtimestamp" in opts:
            timestamps = {"*": _int(opts, "startingtimestamp", minimum=0)}
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
        if strategy not in ("error", "latest"):
            raise OptionError(
                f"option startingOffsetsByTimestampStrategy: expected error or latest, "
                f"got {strategy!r}"
            )
        max_rows = _int(opts, "maxoffsetspertrigger", minimum=1)
        if max_rows is not None and not streaming:
            raise OptionError("option maxOffsetsPerTrigger is for streaming queries only")
        return cls(
            bootstrap=bootstrap_of(opts),
            subscribe=subscribe,
            pattern=pattern,
            assign=assign,
            starting=starting,
            starting_timestamps=timestamps,
            timestamp_strategy=strategy,
            ending=ending,
            max_offsets_per_trigger=max_rows,
            min_partitions=_int(opts, "minpartitions", minimum=1),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            poll_timeout_ms=_int(opts, "kafkaconsumer.polltimeoutms", minimum=1) or 120000,
            isolation_level=isolation_of(opts),
            kafka=kafka_config(opts),
            remote=remote_options(opts),
            **value_format_options(opts, subscribe),
        )


#: The source options (lower-cased) that name the remote tier (pluglog_spark.remote).
REMOTE_PREFIX = "rsm.config."
REMOTE_KEYS = {
    "rsm.config.s3.bucket": "bucket",
    "rsm.config.s3.endpoint.url": "endpoint_url",
    "rsm.config.s3.region": "region",
    "rsm.config.s3.prefix": "prefix",
    "rsm.config.filesystem.root": "root",
}


def remote_options(opts):
    """``{provider argument: value}`` from the lower-cased source options, or
    None when no remote tier is named (then everything goes through the broker)."""
    unknown = sorted(k for k in opts if k.startswith(REMOTE_PREFIX) and k not in REMOTE_KEYS)
    if unknown:
        raise OptionError(
            f"option {unknown[0]}: unknown (known: {', '.join(sorted(REMOTE_KEYS))})"
        )
    found = {REMOTE_KEYS[k]: opts[k] for k in REMOTE_KEYS if k in opts}
    if not found:
        return None
    if bool(found.get("bucket")) == bool(found.get("root")):
        raise OptionError(
            "direct remote reads need exactly one of rsm.config.s3.bucket and "
            "rsm.config.filesystem.root"
        )
    return found


def isolation_of(opts):
    """``isolationLevel`` (or Spark's ``kafka.isolation.level``): read_uncommitted
    (the default, as in Spark's Kafka source) or read_committed."""
    given = {
        key: opts[key].strip().lower()
        for key in ("isolationlevel", "kafka.isolation.level")
        if key in opts
    }
    for key, value in given.items():
        if value not in ISOLATION_LEVELS:
            name = "isolationLevel" if key == "isolationlevel" else key
            raise OptionError(
                f"option {name}: expected read_uncommitted or read_committed, got {opts[key]!r}"
            )
    if len(set(given.values())) > 1:
        raise OptionError(
            "options isolationLevel and kafka.isolation.level disagree: "
            f"{opts['isolationlevel']!r} and {opts['kafka.isolation.level']!r}"
        )
    return next(iter(given.values()), "read_uncommitted")


def _bound(opts, key, default):
    value = opts.get(key, default).strip()
    if value.lower() in ("earliest", "latest"):
        return value.lower()
    if value.startswith("{"):
        return parse_partition_offsets(opts, key)
    raise OptionError(f"option {key}: expected earliest, latest or JSON, got {value!r}")


@dataclass(frozen=True)
class SinkOptions:
    """Where to write: servers, the default topic, producer settings, commit log."""

    bootstrap: str
    topic: str | None = None
    commit_log: str | None = None
    kafka: dict = field(default_factory=dict)
    value_format: str = "binary"
    schema_registry_url: str | None = None
    value_subject: str | None = None
    exactly_once: bool = True
    transactional_id_prefix: str = DEFAULT_TXN_PREFIX

    @classmethod
    def parse(cls, options):
        opts = _lower(options)
        commit_log = opts.get("commitlog")
        if not commit_log and opts.get("checkpointlocation"):
            commit_log = opts["checkpointlocation"].rstrip("/") + "/pluglog-commits"
        exactly_once = _bool(opts, "exactlyOnce", True)
        if "kafka.transactional.id" in opts:
            raise OptionError(
                "option kafka.transactional.id: the writer derives one per task; "
                "set transactionalIdPrefix instead"
            )
        prefix = opts.get("transactionalidprefix", DEFAULT_TXN_PREFIX).strip()
        if not _TXN_PREFIX.fullmatch(prefix):
            raise OptionError(
                "option transactionalIdPrefix: expected 1-100 letters, digits, '.', '_' "
                f"or '-', got {opts.get('transactionalidprefix')!r}"
            )
        return cls(
            bootstrap=bootstrap_of(opts),
            topic=opts.get("topic") or None,
            commit_log=commit_log,
            kafka=kafka_config(opts),
            exactly_once=exactly_once,
            transactional_id_prefix=prefix,
            **value_format_options(opts, (opts["topic"],) if opts.get("topic") else ()),
        )


def value_format_options(opts, topics):
    """``valueFormat`` (binary or avro), ``schemaRegistryUrl`` and
    ``valueSubject`` (default ``<topic>-value`` of the single topic)."""
    value_format = opts.get("valueformat", "binary").strip().lower()
    if value_format not in ("binary", "avro"):
        raise OptionError(f"option valueFormat: expected binary or avro, got {value_format!r}")
    if value_format == "binary":
        return {}
    url = opts.get("schemaregistryurl")
    if not url:
        raise OptionError("option schemaRegistryUrl is required with valueFormat avro")
    subject = opts.get("valuesubject")
    if not subject:
        if len(topics) != 1:
            raise OptionError(
                "valueFormat avro needs one topic (subscribe or topic) or the valueSubject option"
            )
        subject = f"{topics[0]}-value"
    return {"value_format": "avro", "schema_registry_url": url, "value_subject": subject}


def check_write_schema(schema, topic_option, value_format="binary"):
    """Refuse input columns the sink cannot map, naming the column and its type."""
    types = {f.name.lower(): f.dataType.simpleString() for f in schema.fields}
    if value_format == "avro":
        if not types.get("value", "").startswith("struct<"):
            raise OptionError(
                "valueFormat avro writes a struct 'value' column, got "
                f"{types.get('value', 'no value column')}"
            )
        types.pop("value")
        types["value"] = "binary"
    if "value" not in types:
        raise OptionError("writing to pluglog needs a 'value' column (binary or string)")
    allowed = {
        "value": ("binary", "string"),
        "key": ("binary", "string"),
        "topic": ("string",),
        "partition": ("int",),
        "headers": (
            "array<struct<key:string,value:binary>>",
            "array<struct<key:string,value:string>>",
        ),
    }
    for name, kind in types.items():
        if name in allowed and kind not in allowed[name]:
            raise OptionError(
                f"column {name} has type {kind}; expected {' or '.join(allowed[name])}"
            )
    if "topic" not in types and not topic_option:
        raise OptionError("writing to pluglog needs a 'topic' column or the topic option")
