"""pluglog-spark: Spark's Kafka source and sink API, served by a pluglog broker.

``register(spark)`` makes ``format("pluglog")`` available in a SparkSession
(:mod:`pluglog_spark.source`, :mod:`pluglog_spark.sink`);
:func:`local_session` builds a local session with the settings this
machine class needs; :mod:`pluglog_spark.plugin` is the broker-side Spark
sink, loaded through the ``pluglog`` entry point group. Importing this
package does not import pyspark.
"""

import os
import sys

__version__ = "0.1.0"


def register(spark):
    """Register the ``pluglog`` data source with ``spark`` and return the class."""
    from pluglog_spark.source import PluglogDataSource

    spark.dataSource.register(PluglogDataSource)
    return PluglogDataSource


def local_session(master="local[2]", app_name="pluglog-spark", conf=None):
    """A local SparkSession with ``format("pluglog")`` registered.

    Sets what PySpark 4.x needs here before the JVM starts: workers must run
    this interpreter (it has pyarrow), and Spark must bind to loopback.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
