"""``df.write`` / ``df.writeStream`` ``.format("pluglog")``: Arrow writers.

Rows map to records like Spark's Kafka sink: ``value`` (binary or string),
optional ``key``, ``topic`` (or the ``topic`` option), ``partition`` and
``headers``; other columns are ignored. With ``exactlyOnce`` (the default)
each task writes its rows in one Kafka transaction keyed by the query (or
write) and the partition, with the batch id recorded inside it
(:mod:`pluglog_spark.transactional`), so a retried or speculative attempt and
a replayed micro-batch do not duplicate rows for read_committed readers.
Without it each task produces with the idempotent producer and a failed task
is retried by Spark: at-least-once.

Streaming writes also skip micro-batches that were already committed as a
whole. Spark can run a batch id twice: when the driver dies after the sink
committed batch N but before Spark wrote ``commits/N`` in the checkpoint,
the restarted query replays batch N with the same id and the same input. To
make that replay a no-op, :meth:`PluglogStreamWriter.commit` (driver side,
after every task of the batch succeeded) writes a marker file
``<commitLog>/<queryId>/<batchId>``. The commit log defaults to
``<checkpointLocation>/pluglog-commits`` so it lives and dies with the
checkpoint. The writer loads the markers when Spark builds it at query
start, before it is pickled to executors; each task reads its query id and
batch id from Spark's task-local properties and, if the pair is marked,
returns without producing. docs/spark.rst ("Exactly-once writes") has the
guarantee and its limits.
"""

import json
import logging
import os
import uuid
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from pluglog_spark import executor, transactional, worker_input
from pluglog_spark.options import OptionError, SinkOptions, check_write_schema

log = logging.getLogger("pluglog_spark")
KEEP_MARKERS = 100  # only the last batches can be replayed; older markers are pruned
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass
class WriteResult(WriterCommitMessage):
    rows: int
    query_id: str | None = None
    skipped: bool = False


def _local_path(location):
    if location.startswith("file://"):
        return location[len("file://") :]
    if location.startswith("file:"):
        return location[len("file:") :]
    if "://" in location:
        raise OptionError(
            f"commit log {location!r}: only local or mounted paths are supported; "
            "set the commitLog option to a shared filesystem path"
        )
    return location


class CommitLog:
    """Marker files ``<root>/<queryId>/<batchId>``, one per committed micro-batch."""

    def __init__(self, location):
        self.root = os.path.abspath(_local_path(location))

    def load(self):
        """``{query_id: {batch_id, ...}}`` of every marker present."""
        out = {}
        if not os.path.isdir(self.root):
            return out
        for query_id in os.listdir(self.root):
            folder = os.path.join(self.root, query_id)
            if os.path.isdir(folder):
                out[query_id] = {int(n) for n in os.listdir(folder) if n.isdigit()}
        return out

    def mark(self, query_id, batch_id, info):
        folder = os.path.join(self.root, query_id)
        os.makedirs(folder, exist_ok=True)
        final = os.path.join(folder, str(batch_id))
        temp = final + ".tmp"
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump(info, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, final)  # atomic: a marker is either whole or absent
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        for name in os.listdir(folder):
            if name.isdigit() and int(name) <= batch_id - KEEP_MARKERS:
                os.unlink(os.path.join(folder, name))


def avro_columns(opts):
    """The value subject's schema with valueFormat avro, else None."""
    if opts.value_format != "avro":
        return None
    from pluglog_spark.avro import AvroColumns

    return AvroColumns(opts.schema_registry_url, opts.value_subject)


def encode_batches(batches, avro):
    """With valueFormat avro, turn the struct ``value`` column into framed Avro."""
    if avro is None:
        yield from batches
        return
    import pyarrow as pa

    for batch in batches:
        names = [n.lower() for n in batch.schema.names]
        index = names.index("value")
        encoded = pa.array(avro.encode_values(batch.column(index).to_pylist()), pa.binary())
        arrays = list(batch.columns)
        arrays[index] = encoded
        yield pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def _task_context():
    from pyspark import TaskContext

    return TaskContext.get()


def write_task(opts, batches, write_key, batch_id):
    """One write task: in a transaction keyed by ``write_key`` and the task's
    partition id with exactlyOnce, else with the idempotent producer.
    Returns ``(rows, skipped)``."""
    if not opts.exactly_once:
        return executor.write_batches(opts.bootstrap, opts.kafka, batches, opts.topic), False
    context = _task_context()
    partition_id = context.partitionId() if context else 0
    txn_id = transactional.transactional_id(opts.transactional_id_prefix, write_key, partition_id)
    return transactional.write_transaction(
        opts.bootstrap,
        opts.kafka,
        batches,
        opts.topic,
        txn_id,
        batch_id,
        cut_off=_cut_off_or_warn,
    )


def _cut_off_or_warn():
    cut = worker_input.input_cut_off()
    if cut is None:
        log.warning(
            "pluglog: cannot tell whether Spark cut this task's input off (unknown PySpark "
            "worker); committing: a failure upstream of the write could commit part of it"
        )
    return bool(cut)


class PluglogWriter(DataSourceArrowWriter):
    """Batch write: one transaction per task (exactlyOnce), keyed by a write id
    the driver draws once, so retried and speculative attempts fence each other."""

    def __init__(self, options, schema, overwrite):
        if overwrite:
            raise OptionError("a pluglog topic is append-only: use mode('append')")
        self.opts = SinkOptions.parse(options)
        check_write_schema(schema, self.opts.topic, self.opts.value_format)
        self.avro = avro_columns(self.opts)
        # Built on the driver once per df.write and pickled to every task attempt.
        self.write_key = uuid.uuid4().hex

    def write(self, iterator):
        batches = encode_batches(iterator, self.avro)
        rows, skipped = write_task(self.opts, batches, self.write_key, 0)
        return WriteResult(rows, skipped=skipped)

    def commit(self, messages):
        rows = sum(m.rows for m in messages if m is not None)
        log.info("pluglog: batch write committed %d rows", rows)

    def abort(self, messages):
        rows = sum(m.rows for m in messages if m is not None)
        if self.opts.exactly_once:
            log.warning(
                "pluglog: batch write %s aborted; %d rows of the tasks that succeeded are "
                "committed and stay in the topic (one transaction per task)",
                self.write_key,
                rows,
            )
        else:
            log.warning("pluglog: batch write aborted; %d rows were already produced", rows)


class PluglogStreamWriter(DataSourceStreamArrowWriter):
    """Streaming write that does not repeat committed micro-batches."""

    def __init__(self, options, schema, overwrite):
        self.opts = SinkOptions.parse(options)
        check_write_schema(schema, self.opts.topic, self.opts.value_format)
        self.avro = avro_columns(self.opts)
        self.commit_log = CommitLog(self.opts.commit_log) if self.opts.commit_log else None
        if self.commit_log is None and not self.opts.exactly_once:
            log.warning(
                "pluglog: no checkpointLocation or commitLog option: a replayed "
                "micro-batch will be written again (at-least-once)"
            )
        self.committed = self.commit_log.load() if self.commit_log else {}
        self.fallback_key = uuid.uuid4().hex

    def write(self, iterator):
        context = _task_context()
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        batch_id = int(batch_id) if batch_id is not None else 0
        if query_id and batch_id in self.committed.get(query_id, ()):
            return WriteResult(0, query_id, skipped=True)
        batches = encode_batches(iterator, self.avro)
        rows, skipped = write_task(self.opts, batches, query_id or self.fallback_key, batch_id)
        return WriteResult(rows, query_id, skipped=skipped)

    def commit(self, messages, batch_id):
        messages = [m for m in messages if m is not None]
        rows = sum(m.rows for m in messages)
        if messages and all(m.skipped for m in messages):
            log.info("pluglog: micro-batch %d was committed before; not written again", batch_id)
        query_ids = {m.query_id for m in messages if m.query_id}
        if self.commit_log is not None and len(query_ids) == 1:
            self.commit_log.mark(query_ids.pop(), batch_id, {"batchId": batch_id, "rows": rows})

    def abort(self, messages, batch_id):
        rows = sum(m.rows for m in messages if m is not None)
        if self.opts.exactly_once:
            log.warning(
                "pluglog: micro-batch %d aborted; %d rows of the tasks that succeeded are "
                "committed and are not written again when Spark retries the batch",
                batch_id,
                rows,
            )
            return
        log.warning(
            "pluglog: micro-batch %d aborted after %d rows were produced; Spark will "
            "retry it (at-least-once for this batch)",
            batch_id,
            rows,
        )
