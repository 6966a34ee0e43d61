"""A third-party pluglog plugin: a partitioner, registered by entry point."""

import pluggy
from zope.interface import implementer

from pluglog.interfaces import IPartitioner

hookimpl = pluggy.HookimplMarker("pluglog")


@implementer(IPartitioner)
class LastPartitioner:
    """Sends every record to the highest-numbered partition."""

    def partition(self, topic, key, num_partitions):
        return num_partitions - 1


@hookimpl
def pluglog_register_partitioners():
    return {"example-last": lambda config, reactor: LastPartitioner()}
