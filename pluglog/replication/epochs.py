"""The leader-epoch cache, as replication uses it.

The cache and its ``leader-epoch-checkpoint`` file belong to the log (as
Kafka's LeaderEpochFileCache belongs to its UnifiedLog): a segment log loads
it, rebuilds what a crash may have left out, and makes it durable with its
own flushes (:mod:`pluglog.storage.epochs`). This module names it for the
replication code (fetcher, partitions) that reads and extends it.
"""

from pluglog.storage.epochs import FILE_NAME, UNDEFINED, LeaderEpochCache

__all__ = ["FILE_NAME", "UNDEFINED", "LeaderEpochCache"]
