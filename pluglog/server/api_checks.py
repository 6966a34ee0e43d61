"""The rest of KafkaApis' authorization: offsets, groups, admin and cluster APIs.

:mod:`pluglog.server.checks` holds the produce/fetch/metadata/config checks;
this module adds one check per remaining API and the whole table (``CHECKS``,
:func:`checked`), each doing
what Kafka's ``KafkaApis.handle*`` does (operation, resource and error code):

* per-topic APIs (ListOffsets, OffsetForLeaderEpoch, DeleteRecords,
  CreatePartitions) answer denied topics TOPIC_AUTHORIZATION_FAILED and pass
  the rest on; a replica's Fetch and OffsetForLeaderEpoch need CLUSTER_ACTION;
* group APIs answer GROUP_AUTHORIZATION_FAILED (per group for DescribeGroups
  and DeleteGroups); OffsetCommit and OffsetDelete also need READ on each
  topic; ListGroups without DESCRIBE on the cluster lists the groups the
  principal may DESCRIBE;
* cluster APIs answer CLUSTER_AUTHORIZATION_FAILED; InitProducerId needs
  WRITE on the transactional id, else IDEMPOTENT_WRITE on the cluster (or
  WRITE on some topic, as Kafka's ``authorizeByResourceType``).

DescribeCluster is not refused, as in Kafka: without DESCRIBE on the cluster
its KIP-430 operations come back empty (see ``authorized_operations``).
"""

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
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    READ,
    TOPIC,
    WRITE,
)
from pluglog.server.authorization import allowed
from pluglog.server.checks import _DENIED, _cluster, _named_topics, _split, _then
from pluglog.server.checks import CHECKS as _FIRST_CHECKS
from pluglog.server.checks import _fetch as _client_fetch
from pluglog.server.handlers.common import resolve_topic_ids
from pluglog.server.txn_checks import TXN_CHECKS

CLUSTER_ACTION, IDEMPOTENT_WRITE, TRANSACTIONAL_ID = 9, 12, 5


def _cluster_ok(ctx, operation):
    return allowed(ctx, operation, CLUSTER, CLUSTER_NAME)


def _per_topic(operation, name_key, part_key, denied_partition, cluster_action=False):
    """A check for a ``topics: [{name, partitions: [...]}]`` request: denied
    topics are answered with ``denied_partition(index)`` entries after the
    handler's own answer (under the response's ``topics``/``responses``)."""

    def check(ctx, request, handler):
        if cluster_action and _cluster_ok(ctx, CLUSTER_ACTION):
            return handler(ctx, request)
        ok, denied = _split(ctx, request["topics"], name_key, operation)
        if not denied:
            return handler(ctx, request)
        request["topics"] = ok
        extra = [
            {
                name_key: t[name_key],
                "partitions": [denied_partition(p[part_key]) for p in t["partitions"]],
            }
            for t in denied
        ]

        def fix(body):
            key = "topics" if "topics" in body else "responses"
            body[key] = list(body.get(key) or ()) + extra
            return body

        return _then(handler(ctx, request), fix)

    return check


def _list_offsets_denied(index):
    return {
        "partition_index": index,
        "error_code": TOPIC_AUTHORIZATION_FAILED,
        "old_style_offsets": [],
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }


def _epoch_denied(index):
    return {
        "error_code": TOPIC_AUTHORIZATION_FAILED,
        "partition": index,
        "leader_epoch": -1,
        "end_offset": -1,
    }


def _delete_records_denied(index):
    return {
        "partition_index": index,
        "low_watermark": -1,
        "error_code": TOPIC_AUTHORIZATION_FAILED,
    }


def _offset_for_leader_epoch(ctx, request, handler):
    # A replica (replica_id >= 0, v3+) needs CLUSTER_ACTION; a consumer
    # (KIP-320) DESCRIBE on each topic, which CLUSTER_ACTION also grants.
    if request.get("replica_id", -1) >= 0 and not _cluster_ok(ctx, CLUSTER_ACTION):
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "topic": t["topic"],
                    "partitions": [
                        dict(
                            _epoch_denied(p["partition"]), error_code=CLUSTER_AUTHORIZATION_FAILED
                        )
                        for p in t["partitions"]
                    ],
                }
                for t in request["topics"]
            ],
        }
    return _per_topic(DESCRIBE, "topic", "partition", _epoch_denied, cluster_action=True)(
        ctx, request, handler
    )


def _fetch(ctx, request, handler):
    resolve_topic_ids(ctx.broker, 1, ctx.version, request)
    if request.get("replica_id", -1) < 0:
        return _client_fetch(ctx, request, handler)
    if _cluster_ok(ctx, CLUSTER_ACTION):
        return handler(ctx, request)
    # A follower without CLUSTER_ACTION: Kafka's top-level error (v7+) and
    # the same code on every partition for older versions.
    return {
        "throttle_time_ms": 0,
        "error_code": CLUSTER_AUTHORIZATION_FAILED,
        "session_id": 0,
        "responses": [
            {
                "topic": t["topic"],
                "topic_id": t.get("topic_id"),
                "partitions": [
                    {
                        "partition_index": p["partition"],
                        "error_code": CLUSTER_AUTHORIZATION_FAILED,
                        "high_watermark": -1,
                        "last_stable_offset": -1,
                        "log_start_offset": -1,
                        "records": None,
                    }
                    for p in t["partitions"]
                ],
            }
            for t in request["topics"]
        ],
    }


def _group_and_topics(group_operation, per_partition_group_error):
    """OffsetCommit (READ group) and OffsetDelete (DELETE group): the group
    first (GROUP_AUTHORIZATION_FAILED for the whole request), then READ on
    each topic, per partition TOPIC_AUTHORIZATION_FAILED."""

    def check(ctx, request, handler):
        if not allowed(ctx, group_operation, GROUP, request["group_id"]):
            # OffsetCommit puts the group error on every partition (it has no
            # top-level code); OffsetDelete answers it top-level only.
            topics = [
                {
                    "name": t["name"],
                    "partitions": [
                        {
                            "partition_index": p["partition_index"],
                            "error_code": GROUP_AUTHORIZATION_FAILED,
                        }
                        for p in t["partitions"]
                    ],
                }
                for t in request["topics"]
                if per_partition_group_error
            ]
            return {
                "throttle_time_ms": 0,
                "error_code": GROUP_AUTHORIZATION_FAILED,
                "topics": topics,
            }
        topic_check = _per_topic(
            READ,
            "name",
            "partition_index",
            lambda i: {"partition_index": i, "error_code": TOPIC_AUTHORIZATION_FAILED},
        )
        if not request["topics"] or all(
            allowed(ctx, READ, TOPIC, t["name"]) for t in request["topics"]
        ):
            return handler(ctx, request)
        if not any(allowed(ctx, READ, TOPIC, t["name"]) for t in request["topics"]):
            # Nothing left to do: answer without touching the group.
            return topic_check(ctx, request, lambda _c, _r: {"throttle_time_ms": 0, "topics": []})
        return topic_check(ctx, request, handler)

    return check


def _narrow_groups(ctx, request, key, operation):
    """Leave in ``request[key]`` the groups the principal may ``operation``;
    ``(all the names asked for, the denied ones)``."""
    names = request[key]
    request[key] = [g for g in names if allowed(ctx, operation, GROUP, g)]
    return names, [g for g in names if g not in request[key]]


def _describe_groups(ctx, request, handler):
    names, refused = _narrow_groups(ctx, request, "groups", DESCRIBE)
    if not refused:
        return handler(ctx, request)
    denied = {
        g: {
            "error_code": GROUP_AUTHORIZATION_FAILED,
            "group_id": g,
            "group_state": "",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
            "authorized_operations": -2147483648,
        }
        for g in refused
    }

    def fix(body):
        # Keep the request's order, as Kafka answers.
        found = {g["group_id"]: g for g in body["groups"]}
        body["groups"] = [found.get(g) or denied[g] for g in names]
        return body

    return _then(handler(ctx, request), fix)


def _offset_fetch(ctx, request, handler):
    """DESCRIBE on the group; v8+ per group, denied ones answered in place."""
    if ctx.version < 8:
        if allowed(ctx, DESCRIBE, GROUP, request["group_id"]):
            return handler(ctx, request)
        return {"throttle_time_ms": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "topics": []}
    groups = request["groups"]
    request["groups"] = [g for g in groups if allowed(ctx, DESCRIBE, GROUP, g["group_id"])]
    if len(request["groups"]) == len(groups):
        return handler(ctx, request)

    def fix(body):
        found = iter(body["groups"])
        kept = {id(g) for g in request["groups"]}
        denied = {"topics": [], "error_code": GROUP_AUTHORIZATION_FAILED}
        body["groups"] = [
            next(found) if id(g) in kept else dict(denied, group_id=g["group_id"]) for g in groups
        ]
        return body

    return _then(handler(ctx, request), fix)


def _consumer_group_heartbeat(ctx, request, handler):
    if allowed(ctx, READ, GROUP, request["group_id"]):
        return handler(ctx, request)
    return {
        "throttle_time_ms": 0,
        "error_code": GROUP_AUTHORIZATION_FAILED,
        "error_message": _DENIED,
        "member_id": None,
        "member_epoch": -1,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


def _consumer_group_describe(ctx, request, handler):
    names, refused = _narrow_groups(ctx, request, "group_ids", DESCRIBE)
    if not refused:
        return handler(ctx, request)
    denied = {
        "error_code": GROUP_AUTHORIZATION_FAILED,
        "error_message": _DENIED,
        "group_state": "",
        "group_epoch": -1,
        "assignment_epoch": -1,
        "assignor_name": "",
        "members": [],
        "authorized_operations": -(2**31),
    }

    def fix(body):
        found = {g["group_id"]: g for g in body["groups"]}
        body["groups"] = [found.get(g) or dict(denied, group_id=g) for g in names]
        return body

    return _then(handler(ctx, request), fix)


def _list_groups(ctx, request, handler):
    if _cluster_ok(ctx, DESCRIBE):
        return handler(ctx, request)

    def fix(body):
        body["groups"] = [
            g for g in body["groups"] if allowed(ctx, DESCRIBE, GROUP, g["group_id"])
        ]
        return body

    return _then(handler(ctx, request), fix)


def _delete_groups(ctx, request, handler):
    _names, refused = _narrow_groups(ctx, request, "groups_names", DELETE)
    if not refused:
        return handler(ctx, request)
    extra = [{"group_id": g, "error_code": GROUP_AUTHORIZATION_FAILED} for g in refused]
    if not request["groups_names"]:
        return {"throttle_time_ms": 0, "results": extra}

    def fix(body):
        body["results"] = list(body["results"]) + extra
        return body

    return _then(handler(ctx, request), fix)


def _init_producer_id(ctx, request, handler):
    transactional_id = request.get("transactional_id")
    if transactional_id is not None:
        ok = allowed(ctx, WRITE, TRANSACTIONAL_ID, transactional_id)
        code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        ok = _cluster_ok(ctx, IDEMPOTENT_WRITE) or _may_write_some_topic(ctx)
        code = CLUSTER_AUTHORIZATION_FAILED
    if ok:
        return handler(ctx, request)
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}


def _may_write_some_topic(ctx):
    """Kafka's ``authorizeByResourceType(WRITE, TOPIC)`` (KIP-679: an
    idempotent producer needs only WRITE on some topic)."""
    authorizer = ctx.broker.security.authorizer
    by_type = getattr(authorizer, "authorize_by_resource_type", None)
    if by_type is None:
        return False
    host = ctx.peer.rpartition(":")[0]
    return by_type(ctx.session.principal, host, WRITE, TOPIC)


def _top_level(request):
    return {
        "throttle_time_ms": 0,
        "error_code": CLUSTER_AUTHORIZATION_FAILED,
        "error_message": _DENIED,
    }


def _elect_denied(request):
    return {
        "throttle_time_ms": 0,
        "error_code": CLUSTER_AUTHORIZATION_FAILED,
        "replica_election_results": [
            {
                "topic": t["topic"],
                "partition_result": [
                    {
                        "partition_id": p,
                        "error_code": CLUSTER_AUTHORIZATION_FAILED,
                        "error_message": None,
                    }
                    for p in t["partitions"]
                ],
            }
            for t in request.get("topic_partitions") or ()
        ],
    }


def _alter_quotas_denied(request):
    return {
        "throttle_time_ms": 0,
        "entries": [
            {
                "error_code": CLUSTER_AUTHORIZATION_FAILED,
                "error_message": _DENIED,
                "entity": e["entity"],
            }
            for e in request["entries"]
        ],
    }


def _alter_scram_denied(request):
    # One result per user named, as Kafka's getErrorResponse.
    names = [e["name"] for e in (*request["deletions"], *request["upsertions"])]
    return {
        "throttle_time_ms": 0,
        "results": [
            {"user": n, "error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": _DENIED}
            for n in dict.fromkeys(names)
        ],
    }


def _describe_scram_denied(request):
    # Kafka's getErrorResponse puts the error top-level and on a result per
    # user asked for. librdkafka (through 2.16) frees a top-level error
    # message it never allocated and aborts, so when users are named the
    # error goes on each of them only; describing all users has nowhere
    # else to put it.
    named = request["users"]
    return dict(
        _top_level(request) if not named else {"throttle_time_ms": 0},
        results=[
            {
                "user": u["name"],
                "error_code": CLUSTER_AUTHORIZATION_FAILED,
                "error_message": _DENIED,
                "credential_infos": [],
            }
            for u in named or ()
        ],
    )


def _alter_log_dirs_denied(request):
    topics = {}
    for entry in request["dirs"]:
        for topic in entry["topics"]:
            topics.setdefault(topic["name"], []).extend(topic["partitions"])
    return {
        "throttle_time_ms": 0,
        "results": [
            {
                "topic_name": name,
                "partitions": [
                    {"partition_index": p, "error_code": CLUSTER_AUTHORIZATION_FAILED}
                    for p in parts
                ],
            }
            for name, parts in topics.items()
        ],
    }


def _log_dirs_denied(request):
    return {"throttle_time_ms": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED, "results": []}


MORE_CHECKS = {
    1: _fetch,
    2: _per_topic(DESCRIBE, "name", "partition_index", _list_offsets_denied),
    8: _group_and_topics(READ, per_partition_group_error=True),
    9: _offset_fetch,
    15: _describe_groups,
    16: _list_groups,
    21: _per_topic(DELETE, "name", "partition_index", _delete_records_denied),
    22: _init_producer_id,
    23: _offset_for_leader_epoch,
    34: _cluster(ALTER, _alter_log_dirs_denied),
    35: _cluster(DESCRIBE, _log_dirs_denied),
    37: _named_topics(ALTER, "topics", "name", "results"),
    42: _delete_groups,
    43: _cluster(ALTER, _elect_denied),
    45: _cluster(ALTER, _top_level),
    46: _cluster(DESCRIBE, _top_level),
    47: _group_and_topics(DELETE, per_partition_group_error=False),
    48: _cluster(DESCRIBE_CONFIGS, _top_level),
    49: _cluster(ALTER_CONFIGS, _alter_quotas_denied),
    50: _cluster(DESCRIBE, _describe_scram_denied),
    51: _cluster(ALTER, _alter_scram_denied),
    68: _consumer_group_heartbeat,
    69: _consumer_group_describe,
}

#: Every API's check by api key; an API without one needs no permission.
CHECKS = {**_FIRST_CHECKS, **MORE_CHECKS, **TXN_CHECKS}


def checked(ctx, api_key, request, handler):
    """Run ``handler`` as far as the principal is allowed to."""
    check = CHECKS.get(api_key)
    if check is None:
        return handler(ctx, request)
    return check(ctx, request, handler)
