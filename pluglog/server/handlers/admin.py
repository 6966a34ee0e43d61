"""Admin APIs: topics, partitions, configs, DeleteRecords, InitProducerId."""

from twisted.internet import defer

import pluglog.server.handlers.config_sources as config_sources
from pluglog import config_docs
from pluglog import protocol as codec
from pluglog.broker import dynamic_config, limits
from pluglog.config import SENSITIVE_KEYS
from pluglog.errors import (
    INVALID_CONFIG,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    NONE,
    OFFSET_OUT_OF_RANGE,
    REQUEST_TIMED_OUT,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    KafkaError,
)
from pluglog.server.handlers.common import (
    error_code,
    leader_error,
    per_partition,
    resolve_topic_ids,
)
from pluglog.server.handlers.config_sources import SOURCE_DEFAULT, SOURCE_TOPIC
from pluglog.topicids import to_base64, to_uuid

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT = 3


def _fail(exc):
    return error_code(exc), str(exc)


@defer.inlineCallbacks
def handle_create_topics(ctx, request):
    broker = ctx.broker
    validate_only = request.get("validate_only", False)
    try:
        limits.check_per_request(broker, limits.requested_partitions(broker, request["topics"]))
    except KafkaError as exc:
        # Kafka refuses the whole request, every topic, before creating any.
        code, message = _fail(exc)
        return {
            "throttle_time_ms": 0,
            "topics": [
                {"name": t["name"], "error_code": code, "error_message": message}
                for t in request["topics"]
            ],
        }
    # Kafka's DelayedCreatePartitions: the answer waits until the topics'
    # partitions have leaders or the request's timeout_ms has passed (one
    # deadline for all its topics), then says REQUEST_TIMED_OUT for each
    # topic not there yet (created all the same); timeout_ms <= 0 waits for
    # none: each topic created says REQUEST_TIMED_OUT (which librdkafka hides
    # from an application that set operation_timeout <= 0).
    timeout_ms = request.get("timeout_ms", 0)
    deadline = broker.reactor.seconds() + max(timeout_ms, 0) / 1000.0
    results = []
    for topic in request["topics"]:
        name = topic["name"]
        result = {"name": name, "error_code": NONE, "error_message": None}
        num_partitions = topic["num_partitions"]
        replication = topic["replication_factor"]
        configs = {c["name"]: c["value"] for c in topic["configs"] if c["value"] is not None}
        assignments = None
        if topic["assignments"]:
            if num_partitions != -1 or replication != -1:
                result["error_code"] = INVALID_REQUEST
                result["error_message"] = (
                    "replica assignments come with num_partitions = replication_factor = -1"
                )
                results.append(result)
                continue
            # The coordinator checks the brokers named (INVALID_REPLICA_ASSIGNMENT).
            assignments = {a["partition_index"]: a["broker_ids"] for a in topic["assignments"]}
        kwargs = {}
        if not validate_only:
            kwargs["timeout"] = max(0.0, deadline - broker.reactor.seconds())
        try:
            meta = yield broker.create_topic(
                name,
                num_partitions,
                replication,
                configs,
                validate_only=validate_only,
                assignments=assignments,
                **kwargs,
            )
        except KafkaError as exc:
            result["error_code"], result["error_message"] = _fail(exc)
            results.append(result)
            continue
        if timeout_ms <= 0 and not validate_only:
            result["error_code"] = REQUEST_TIMED_OUT
            result["error_message"] = "created; timeout_ms <= 0 does not wait for its leaders"
            results.append(result)
            continue
        effective = broker.config.topic_defaults.with_overrides(configs).to_kafka()
        result.update(
            {
                "topic_id": to_uuid("" if validate_only else meta.topic_id),
                "num_partitions": meta.num_partitions,
                "replication_factor": len(meta.replicas(0)) if meta.assignment else 1,
                "configs": [
                    {
                        "name": key,
                        "value": value,
                        "read_only": False,
                        "config_source": SOURCE_TOPIC if key in configs else SOURCE_DEFAULT,
                        "is_sensitive": False,
                    }
                    for key, value in sorted(effective.items())
                ],
            }
        )
        results.append(result)
    return {"throttle_time_ms": 0, "topics": results}


_BOTH = object()  # _deletions' marker: the request named a topic both ways


def _deletions(broker, version, request):
    """``[(name or None, topic id hex or None, by id)]`` to delete: v6 names
    each topic by name or by id (KIP-516), older versions by name."""
    if version < 6:
        return [(name, None, False) for name in request.get("topic_names") or ()]
    resolve_topic_ids(broker, codec.DELETE_TOPICS, version, request)
    topics = request.get("topics") or ()
    if any(t.get("named") is not None for t in topics):
        # Kafka refuses the whole request: a topic is named by name or by id.
        return [(_BOTH, t.get("topic_id").hex, False) for t in topics]
    out = []
    for topic in topics:
        if topic.get("by_id"):
            out.append((topic["name"], topic["topic_id"].hex, True))
        else:
            out.append((topic["name"], None, False))
    return out


@defer.inlineCallbacks
def handle_delete_topics(ctx, request):
    broker = ctx.broker
    responses = []
    for name, topic_id, by_id in _deletions(broker, ctx.version, request):
        if name is _BOTH:
            responses.append(
                {
                    "name": None,
                    "topic_id": to_uuid(topic_id),
                    "error_code": INVALID_REQUEST,
                    "error_message": "a topic is named by name or by topic id, not both",
                }
            )
            continue
        entry = {"name": name, "error_code": NONE, "error_message": None}
        meta = broker.coordinator.topics().get(name) if name is not None else None
        entry["topic_id"] = to_uuid(meta.topic_id if meta is not None else topic_id or "")
        if by_id and (meta is None or meta.topic_id != topic_id):
            entry["error_code"] = UNKNOWN_TOPIC_ID
            entry["error_message"] = f"no topic has the id {to_base64(topic_id)}"
            entry["name"] = None
            responses.append(entry)
            continue
        if name is None:
            entry["error_code"] = INVALID_REQUEST
            entry["error_message"] = "a topic to delete needs a name or a topic id"
            responses.append(entry)
            continue
        if broker.is_internal(name):
            entry["error_code"] = INVALID_TOPIC_EXCEPTION
            entry["error_message"] = f"Cannot delete internal topic {name}"
            responses.append(entry)
            continue
        try:
            yield broker.delete_topic(name)
        except KafkaError as exc:
            entry["error_code"], entry["error_message"] = _fail(exc)
        responses.append(entry)
    return {"throttle_time_ms": 0, "responses": responses}


@defer.inlineCallbacks
def handle_create_partitions(ctx, request):
    broker = ctx.broker
    results = []
    known = broker.coordinator.topics()
    added = sum(
        max(0, t["count"] - known[t["name"]].num_partitions)
        for t in request["topics"]
        if t["name"] in known
    )
    try:
        limits.check_per_request(broker, added)
    except KafkaError as exc:
        code, message = _fail(exc)
        return {
            "throttle_time_ms": 0,
            "results": [
                {"name": t["name"], "error_code": code, "error_message": message}
                for t in request["topics"]
            ],
        }
    # As CreateTopics (Kafka's ZooKeeper-mode createPartitions uses the same
    # delayed operation): the new partitions' leaders are awaited up to the
    # request's timeout_ms, one deadline for all its topics, then
    # REQUEST_TIMED_OUT; timeout_ms <= 0 waits for none.
    timeout_ms = request.get("timeout_ms", 0)
    validate_only = request["validate_only"]
    deadline = broker.reactor.seconds() + max(timeout_ms, 0) / 1000.0
    for topic in request["topics"]:
        name = topic["name"]
        entry = {"name": name, "error_code": NONE, "error_message": None}
        try:
            meta = broker.coordinator.topics().get(name)
            if meta is None:
                entry["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
                entry["error_message"] = f"no topic {name!r}"
            else:
                if topic["count"] > meta.num_partitions:
                    limits.check_new_partitions(broker, topic["count"] - meta.num_partitions)
                # The coordinator checks the brokers named: one broker accepts
                # only itself, a cluster its live brokers (INVALID_REPLICA_ASSIGNMENT).
                assignments = [a["broker_ids"] for a in topic["assignments"] or ()]
                kwargs = {}
                if not validate_only:
                    kwargs["timeout"] = max(0.0, deadline - broker.reactor.seconds())
                yield broker.coordinator.create_partitions(
                    name,
                    topic["count"],
                    validate_only=validate_only,
                    assignments=assignments or None,
                    **kwargs,
                )
                if not validate_only:
                    # Answer once the new logs made here are durable.
                    yield broker.new_logs.wait(name)
                    if timeout_ms <= 0:
                        entry["error_code"] = REQUEST_TIMED_OUT
                        entry["error_message"] = (
                            "created; timeout_ms <= 0 does not wait for their leaders"
                        )
        except KafkaError as exc:
            entry["error_code"], entry["error_message"] = _fail(exc)
        results.append(entry)
    return {"throttle_time_ms": 0, "results": results}


def handle_describe_configs(ctx, request):
    broker = ctx.broker
    version = ctx.version
    results = []
    for resource in request["resources"]:
        rtype = resource["resource_type"]
        rname = resource["resource_name"]
        wanted = resource["configuration_keys"]
        entry = {
            "error_code": NONE,
            "error_message": None,
            "resource_type": rtype,
            "resource_name": rname,
            "configs": [],
        }
        if rtype == TOPIC_RESOURCE:
            meta = broker.coordinator.topics().get(rname)
            if meta is None:
                entry["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
                entry["error_message"] = f"no topic {rname!r}"
                results.append(entry)
                continue
            entries = config_sources.topic_entries(broker, meta)
        elif rtype == BROKER_RESOURCE and rname in ("", str(broker.node_id)):
            entries = config_sources.broker_entries(broker)
            # A ZooKeeper cluster tells the broker's own overrides from the
            # cluster-wide <default> ones (Kafka's sources 2 and 3).
            own = dynamic_config.overrides(broker, str(broker.node_id))
            for key in dynamic_config.overrides(broker):
                if key in entries:
                    current, _source, key_synonyms = entries[key]
                    source = SOURCE_DYNAMIC_BROKER if key in own else SOURCE_DYNAMIC_DEFAULT
                    entries[key] = (
                        current,
                        source,
                        [{"name": key, "value": current, "source": source}] + key_synonyms[1:],
                    )
        else:
            entry["error_code"] = INVALID_REQUEST
            entry["error_message"] = f"unsupported resource type {rtype} / name {rname!r}"
            results.append(entry)
            continue
        synonyms = version >= 1 and request.get("include_synonyms")
        documented = version >= 3 and request.get("include_documentation")
        for key in sorted(entries):
            if wanted is not None and key not in wanted:
                continue
            value, source, key_synonyms = entries[key]
            entry["configs"].append(
                {
                    "name": key,
                    "value": value,
                    "read_only": rtype == BROKER_RESOURCE
                    and key not in dynamic_config.DYNAMIC_KEYS,
                    "config_source": source,
                    "is_default": source == SOURCE_DEFAULT,
                    "is_sensitive": key in SENSITIVE_KEYS,
                    "synonyms": key_synonyms if synonyms else [],
                    "config_type": config_docs.config_type(key),
                    "documentation": config_docs.documentation(key) if documented else None,
                }
            )
        results.append(entry)
    return {"throttle_time_ms": 0, "results": results}


@defer.inlineCallbacks
def _alter(ctx, request, incremental):
    broker = ctx.broker
    responses = []
    for resource in request["resources"]:
        rtype = resource["resource_type"]
        rname = resource["resource_name"]
        entry = {
            "error_code": NONE,
            "error_message": None,
            "resource_type": rtype,
            "resource_name": rname,
        }
        meta = broker.coordinator.topics().get(rname) if rtype == TOPIC_RESOURCE else None
        if rtype == BROKER_RESOURCE and rname in ("", str(broker.node_id)):
            try:
                configs = _apply_ops(
                    dynamic_config.overrides(broker, rname), resource["configs"], incremental
                )
                yield dynamic_config.alter(broker, configs, request["validate_only"], rname)
            except KafkaError as exc:
                entry["error_code"], entry["error_message"] = _fail(exc)
            except ValueError as exc:
                entry["error_code"], entry["error_message"] = INVALID_CONFIG, str(exc)
        elif rtype != TOPIC_RESOURCE:
            entry["error_code"] = INVALID_REQUEST
            entry["error_message"] = "only topic and broker configs can be altered at run time"
        elif meta is None:
            entry["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
            entry["error_message"] = f"no topic {rname!r}"
        else:
            try:
                configs = _apply_ops(meta.configs, resource["configs"], incremental)
                broker.check_topic_configs(configs, rname)
                if request["validate_only"]:
                    from pluglog.config import validate_topic_overrides

                    validate_topic_overrides(configs)
                else:
                    yield broker.coordinator.alter_topic_config(rname, configs)
            except KafkaError as exc:
                entry["error_code"], entry["error_message"] = _fail(exc)
            except ValueError as exc:
                entry["error_code"], entry["error_message"] = INVALID_CONFIG, str(exc)
        responses.append(entry)
    return {"throttle_time_ms": 0, "responses": responses}


def _apply_ops(current, changes, incremental):
    if not incremental:
        return {c["name"]: c["value"] for c in changes if c["value"] is not None}
    configs = dict(current)
    for change in changes:
        name, op, value = change["name"], change["config_operation"], change["value"]
        if op == 0:  # SET
            configs[name] = value
        elif op == 1:  # DELETE
            configs.pop(name, None)
        elif op in (2, 3):  # APPEND / SUBTRACT on list-valued configs
            items = [v for v in configs.get(name, "").split(",") if v]
            extra = [v for v in (value or "").split(",") if v]
            items = (
                items + [v for v in extra if v not in items]
                if op == 2
                else [v for v in items if v not in extra]
            )
            configs[name] = ",".join(items)
        else:
            raise ValueError(f"unknown config operation {op}")
    return configs


def handle_alter_configs(ctx, request):
    return _alter(ctx, request, incremental=False)


def handle_incremental_alter_configs(ctx, request):
    return _alter(ctx, request, incremental=True)


def handle_delete_records(ctx, request):
    def answer(part, want, topic):
        entry = {
            "partition_index": want["partition_index"],
            "low_watermark": -1,
            "error_code": leader_error(ctx.broker, topic, part, want, want["partition_index"]),
        }
        if entry["error_code"] != NONE:
            return entry
        if part.internal:  # Kafka: "Cannot delete records of internal topic"
            entry["error_code"] = INVALID_TOPIC_EXCEPTION
            return entry
        offset = want["offset"]
        if offset == -1:  # -1 means "up to the high watermark"
            offset = part.high_watermark
        if offset < 0 or offset > part.high_watermark:
            entry["error_code"] = OFFSET_OUT_OF_RANGE
            return entry
        try:
            entry["low_watermark"] = part.delete_records(offset)
        except KafkaError as exc:
            entry["error_code"] = error_code(exc)
        return entry

    return {"throttle_time_ms": 0, "topics": per_partition(ctx.broker, request["topics"], answer)}


HANDLERS = {
    codec.CREATE_TOPICS: handle_create_topics,
    codec.DELETE_TOPICS: handle_delete_topics,
    codec.CREATE_PARTITIONS: handle_create_partitions,
    codec.DESCRIBE_CONFIGS: handle_describe_configs,
    codec.ALTER_CONFIGS: handle_alter_configs,
    codec.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    codec.DELETE_RECORDS: handle_delete_records,
}
