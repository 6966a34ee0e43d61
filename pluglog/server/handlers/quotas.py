"""DescribeClientQuotas (48) and AlterClientQuotas (49).

Quotas live in the coordinator (``client_quotas()`` /
``alter_client_quotas(changes)``; the local coordinator keeps them in its
metadata file) and the broker's :class:`~pluglog.broker.quotas.ClientQuotas`
follows them through the coordinator's ``client_quotas`` event. Errors are
Kafka's: INVALID_REQUEST for an unknown entity type or key, a bad value or
a bad filter.
"""

from twisted.internet import defer

from pluglog import protocol as codec
from pluglog.broker.quotas import apply_ops, make_entity
from pluglog.errors import INVALID_REQUEST, NONE, KafkaError
from pluglog.server.handlers.common import error_code


def _entity_out(entity):
    return [{"entity_type": t, "entity_name": n} for t, n in entity]


def handle_describe_client_quotas(ctx, request):
    components = []
    for c in request["components"]:
        if c["match_type"] not in (0, 1, 2) or c["entity_type"] not in ("user", "client-id"):
            return {
                "throttle_time_ms": 0,
                "error_code": INVALID_REQUEST,
                "error_message": f"unsupported filter component {c!r}",
                "entries": None,
            }
        components.append((c["entity_type"], c["match_type"], c["match"]))
    quotas = ctx.broker.quotas
    getter = getattr(ctx.broker.coordinator, "client_quotas", None)
    if getter is not None:
        quotas.update(getter())
    entries = [
        {
            "entity": _entity_out(entity),
            "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
        }
        for entity, values in quotas.describe(components, request["strict"])
    ]
    return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None, "entries": entries}


@defer.inlineCallbacks
def handle_alter_client_quotas(ctx, request):
    coordinator = ctx.broker.coordinator
    if not hasattr(coordinator, "alter_client_quotas"):
        message = f"the {type(coordinator).__name__} keeps no client quotas"
        return {
            "throttle_time_ms": 0,
            "entries": [
                {"error_code": INVALID_REQUEST, "error_message": message, "entity": e["entity"]}
                for e in request["entries"]
            ],
        }
    current = coordinator.client_quotas()
    changes = {}
    results = []
    for entry in request["entries"]:
        pairs = [(e["entity_type"], e["entity_name"]) for e in entry["entity"]]
        try:
            entity = make_entity(pairs)
            ops = [(op["key"], op["value"], op["remove"]) for op in entry["ops"]]
            changes[entity] = apply_ops(changes.get(entity, current.get(entity, {})), ops)
            code, message = NONE, None
        except KafkaError as exc:
            code, message = error_code(exc), str(exc)
        results.append({"error_code": code, "error_message": message, "entity": entry["entity"]})
    if changes and not request["validate_only"]:
        yield coordinator.alter_client_quotas(changes)
    return {"throttle_time_ms": 0, "entries": results}


HANDLERS = {
    codec.DESCRIBE_CLIENT_QUOTAS: handle_describe_client_quotas,
    codec.ALTER_CLIENT_QUOTAS: handle_alter_client_quotas,
}
