"""What each data and group API needs from the authorizer, as Kafka's KafkaApis
checks it (the rest: :mod:`pluglog.server.api_checks`, which also holds the
whole table and :func:`~pluglog.server.api_checks.checked`).

Runs only on connections of a broker with an authorizer (the protocol sends
every request of such a connection here instead of the produce fast lane),
so a broker without one pays nothing. Decisions are cached per connection
(principal, operation, resource) until the ACLs change. Multi-topic requests
answer the denied topics with TOPIC_AUTHORIZATION_FAILED and pass the rest
on; group requests get GROUP_AUTHORIZATION_FAILED; cluster-level ones
CLUSTER_AUTHORIZATION_FAILED. Metadata hides topics the principal may not
DESCRIBE when it asks for all of them.
"""

from twisted.internet import defer

from pluglog.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
)
from pluglog.security.acls import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER,
    CLUSTER_NAME,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    READ,
    TOPIC,
    WRITE,
)
from pluglog.server.authorization import allowed
from pluglog.server.handlers.common import NO_RESPONSE, CloseConnection, resolve_topic_ids
from pluglog.server.handlers.core import _brokers as _broker_entries
from pluglog.server.handlers.produce import partition_result

_DENIED = "not authorized"
#: Kafka's AclOperation CLUSTER_ACTION and ResourceType TRANSACTIONAL_ID
CLUSTER_ACTION, TRANSACTIONAL_ID = 9, 5


def _split(ctx, entries, key, operation):
    """``(ok, denied)``; an entry naming an unknown topic id (KIP-516) is
    passed on: the handler answers it UNKNOWN_TOPIC_ID, as Kafka does."""
    ok, denied = [], []
    for entry in entries:
        name = entry[key]
        unknown_id = name is None and entry.get("by_id")
        (ok if unknown_id or allowed(ctx, operation, TOPIC, name) else denied).append(entry)
    return ok, denied


def _then(result, fix):
    if isinstance(result, defer.Deferred):
        return result.addCallback(fix)
    return fix(result)


def _produce(ctx, request, handler):
    txn_id = request.get("transactional_id")
    if txn_id is not None and not allowed(ctx, WRITE, TRANSACTIONAL_ID, txn_id):
        # Kafka answers every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
        if request.get("acks") == 0:
            raise CloseConnection(f"produce not authorized to WRITE transactional id {txn_id}")
        return {
            "responses": [
                {
                    "name": t["name"],
                    "partition_responses": [
                        partition_result(p["index"], TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                        for p in t["partition_data"]
                    ],
                }
                for t in request["topic_data"]
            ],
            "throttle_time_ms": 0,
        }
    ok, denied = _split(ctx, request["topic_data"], "name", WRITE)
    if not denied:
        return handler(ctx, request)
    request["topic_data"] = ok
    extra = [
        {
            "name": t["name"],
            "partition_responses": [
                partition_result(p["index"], TOPIC_AUTHORIZATION_FAILED)
                for p in t["partition_data"]
            ],
        }
        for t in denied
    ]

    if request.get("acks") == 0:
        # No response slot to carry the error: Kafka closes the connection
        # (after appending what was allowed).
        if ok:
            handler(ctx, request)
        names = ", ".join(sorted({t["name"] for t in denied}))
        raise CloseConnection(f"acks=0 produce not authorized to WRITE topic(s) {names}")

    def fix(body):
        if body is NO_RESPONSE:
            return body
        body["responses"].extend(extra)
        return body

    return _then(handler(ctx, request), fix)


def _fetch(ctx, request, handler):
    resolve_topic_ids(ctx.broker, 1, ctx.version, request)
    ok, denied = _split(ctx, request["topics"], "topic", READ)
    if not denied:
        return handler(ctx, request)
    request["topics"] = ok
    extra = [
        {
            "topic": t["topic"],
            "topic_id": t.get("topic_id"),
            "partitions": [
                {
                    "partition_index": p["partition"],
                    "error_code": TOPIC_AUTHORIZATION_FAILED,
                    "high_watermark": -1,
                    "last_stable_offset": -1,
                    "log_start_offset": -1,
                    "records": None,
                }
                for p in t["partitions"]
            ],
        }
        for t in denied
    ]

    def fix(body):
        body["responses"].extend(extra)
        return body

    return _then(handler(ctx, request), fix)


def _metadata(ctx, request, handler):
    resolve_topic_ids(ctx.broker, 3, ctx.version, request)
    requested = request["topics"]
    denied = []
    if requested:
        ok, denied = _split(ctx, requested, "name", DESCRIBE)
        ok, no_create = _creatable(ctx, request, ok)
        denied += no_create
        if not ok:
            request["allow_auto_topic_creation"] = False
            # An empty list would mean "all topics" in v0: ask for a name that
            # cannot exist and drop its entry below.
            ok = []
        request["topics"] = ok

    def fix(body):
        topics = [
            t
            for t in body["topics"]
            if t["name"] is None or allowed(ctx, DESCRIBE, TOPIC, t["name"])
        ]
        topics += [
            {
                "error_code": TOPIC_AUTHORIZATION_FAILED,
                # Asked by id: the name is not given away (Kafka's rule).
                "name": None if t.get("by_id") else t["name"],
                "topic_id": t.get("topic_id"),
                "is_internal": False,
                "partitions": [],
            }
            for t in denied
        ]
        body["topics"] = topics
        return body

    if requested and not request["topics"]:
        return fix(
            {
                "throttle_time_ms": 0,
                "brokers": _brokers(ctx),
                "cluster_id": ctx.broker.coordinator.cluster_id(),
                "controller_id": ctx.broker.coordinator.controller_id(),
                "topics": [],
            }
        )
    return _then(handler(ctx, request), fix)


def _creatable(ctx, request, entries):
    """Kafka's auto-creation rule: a missing topic the request would create
    needs CREATE on the cluster or on the topic; without it the topic is not
    created and is answered TOPIC_AUTHORIZATION_FAILED."""
    auto = request.get("allow_auto_topic_creation", True) if ctx.version >= 4 else True
    if not (auto and ctx.broker.config.auto_create_topics_enable):
        return entries, []
    existing = ctx.broker.coordinator.topics()
    missing = [e for e in entries if not e.get("by_id") and e["name"] not in existing]
    if not missing or allowed(ctx, CREATE, CLUSTER, CLUSTER_NAME):
        return entries, []
    refused = [e for e in missing if not allowed(ctx, CREATE, TOPIC, e["name"])]
    return [e for e in entries if e not in refused], refused


def _brokers(ctx):
    return [
        {"node_id": n, "host": h, "port": p, "rack": r}
        for n, h, p, r in _broker_entries(ctx.broker, ctx.session)
    ]


def _named_topics(operation, list_key, name_key, response_key, alt_cluster=None):
    def check(ctx, request, handler):
        entries = request[list_key]
        names = entries if entries and isinstance(entries[0], str) else None
        if alt_cluster is not None and allowed(ctx, alt_cluster, CLUSTER, CLUSTER_NAME):
            return handler(ctx, request)
        if names is not None:
            ok = [n for n in names if allowed(ctx, operation, TOPIC, n)]
            denied = [n for n in names if n not in ok]
            request[list_key] = ok
        else:
            ok, denied_entries = _split(ctx, entries, name_key, operation)
            denied = [e[name_key] for e in denied_entries]
            request[list_key] = ok
        if not denied:
            return handler(ctx, request)
        extra = [
            {"name": n, "error_code": TOPIC_AUTHORIZATION_FAILED, "error_message": _DENIED}
            for n in denied
        ]

        def fix(body):
            body.setdefault(response_key, []).extend(extra)
            return body

        return _then(handler(ctx, request), fix)

    return check


_delete_by_name = _named_topics(DELETE, "topic_names", "name", "responses")


def _delete_topics(ctx, request, handler):
    """DeleteTopics: v6+ names topics by name or id (KIP-516)."""
    if ctx.version < 6:
        return _delete_by_name(ctx, request, handler)
    resolve_topic_ids(ctx.broker, 20, ctx.version, request)
    ok, denied = _split(ctx, request["topics"], "name", DELETE)
    if not denied:
        return handler(ctx, request)
    request["topics"] = ok
    extra = [
        {
            "name": None if t.get("by_id") else t["name"],
            "topic_id": t["topic_id"],
            "error_code": TOPIC_AUTHORIZATION_FAILED,
            "error_message": _DENIED,
        }
        for t in denied
    ]

    def fix(body):
        body.setdefault("responses", []).extend(extra)
        return body

    return _then(handler(ctx, request), fix)


def _group(operation):
    def check(ctx, request, handler):
        if allowed(ctx, operation, GROUP, request["group_id"]):
            return handler(ctx, request)
        return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "topics": []}

    return check


def _find_coordinator(ctx, request, handler):
    key_type = request.get("key_type", 0)
    # Groups (0) need DESCRIBE on the group, transactional ids (1) on the
    # TRANSACTIONAL_ID resource.
    resource, code = (GROUP, GROUP_AUTHORIZATION_FAILED)
    if key_type == 1:
        resource, code = (TRANSACTIONAL_ID, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if key_type not in (0, 1):
        return handler(ctx, request)
    if ctx.version >= 4:
        return _find_coordinators(ctx, request, handler, resource, code)
    if allowed(ctx, DESCRIBE, resource, request["key"]):
        return handler(ctx, request)
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": _DENIED,
        "node_id": -1,
        "host": "",
        "port": -1,
    }


def _find_coordinators(ctx, request, handler, resource, code):
    """FindCoordinator v4+: denied keys get their own entry, in request order."""
    keys = request["coordinator_keys"]
    denied = {k for k in keys if not allowed(ctx, DESCRIBE, resource, k)}
    if not denied:
        return handler(ctx, request)
    request["coordinator_keys"] = [k for k in keys if k not in denied]

    def fix(body):
        found = {c["key"]: c for c in body["coordinators"]}
        refused = {"error_code": code, "error_message": _DENIED, "node_id": -1, "host": ""}
        body["coordinators"] = [
            found[k] if k in found else dict(refused, key=k, port=-1) for k in keys
        ]
        return body

    if not request["coordinator_keys"]:
        return fix({"throttle_time_ms": 0, "coordinators": []})
    return _then(handler(ctx, request), fix)


def _cluster(operation, body):
    def check(ctx, request, handler):
        if allowed(ctx, operation, CLUSTER, CLUSTER_NAME):
            return handler(ctx, request)
        return body(request)

    return check


def _acl_denied(request):
    return {
        "throttle_time_ms": 0,
        "error_code": CLUSTER_AUTHORIZATION_FAILED,
        "error_message": _DENIED,
        "resources": [],
        "results": [
            {"error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": _DENIED}
            for _ in request.get("creations", ())
        ],
        "filter_results": [
            {"error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": _DENIED}
            for _ in request.get("filters", ())
        ],
    }


def _configs(operation):
    def check(ctx, request, handler):
        results = []
        keep = []
        for res in request["resources"]:
            rtype = TOPIC if res["resource_type"] == 2 else CLUSTER
            name = res["resource_name"] if rtype == TOPIC else CLUSTER_NAME
            if allowed(ctx, operation, rtype, name):
                keep.append(res)
            else:
                code = (
                    TOPIC_AUTHORIZATION_FAILED if rtype == TOPIC else CLUSTER_AUTHORIZATION_FAILED
                )
                results.append(
                    {
                        "error_code": code,
                        "error_message": _DENIED,
                        "resource_type": res["resource_type"],
                        "resource_name": res["resource_name"],
                        "configs": [],
                    }
                )
        request["resources"] = keep

        def fix(body):
            key = "results" if "results" in body else "responses"
            if operation == DESCRIBE_CONFIGS:
                _hide_paths(ctx, body[key])
            body[key].extend(results)
            return body

        return _then(handler(ctx, request), fix)

    return check


#: broker configs whose values reveal the host's file system
_PATH_CONFIGS = frozenset(("log.dirs", "log.dir"))


def _hide_paths(ctx, results):
    """Only super users see the data dir; others get it as Kafka shows a
    sensitive config: no value, ``is_sensitive``."""
    if ctx.session.principal in ctx.broker.security.super_users:
        return
    for result in results:
        for item in result.get("configs") or ():
            if item["name"] in _PATH_CONFIGS:
                item["value"] = None
                item["is_sensitive"] = True
                item["synonyms"] = []


CHECKS = {
    0: _produce,
    1: _fetch,
    3: _metadata,
    10: _find_coordinator,
    11: _group(READ),  # JoinGroup
    12: _group(READ),  # Heartbeat
    13: _group(READ),  # LeaveGroup
    14: _group(READ),  # SyncGroup
    19: _named_topics(CREATE, "topics", "name", "topics", alt_cluster=CREATE),
    20: _delete_topics,
    29: _cluster(DESCRIBE, _acl_denied),
    30: _cluster(ALTER, _acl_denied),
    31: _cluster(ALTER, _acl_denied),
    32: _configs(DESCRIBE_CONFIGS),
    33: _configs(ALTER_CONFIGS),
    44: _configs(ALTER_CONFIGS),
}
