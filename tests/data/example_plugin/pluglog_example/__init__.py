"""A third-party pluglog plugin: a partitioner and a retention policy, by entry point."""

import pluggy
from zope.interface import implementer

from pluglog.interfaces import IPartitioner, IRetentionPolicy

hookimpl = pluggy.HookimplMarker("pluglog")


@implementer(IPartitioner)
class LastPartitioner:
    """Sends every record to the highest-numbered partition."""

    def partition(self, topic, key, num_partitions):
        return num_partitions - 1


@implementer(IRetentionPolicy)
class KeepTwoPolicy:
    """Keeps the two newest segments (the active one included), whatever their age."""

    def segments_to_delete(self, log, topic_config, now_ms):
        return max(0, len(log.segment_infos()) - 2)


@hookimpl
def pluglog_register_partitioners():
    return {"example-last": lambda config, reactor: LastPartitioner()}


@hookimpl
def pluglog_register_retention_policies():
    return {"example-keep-two": lambda config, reactor: KeepTwoPolicy()}
