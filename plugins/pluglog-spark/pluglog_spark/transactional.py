"""Exactly-once writes: one Kafka transaction per Spark write task.

Each write task produces its rows inside a transaction whose
``transactional.id`` is ``<prefix>-<writeKey>-<partitionId>``: the write key
is the streaming query id (stable across restarts, it lives in the
checkpoint) or, for ``df.write``, a UUID the driver draws once per write job.
Every attempt of the same partition, a retry or a speculative copy, uses the
same id, so its InitProducerId bumps the producer epoch: the broker aborts
whatever the earlier attempt left open and refuses its later writes
(PRODUCER_FENCED).

The batch id (``0`` for ``df.write``) is recorded inside the same
transaction, as the committed offset ``batchId + 1`` of partition 0 of the
marker topic (the ``topic`` option, else the first row's topic) in the
consumer group named like the transactional id
(``send_offsets_to_transaction``). It becomes visible exactly when the rows
do. Before writing, an attempt reads that offset with ``require_stable``
semantics (read_committed) after its InitProducerId, which returns only once
the previous transaction of the id is completed; an offset above the batch
id means this partition of this batch is already in the topic, and the task
returns without producing. That covers an attempt that committed and then
died before Spark heard of it, and a micro-batch Spark replays after a
driver restart.
"""

import itertools
import json
import logging

from pluglog_spark.executor import produce_rows, producer_config

log = logging.getLogger("pluglog_spark")
TIMEOUT_S = 60.0


def transactional_id(prefix, write_key, partition_id):
    """The transactional id (and marker group) of one partition of one write."""
    return f"{prefix}-{write_key}-{partition_id}"


def _first_rows(batches):
    """``(first non-empty batch, the rest)``, or ``(None, ())`` when empty."""
    batches = iter(batches)
    for batch in batches:
        if batch.num_rows:
            return batch, batches
    return None, ()


def _marker_topic(first, default_topic):
    if default_topic:
        return default_topic
    names = [n.lower() for n in first.schema.names]
    topic = first.column(names.index("topic"))[0].as_py() if "topic" in names else None
    if not topic:
        raise ValueError("pluglog: a row has no topic (null column, no topic option)")
    return topic


def _marker_consumer(ck, bootstrap, extra_config, group_id):
    config = {
        k: v
        for k, v in extra_config.items()
        if not k.startswith(("transaction", "enable.idempotence", "acks", "linger", "batch."))
    }
    config.update(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            # read_committed makes OffsetFetch require stable offsets (KIP-447).
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "client.id": "pluglog-spark-writer",
        }
    )
    return ck.Consumer(config)


def batches_done(consumer, ck, topic, timeout=TIMEOUT_S):
    """How many batches the marker group recorded: its committed offset, or 0."""
    (tp,) = consumer.committed([ck.TopicPartition(topic, 0)], timeout=timeout)
    if tp.error is not None:
        raise RuntimeError(f"pluglog: reading the batch marker of {consumer}: {tp.error}")
    return max(tp.offset, 0)


def write_transaction(
    bootstrap,
    extra_config,
    batches,
    default_topic,
    txn_id,
    batch_id,
    timeout=TIMEOUT_S,
    cut_off=None,
):
    """Write ``batches`` in one transaction as ``txn_id``; return ``(rows, skipped)``.

    ``skipped`` is true when the marker shows batch ``batch_id`` of this
    partition committed by an earlier attempt: nothing is produced then.
    Raises (after aborting) when any record or the commit fails, or when
    ``cut_off()`` says the input ended early (see :mod:`.worker_input`), so
    Spark retries the task.
    """
    import confluent_kafka as ck

    first, rest = _first_rows(batches)
    if first is None:
        return 0, False  # an empty partition has nothing to duplicate
    marker = _marker_topic(first, default_topic)
    producer = ck.Producer(
        producer_config(bootstrap, {**extra_config, "transactional.id": txn_id})
    )
    consumer = _marker_consumer(ck, bootstrap, extra_config, txn_id)
    begun = False
    try:
        # Fences every earlier attempt of this partition and completes (aborts)
        # what it left open, so the marker read next is settled.
        producer.init_transactions(timeout)
        done = batches_done(consumer, ck, marker, timeout)
        if done > batch_id:
            log.info("pluglog: %s already committed batch %d; not written again", txn_id, batch_id)
            return 0, True
        producer.begin_transaction()
        begun = True
        errors = []
        rows = produce_rows(producer, itertools.chain([first], rest), default_topic, errors)
        if errors:
            raise RuntimeError(f"pluglog: {len(errors)} records were not written: {errors[0]}")
        if cut_off is not None and cut_off():
            raise RuntimeError(
                f"pluglog: Spark cut off the input of {txn_id} after {rows} rows (a stage "
                "feeding the write failed); its transaction is aborted"
            )
        info = json.dumps({"batchId": batch_id, "rows": rows}, separators=(",", ":"))
        producer.send_offsets_to_transaction(
            [ck.TopicPartition(marker, 0, batch_id + 1, metadata=info)],
            consumer.consumer_group_metadata(),
            timeout,
        )
        producer.commit_transaction(timeout)
        begun = False
        return rows, False
    except BaseException as exc:
        if begun:
            try:
                producer.abort_transaction(timeout)
            except Exception as abort_exc:  # fenced or broker gone: the broker aborts it
                log.warning(
                    "pluglog: aborting the transaction of %s failed: %s", txn_id, abort_exc
                )
                if _only_fatal(ck, exc) and isinstance(abort_exc, ck.KafkaException):
                    # A produce() after a fatal error says only "Local: Fatal
                    # error"; the abort names the cause (fenced by a newer
                    # attempt of this task), which is what Spark should show.
                    raise abort_exc from exc
        raise
    finally:
        consumer.close()
        _close(producer)


def _only_fatal(ck, exc):
    """``exc`` is librdkafka's bare _FATAL (the cause was reported elsewhere)."""
    if not isinstance(exc, ck.KafkaException) or not exc.args:
        return False
    error = exc.args[0]
    return isinstance(error, ck.KafkaError) and error.code() == ck.KafkaError._FATAL


def _close(producer):
    """Release librdkafka's threads now rather than when the last reference
    (perhaps a traceback Spark keeps) goes; nothing is left to deliver."""
    try:
        producer.purge()
        if hasattr(producer, "close"):  # confluent-kafka >= 2.13
            producer.close()
    except Exception as exc:  # a fenced producer may refuse; it is gone either way
        log.debug("pluglog: closing a transactional producer: %s", exc)
