"""A third-party pluglog retention policy, registered by entry point."""

import pluggy
from zope.interface import implementer

from pluglog.interfaces import IRetentionPolicy

hookimpl = pluggy.HookimplMarker("pluglog")


@implementer(IRetentionPolicy)
class KeepTwoPolicy:
    """Keeps the two newest segments (the active one included), whatever their age."""

    def segments_to_delete(self, log, topic_config, now_ms):
        return max(0, len(log.segment_infos()) - 2)


@hookimpl
def pluglog_register_retention_policies():
    return {"example-keep-two": lambda config, reactor: KeepTwoPolicy()}
