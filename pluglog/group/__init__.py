"""The classic consumer-group coordinator and the committed-offset store.

:class:`GroupCoordinator` (one per broker) runs the JoinGroup/SyncGroup/
Heartbeat/LeaveGroup state machine and the offset and group admin APIs;
groups and offsets persist in the internal compacted topic
``__consumer_offsets`` (layout in docs/groups.rst). The request handlers in
:mod:`pluglog.server.handlers.groups` translate wire bodies to its calls.

It may import coordination, security, client, serialization, storage,
protocol and below; never replication (an independence contract), broker or
anything above.
"""

from pluglog.group.coordinator import GroupCoordinator
from pluglog.group.store import OFFSETS_TOPIC

__all__ = ["OFFSETS_TOPIC", "GroupCoordinator"]
