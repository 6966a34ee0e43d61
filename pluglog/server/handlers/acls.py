"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31) over the IAuthorizer.

Without an authorizer they answer SECURITY_DISABLED, as Kafka does. Who may
call them (DESCRIBE / ALTER on the cluster) is checked by
:mod:`pluglog.server.checks` before these run.
"""

from types import SimpleNamespace

from twisted.internet import defer

from pluglog.errors import INVALID_REQUEST, NONE, SECURITY_DISABLED
from pluglog.security.acls import AclBinding


def _authorizer(ctx):
    security = getattr(ctx.broker, "security", None)
    return security.authorizer if security is not None else None


def _filter(request):
    return SimpleNamespace(
        resource_type=request["resource_type_filter"],
        resource_name=request["resource_name_filter"],
        pattern_type=request.get("pattern_type_filter", 3),
        principal=request["principal_filter"],
        host=request["host_filter"],
        operation=request["operation"],
        permission_type=request["permission_type"],
    )


def handle_describe_acls(ctx, request):
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return {
            "throttle_time_ms": 0,
            "error_code": SECURITY_DISABLED,
            "error_message": "no authorizer is configured",
            "resources": [],
        }
    grouped = {}
    for b in authorizer.describe_acls(_filter(request)):
        key = (b.resource_type, b.resource_name, b.pattern_type)
        grouped.setdefault(key, []).append(
            {
                "principal": b.principal,
                "host": b.host,
                "operation": b.operation,
                "permission_type": b.permission_type,
            }
        )
    return {
        "throttle_time_ms": 0,
        "error_code": NONE,
        "error_message": None,
        "resources": [
            {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in sorted(grouped.items())
        ],
    }


@defer.inlineCallbacks
def handle_create_acls(ctx, request):
    authorizer = _authorizer(ctx)
    creations = request["creations"]
    if authorizer is None:
        results = [
            {"error_code": SECURITY_DISABLED, "error_message": "no authorizer is configured"}
        ] * len(creations)
        return {"throttle_time_ms": 0, "results": results}
    bindings = [
        AclBinding(
            c["resource_type"],
            c["resource_name"],
            c.get("resource_pattern_type", 3),
            c["principal"],
            c["host"],
            c["operation"],
            c["permission_type"],
        )
        for c in creations
    ]
    results = []
    # A ZooKeeper store answers once the write is in ZooKeeper (a Deferred).
    errors = yield defer.maybeDeferred(authorizer.create_acls, bindings)
    for error in errors:
        if error is None:
            results.append({"error_code": NONE, "error_message": None})
        elif isinstance(error, tuple):  # IAuthorizer's (code, message)
            results.append({"error_code": error[0], "error_message": error[1]})
        else:  # a message: the binding is invalid, as Kafka's InvalidRequestException
            results.append({"error_code": INVALID_REQUEST, "error_message": error})
    return {"throttle_time_ms": 0, "results": results}


@defer.inlineCallbacks
def handle_delete_acls(ctx, request):
    authorizer = _authorizer(ctx)
    filters = request["filters"]
    if authorizer is None:
        results = [
            {
                "error_code": SECURITY_DISABLED,
                "error_message": "no authorizer is configured",
                "matching_acls": [],
            }
        ] * len(filters)
        return {"throttle_time_ms": 0, "filter_results": results}
    out = []
    deleted = yield defer.maybeDeferred(authorizer.delete_acls, [_filter(f) for f in filters])
    for gone in deleted:
        out.append(
            {
                "error_code": NONE,
                "error_message": None,
                "matching_acls": [
                    {
                        "error_code": NONE,
                        "error_message": None,
                        "resource_type": b.resource_type,
                        "resource_name": b.resource_name,
                        "pattern_type": b.pattern_type,
                        "principal": b.principal,
                        "host": b.host,
                        "operation": b.operation,
                        "permission_type": b.permission_type,
                    }
                    for b in gone
                ],
            }
        )
    return {"throttle_time_ms": 0, "filter_results": out}


HANDLERS = {29: handle_describe_acls, 30: handle_create_acls, 31: handle_delete_acls}
