"""The executors' data plane: read offset ranges into Arrow, write Arrow out.

Executors use confluent-kafka (librdkafka) rather than pluglog's own blocking
codec: measured on this project's 2-core machine, reading ~300,000 records
into Arrow columns ran at 117-290k records/s with confluent-kafka against
72-87k/s with ``BlockingClient`` + :func:`pluglog.protocol.records.iter_batches`
(pure-Python varint decoding per record), and producing ran at 215-350k/s
against 62-131k/s (bench/spark_bench.py ``clients``; bench/RESULTS.md).

Reads yield ``pyarrow.RecordBatch`` objects shaped exactly like
:data:`ARROW_SCHEMA`, so Spark's Python worker skips its per-row conversion.
Writes consume Arrow batches (``DataSourceArrowWriter``) for the same reason.

Data loss: a range that starts below the partition's log start offset
(retention or DeleteRecords removed it) raises :class:`DataLossError` when
``failOnDataLoss`` is true; otherwise the reader skips to the earliest offset
still present. Gaps inside a range (compaction, transaction markers) are
normal and never count as loss.
"""

import time
import uuid

import pyarrow as pa

_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.field("element", _HEADER))),
    ]
)
SPARK_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>"
)
ROWS_PER_BATCH = 65536


class DataLossError(RuntimeError):
    """Records a query needs were removed from the log before it read them."""


def data_loss_message(topic, partition, wanted, earliest):
    return (
        f"pluglog: partition {topic}-{partition} starts at offset {earliest}, but the query "
        f"needs offset {wanted}: records [{wanted}, {earliest}) were removed (retention or "
        f"DeleteRecords) before they were read. Set failOnDataLoss=false to skip them."
    )


def consumer_config(bootstrap, extra):
    config = {
        "bootstrap.servers": bootstrap,
        # librdkafka wants a group id even for assign(); nothing is committed.
        "group.id": f"pluglog-spark-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "fetch.wait.max.ms": 50,
        "fetch.max.bytes": 52428800,
        "max.partition.fetch.bytes": 8388608,
        "queued.max.messages.kbytes": 262144,
        "client.id": "pluglog-spark-executor",
    }
    config.update(extra)
    return config


class Columns:
    """Rows being gathered into one Arrow batch of :data:`ARROW_SCHEMA`."""

    __slots__ = ("keys", "values", "offsets", "micros", "kinds", "headers")

    def __init__(self):
        self.keys, self.values, self.offsets = [], [], []
        self.micros, self.kinds, self.headers = [], [], []

    def __len__(self):
        return len(self.offsets)

    def add(self, key, value, offset, timestamp_ms, log_append_time, headers):
        self.keys.append(key)
        self.values.append(value)
        self.offsets.append(offset)
        self.micros.append(timestamp_ms * 1000 if timestamp_ms >= 0 else None)
        # Spark's timestampType column: 0 CreateTime, 1 LogAppendTime.
        self.kinds.append(1 if log_append_time else 0)
        # A record without headers has a null column, as librdkafka reports it.
        self.headers.append(list(headers) if headers else None)

    def batch(self, topic, partition):
        n = len(self)
        list_offsets, hkeys, hvalues, valid = [0], [], [], []
        for hs in self.headers:
            if hs:
                for k, v in hs:
                    hkeys.append(k)
                    hvalues.append(v)
            valid.append(hs is not None)
            list_offsets.append(len(hkeys))
        header_array = pa.ListArray.from_arrays(
            pa.array(list_offsets, pa.int32()),
            pa.StructArray.from_arrays(
                [pa.array(hkeys, pa.string()), pa.array(hvalues, pa.binary())],
                fields=list(_HEADER),
            ),
            type=ARROW_SCHEMA.field("headers").type,
            mask=pa.array([not v for v in valid], pa.bool_()),
        )
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array([topic] * n, pa.string()) if n else pa.array([], pa.string()),
                pa.array([partition] * n, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.micros, ARROW_SCHEMA.field("timestamp").type),
                pa.array(self.kinds, pa.int32()),
                header_array,
            ],
            schema=ARROW_SCHEMA,
        )


def _to_batch(topic, partition, msgs):
    rows = Columns()
    for m in msgs:
        # librdkafka: 1 = CreateTime, 2 = LogAppendTime.
        kind, ts = m.timestamp()
        hs = m.headers()
        rows.add(m.key(), m.value(), m.offset(), ts, kind == 2, hs)
        if hs is not None and not hs:
            rows.headers[-1] = []  # librdkafka's empty list stays empty, not null
    return rows.batch(topic, partition)


def read_range(
    bootstrap,
    extra_config,
    topic,
    partition,
    start,
    end,
    fail_on_data_loss,
    poll_timeout_ms=120000,
):
    """Yield Arrow batches holding the records of ``topic-partition`` in
    ``[start, end)``; offsets missing inside the range (compaction) are skipped."""
    import confluent_kafka as ck

    if end <= start:
        return
    consumer = ck.Consumer(consumer_config(bootstrap, extra_config))
    try:
        consumer.assign([ck.TopicPartition(topic, partition, start)])
        pending = []
        last_progress = time.monotonic()
        done = False
        while not done:
            msgs = consumer.consume(10000, 0.5)
            if not msgs:
                if (time.monotonic() - last_progress) * 1000 > poll_timeout_ms:
                    raise TimeoutError(
                        f"pluglog: no records from {topic}-{partition} for {poll_timeout_ms} ms "
                        f"while reading [{start}, {end})"
                    )
                continue
            last_progress = time.monotonic()
            good = msgs
            for i, msg in enumerate(msgs):
                err = msg.error()
                if err is None:
                    continue
                good = msgs[:i]
                if err.code() == ck.KafkaError._PARTITION_EOF:
                    done = True  # the high watermark is at or past ``end``
                elif err.code() == ck.KafkaError._AUTO_OFFSET_RESET:
                    low, _high = consumer.get_watermark_offsets(
                        ck.TopicPartition(topic, partition), timeout=10
                    )
                    if fail_on_data_loss:
                        raise DataLossError(data_loss_message(topic, partition, start, low))
                    if low >= end:
                        done = True
                    else:
                        start = low
                        consumer.assign([ck.TopicPartition(topic, partition, low)])
                else:
                    raise RuntimeError(f"pluglog: reading {topic}-{partition}: {err}")
                break
            if good and good[-1].offset() >= end - 1:
                done = True
                while good and good[-1].offset() >= end:
                    good.pop()
            pending.extend(good)
            if len(pending) >= ROWS_PER_BATCH or (done and pending):
                yield _to_batch(topic, partition, pending)
                pending = []
    finally:
        consumer.close()


def producer_config(bootstrap, extra):
    config = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        # Idempotence stops librdkafka's own retries from duplicating records.
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.num.messages": 10000,
        "batch.size": 1048576,
        "queue.buffering.max.messages": 1000000,
        "queue.buffering.max.kbytes": 1048576,
        # Java's default partitioner (murmur2) so keyed rows land where Kafka's would.
        "partitioner": "murmur2_random",
        "client.id": "pluglog-spark-writer",
    }
    config.update(extra)
    return config


def _column(batch, name):
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    return batch.column(index).to_pylist()


def produce_rows(producer, batches, default_topic, errors):
    """Hand every row of the Arrow ``batches`` to ``producer``; return the
    number of rows. Delivery errors land in ``errors``; producing stops at
    the first one."""

    def delivered(err, _msg):
        if err is not None:
            errors.append(err)

    rows = 0
    produce = producer.produce
    for batch in batches:
        lowered = batch.rename_columns([n.lower() for n in batch.schema.names])
        n = lowered.num_rows
        values = _column(lowered, "value")
        keys = _column(lowered, "key") or [None] * n
        topics = _column(lowered, "topic") or [default_topic] * n
        parts = _column(lowered, "partition") or [None] * n
        headers = _column(lowered, "headers") or [None] * n
        for i in range(n):
            topic = topics[i] or default_topic
            if not topic:
                raise ValueError("pluglog: a row has no topic (null column, no topic option)")
            hs = headers[i]
            if hs:
                hs = [(h["key"], h["value"]) for h in hs]
            part = parts[i]
            while True:
                try:
                    produce(
                        topic,
                        values[i],
                        keys[i],
                        partition=-1 if part is None else part,
                        on_delivery=delivered,
                        headers=hs,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            if errors:
                break
        rows += n
        producer.poll(0)
        if errors:
            break
    return rows


def write_batches(bootstrap, extra_config, batches, default_topic):
    """Produce every row of the Arrow ``batches``; return the number written.

    Raises when any record was not acknowledged, so Spark fails (and retries)
    the task instead of losing rows silently.
    """
    import confluent_kafka as ck

    producer = ck.Producer(producer_config(bootstrap, extra_config))
    errors = []
    rows = produce_rows(producer, batches, default_topic, errors)
    remaining = producer.flush(120)
    if errors:
        raise RuntimeError(f"pluglog: {len(errors)} records were not written: {errors[0]}")
    if remaining:
        raise RuntimeError(f"pluglog: {remaining} records still unacknowledged after 120 s")
    return rows
