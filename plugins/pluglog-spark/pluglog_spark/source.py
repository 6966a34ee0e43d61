"""``format("pluglog")``: the DataSource and its batch and streaming readers.

Planning runs on the driver (:class:`~pluglog_spark.control.ClusterView`):
resolve the subscription, turn startingOffsets / startingTimestamp /
endingOffsets into concrete offsets, check them against each partition's
log start offset (failOnDataLoss), and emit one input partition per
topic-partition range, split further for ``minPartitions``. Executors read
each range with :func:`pluglog_spark.executor.read_range`.

Streaming offsets are Spark's Kafka JSON, ``{"topic": {"0": 42}}``; the
checkpoint's offset log is the source of truth, so a restarted query resumes
exactly where the last planned batch ended (``commit()`` is a no-op: Spark's
commit lags one batch, see docs/spark.rst). Admission control: with
``maxOffsetsPerTrigger`` the default read limit is ``ReadMaxRows``, shared
across partitions by backlog; ``Trigger.AvailableNow`` caps every batch at
the latest offsets seen when the trigger started.
"""

import logging

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from pluglog_spark import executor, offsets, remote
from pluglog_spark.control import ClusterView
from pluglog_spark.options import (
    EARLIEST,
    LATEST,
    OptionError,
    SourceOptions,
    value_format_options,
)

try:  # 4.2+: admission control and availableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - pyspark 4.0/4.1
    ReadAllAvailable = ReadMaxRows = None
    SupportsTriggerAvailableNow = object

log = logging.getLogger("pluglog_spark")


class RangePartition(InputPartition):
    """One offset range of one topic-partition."""

    def __init__(self, topic, partition, start, end):
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class _Planner:
    """Driver-side planning shared by the batch and the stream reader."""

    def __init__(self, opts, avro=None):
        self.opts = opts
        self._cluster = None
        #: AvroColumns with valueFormat avro: values decode into typed structs.
        self.avro = avro

    @property
    def cluster(self):
        if self._cluster is None:
            self._cluster = ClusterView(
                self.opts.bootstrap,
                read_committed=self.opts.isolation_level == "read_committed",
            )
        return self._cluster

    def __getstate__(self):
        # Readers are pickled to executors: no sockets go with them.
        state = dict(self.__dict__)
        state["_cluster"] = None
        return state

    def resolve_start(self, tps, streaming):
        """Concrete starting offsets for ``tps`` from the starting* options."""
        opts = self.opts
        wanted = {}
        if opts.starting_timestamps is not None:
            stamps = opts.starting_timestamps
            for topic, partition in tps:
                ts = stamps.get("*", stamps.get(topic, {}).get(partition))
                if ts is None:
                    raise OptionError(
                        f"startingOffsetsByTimestamp has no timestamp for {topic}-{partition}"
                    )
                wanted[(topic, partition)] = ts
            found = self.cluster.list_offsets(wanted)
            latest = self.cluster.latest(tps)
            for tp, offset in found.items():
                if offset < 0:
                    if opts.timestamp_strategy == "error":
                        raise OptionError(
                            f"no record in {tp[0]}-{tp[1]} has a timestamp >= {wanted[tp]}; "
                            "set startingOffsetsByTimestampStrategy=latest to start at the end"
                        )
                    found[tp] = latest[tp]
            return found
        if opts.starting in ("earliest", "latest"):
            spec = EARLIEST if opts.starting == "earliest" else LATEST
            return self.cluster.list_offsets(dict.fromkeys(tps, spec))
        given = {(t, p): o for t, parts in opts.starting.items() for p, o in parts.items()}
        missing = [tp for tp in tps if tp not in given]
        if missing and not streaming:
            raise OptionError(f"startingOffsets has no offset for {missing[0][0]}-{missing[0][1]}")
        specs = {tp: given.get(tp, EARLIEST) for tp in tps}
        symbolic = {tp: s for tp, s in specs.items() if s in (EARLIEST, LATEST)}
        return {**specs, **self.cluster.list_offsets(symbolic)}

    def resolve_end(self, tps):
        ending = self.opts.ending
        latest = self.cluster.latest(tps)
        if ending == "latest":
            return latest
        given = {(t, p): o for t, parts in ending.items() for p, o in parts.items()}
        return {tp: latest[tp] if given.get(tp, LATEST) == LATEST else given[tp] for tp in tps}

    def plan(self, start, end):
        """Input partitions for ``[start, end)`` after the data-loss check."""
        todo = {tp: (s, end[tp]) for tp, s in start.items() if tp in end and end[tp] > s}
        earliest = self.cluster.earliest(sorted(todo)) if todo else {}
        ranges = []
        for tp, (s, e) in sorted(todo.items()):
            low = earliest[tp]
            if s < low:
                message = executor.data_loss_message(tp[0], tp[1], s, low)
                if self.opts.fail_on_data_loss:
                    raise executor.DataLossError(message)
                log.warning("%s Skipping them (failOnDataLoss=false).", message)
                s = low
            ranges.append(offsets.OffsetRange(tp[0], tp[1], s, e))
        direct = []
        if self.opts.remote is not None:
            read_committed = self.opts.isolation_level == "read_committed"
            direct, ranges = remote.split(
                self.cluster, ranges, read_committed, self.opts.fail_on_data_loss
            )
        split = offsets.split_ranges(ranges, self.opts.min_partitions)
        return direct + [RangePartition(*r) for r in split]

    def read(self, partition):
        opts = self.opts
        if isinstance(partition, remote.RemotePartition):
            batches = remote.read_segment(opts.remote, partition)
        else:
            batches = self._read_broker(partition)
        if self.avro is None:
            yield from batches
        else:
            from pluglog_spark.avro import decode_batch

            for batch in batches:
                yield decode_batch(batch, self.avro)

    def _read_broker(self, partition):
        opts = self.opts
        return executor.read_range(
            opts.bootstrap,
            {**opts.kafka, "isolation.level": opts.isolation_level},
            partition.topic,
            partition.partition,
            partition.start,
            partition.end,
            opts.fail_on_data_loss,
            opts.poll_timeout_ms,
        )


class PluglogBatchReader(_Planner, DataSourceReader):
    """``spark.read``: one input partition per topic-partition range."""

    def partitions(self):
        tps = self.cluster.subscribed(self.opts)
        start = self.resolve_start(tps, streaming=False)
        end = self.resolve_end(tps)
        for tp in tps:
            if end[tp] < start[tp]:
                raise OptionError(
                    f"{tp[0]}-{tp[1]}: startingOffsets {start[tp]} is after endingOffsets "
                    f"{end[tp]}"
                )
        parts = self.plan(start, end)
        self.cluster.close()
        # Spark needs at least one partition; an empty range reads nothing.
        return parts or [RangePartition("", 0, 0, 0)]


class PluglogStreamReader(_Planner, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: offsets as Spark's Kafka JSON, with admission control."""

    def __init__(self, opts, avro=None):
        super().__init__(opts, avro)
        self._cap = None  # availableNow: the latest offsets when the trigger started

    def initialOffset(self):
        tps = self.cluster.subscribed(self.opts)
        return offsets.to_json(self.resolve_start(tps, streaming=True))

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger and ReadMaxRows is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self):
        self._cap = self._latest()

    def _latest(self):
        """Latest offsets of every subscribed partition, new ones included."""
        return self.cluster.latest(self.cluster.subscribed(self.opts))

    def latestOffset(self, start=None, limit=None):
        begin = offsets.from_json(start)
        latest = self._latest() if self._cap is None else dict(self._cap)
        new = [tp for tp in latest if tp not in begin]
        # Partitions that appear after the query started are read from the
        # beginning, like Spark's Kafka source does.
        begin.update(self.cluster.earliest(new) if new else {})
        for tp, s in begin.items():
            if tp not in latest:
                latest[tp] = s  # partition gone (topic deleted): stay put
            elif latest[tp] < s:
                message = (
                    f"pluglog: {tp[0]}-{tp[1]} ends at offset {latest[tp]}, before the "
                    f"query's position {s} (topic recreated or truncated)"
                )
                if self.opts.fail_on_data_loss:
                    raise executor.DataLossError(message + "; set failOnDataLoss=false to go on")
                log.warning("%s; restarting it at %d", message, latest[tp])
        max_rows = getattr(limit, "max_rows", None)
        if max_rows is None and limit is None and self.opts.max_offsets_per_trigger:
            max_rows = self.opts.max_offsets_per_trigger  # pyspark < 4.2: no limit passed
        if max_rows:
            latest = offsets.rate_limit(begin, latest, max_rows)
        return offsets.to_json(latest)

    def reportLatestOffset(self):
        return offsets.to_json(self._latest())

    def partitions(self, start, end):
        begin, finish = offsets.from_json(start), offsets.from_json(end)
        new = [tp for tp in finish if tp not in begin]
        begin.update(self.cluster.earliest(new) if new else {})
        for tp, s in list(begin.items()):
            if tp in finish and finish[tp] < s:
                begin[tp] = finish[tp]  # truncated partition, already reported
        return self.plan(begin, finish)

    def commit(self, end):
        """Nothing to do: offsets live in Spark's checkpoint, not in the broker."""

    def stop(self):
        self.cluster.close()


def _lower_options(options):
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


class PluglogDataSource(DataSource):
    """Spark's Kafka source and sink options and schema, served by pluglog."""

    @classmethod
    def name(cls):
        return "pluglog"

    def _avro(self, url, subject):
        cached = getattr(self, "_avro_columns", None)
        if cached is None or (cached.url, cached.subject) != (url, subject):
            from pluglog_spark.avro import AvroColumns

            self._avro_columns = cached = AvroColumns(url, subject)
        return cached

    def _avro_of(self, opts):
        if opts.value_format != "avro":
            return None
        return self._avro(opts.schema_registry_url, opts.value_subject)

    def schema(self):
        opts = _lower_options(self.options)
        topics = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
        chosen = value_format_options(opts, topics)
        if not chosen:
            return executor.SPARK_SCHEMA
        from pluglog_spark.avro import spark_schema

        columns = self._avro(chosen["schema_registry_url"], chosen["value_subject"])
        return spark_schema(columns.value_type)

    def reader(self, schema):
        opts = SourceOptions.parse(self.options, streaming=False)
        return PluglogBatchReader(opts, self._avro_of(opts))

    def streamReader(self, schema):
        opts = SourceOptions.parse(self.options, streaming=True)
        return PluglogStreamReader(opts, self._avro_of(opts))

    def writer(self, schema, overwrite):
        from pluglog_spark.sink import PluglogWriter

        return PluglogWriter(self.options, schema, overwrite)

    def streamWriter(self, schema, overwrite):
        from pluglog_spark.sink import PluglogStreamWriter

        return PluglogStreamWriter(self.options, schema, overwrite)
