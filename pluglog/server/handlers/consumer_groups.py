"""Handlers of the KIP-848 consumer group APIs: ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69).

They translate between the request/response bodies and
:class:`pluglog.group.consumer.ConsumerGroupOperations` of the broker's group
coordinator, where the protocol lives.
"""

from pluglog import protocol as codec
from pluglog.security.acls import GROUP
from pluglog.server.authorization import authorized_operations
from pluglog.server.handlers.groups import client_host, coordinator

#: ConsumerGroupDescribe's AuthorizedOperations when they were not asked for
_OPERATIONS_OMITTED = -(2**31)


def handle_consumer_group_heartbeat(ctx, request):
    gc = coordinator(ctx.broker)
    return gc.consumer_heartbeat(request, ctx.header.client_id or "", client_host(ctx.peer))


def handle_consumer_group_describe(ctx, request):
    gc = coordinator(ctx.broker)
    groups = []
    for group_id in request["group_ids"]:
        described = gc.describe_consumer_group(group_id)
        described["authorized_operations"] = _OPERATIONS_OMITTED
        if request["include_authorized_operations"]:
            described["authorized_operations"] = authorized_operations(ctx, GROUP, group_id)
        groups.append(described)
    return {"throttle_time_ms": 0, "groups": groups}


HANDLERS = {
    codec.CONSUMER_GROUP_HEARTBEAT: handle_consumer_group_heartbeat,
    codec.CONSUMER_GROUP_DESCRIBE: handle_consumer_group_describe,
}
