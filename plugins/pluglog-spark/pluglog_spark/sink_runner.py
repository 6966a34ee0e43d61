"""``python -m pluglog_spark.sink_runner``: the Spark sink's child process.

Runs one Structured Streaming query, ``format("pluglog")`` -> a Parquet or
JSON table partitioned by ``date`` (the record timestamp's UTC day), with a
checkpoint so a restarted child resumes exactly where the last committed
micro-batch ended. Each finished micro-batch prints one JSON line on stdout,
``{"batchId", "numInputRows", "endOffsets", ...}``, which the broker relays
to its log. SIGTERM stops the query between batches and exits 0.
"""

import argparse
import json
import signal
import sys
import threading


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m pluglog_spark.sink_runner")
    parser.add_argument("--name", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topics", required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--format", choices=("parquet", "json"), default="parquet")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--trigger-interval", type=float, default=10.0)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    return parser.parse_args(argv)


def emit(report):
    sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    sys.stdout.flush()


def _as_dict(progress):
    if isinstance(progress, dict):
        return progress
    return json.loads(progress.json)


def _progress_line(progress):
    """The relayed fields of a StreamingQueryProgress (a dict or JSON string)."""
    progress = _as_dict(progress)
    sources = progress.get("sources") or [{}]
    end = sources[0].get("endOffset")
    if isinstance(end, str):
        end = json.loads(end)
    return {
        "batchId": progress.get("batchId"),
        "numInputRows": progress.get("numInputRows"),
        "endOffsets": end,
        "inputRowsPerSecond": progress.get("inputRowsPerSecond"),
        "processedRowsPerSecond": progress.get("processedRowsPerSecond"),
    }


def build_query(spark, args):
    from pyspark.sql import functions

    reader = (
        spark.readStream.format("pluglog")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topics)
        .option("startingOffsets", args.starting_offsets)
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    frame = reader.load().withColumn("date", functions.to_date("timestamp"))
    return (
        frame.writeStream.format(args.format)
        .option("path", args.path)
        .option("checkpointLocation", args.checkpoint)
        .partitionBy("date")
        .trigger(processingTime=f"{args.trigger_interval} seconds")
        .queryName(f"pluglog_sink_{args.name}")
        .start()
    )


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from pluglog_spark import local_session

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    spark = local_session(master=args.master, app_name=f"pluglog-sink-{args.name}")
    spark.sparkContext.setLogLevel("WARN")
    query = build_query(spark, args)
    emit({"event": "started", "queryId": str(query.id), "path": args.path})
    last = None
    # Poll rather than register a StreamingQueryListener: it keeps the child
    # single-threaded on the Python side and notices SIGTERM within a second.
    while not stopping.is_set() and query.isActive:
        stopping.wait(0.5)
        for progress in map(_as_dict, query.recentProgress):
            if last is None or progress["batchId"] > last:
                last = progress["batchId"]
                emit(_progress_line(progress))
    error = query.exception()
    query.stop()
    spark.stop()
    if error is not None and not stopping.is_set():
        sys.stderr.write(f"pluglog sink {args.name}: query failed: {error}\n")
        return 1
    emit({"event": "stopped"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
