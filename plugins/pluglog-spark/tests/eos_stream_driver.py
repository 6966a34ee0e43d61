"""A Spark driver for the exactly-once streaming test, run as its own process.

``python eos_stream_driver.py BOOTSTRAP SOURCE TARGET CHECKPOINT HANG_FILE``
copies SOURCE to TARGET with ``readStream.format("pluglog")`` ->
``writeStream.format("pluglog")`` (availableNow, 2 micro-batches). The row at
offset :data:`HANG_OFFSET` of source partition 2 (in batch 1) makes its task
create HANG_FILE and hang, after the task's transaction holds rows: the test
then SIGKILLs this driver mid-batch, and restarts the query from the same
checkpoint in its own session with :func:`start_query`.
"""

import os
import sys
import time

ROWS_PER_PARTITION = 3000
PER_TRIGGER = 4500  # 1500 rows of each of the 3 partitions per micro-batch
HANG_PARTITION, HANG_OFFSET = 2, 2700  # 1200 rows into batch 1 of partition 2


def start_query(spark, bootstrap, source, target, checkpoint, hang_file=None):
    """The copy query; with ``hang_file`` its batch-1 task of partition 2 hangs."""
    from pyspark.sql.functions import col, udf

    @udf("binary")
    def passthrough(partition, offset, value):
        if hang_file and partition == HANG_PARTITION and offset == HANG_OFFSET:
            with open(hang_file, "w") as marker:
                marker.write(str(os.getpid()))
            time.sleep(3600)
        return value

    return (
        spark.readStream.format("pluglog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(PER_TRIGGER))
        .load()
        .select(col("key"), passthrough("partition", "offset", "value").alias("value"))
        .writeStream.format("pluglog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def main(bootstrap, source, target, checkpoint, hang_file):
    from pluglog_spark import local_session

    spark = local_session(
        # Small Arrow batches, so the writer produces rows before the hang.
        conf={"spark.sql.execution.arrow.maxRecordsPerBatch": "200"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    start_query(spark, bootstrap, source, target, checkpoint, hang_file).awaitTermination()
    return 1  # not reached: the test kills this process while batch 1 hangs


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
