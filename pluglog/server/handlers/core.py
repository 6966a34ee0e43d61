"""ApiVersions and Metadata: how clients bootstrap."""

import struct

from twisted.internet import defer

from pluglog import protocol as codec
from pluglog.broker import limits
from pluglog.errors import (
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    KAFKA_STORAGE_ERROR,
    LEADER_NOT_AVAILABLE,
    NONE,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    InvalidTopicError,
    KafkaError,
)
from pluglog.logsafe import SafeLogger
from pluglog.protocol.apis import APIS
from pluglog.protocol.primitives import ZERO_UUID, read_uvarint
from pluglog.security.acls import CLUSTER, CLUSTER_NAME, TOPIC
from pluglog.server.authorization import authorized_operations
from pluglog.server.handlers.common import resolve_topic_ids
from pluglog.topicids import to_uuid

log = SafeLogger()


def handle_api_versions(ctx, request):
    return {
        "error_code": NONE,
        "api_keys": [
            {"api_key": key, "min_version": lo, "max_version": hi}
            for key, (lo, hi) in sorted(codec.SUPPORTED.items())
        ],
        "throttle_time_ms": 0,
    }


def _topic_entry(broker, name, meta, live):
    """Leader, replicas, ISR and offline replicas of every partition, as the
    coordinator has them (every broker answers alike)."""
    coordinator = broker.coordinator
    partitions = []
    for index in range(meta.num_partitions):
        replicas = list(meta.replicas(index))
        state = coordinator.partition_state(name, index)
        if state is None:
            leader, epoch, isr = -1, -1, []
        else:
            leader, epoch, isr = state.leader, state.leader_epoch, list(state.isr)
        offline = [r for r in replicas if r not in live]
        code = NONE if leader >= 0 else LEADER_NOT_AVAILABLE
        part = broker.partitions.get((name, index))
        if part is not None and part.log_offline:
            # Its log could not be opened here (storage/offline.py): reported
            # the way Kafka reports a replica on an offline log directory.
            offline.append(broker.node_id)
            if leader == broker.node_id:
                code = KAFKA_STORAGE_ERROR
        partitions.append(
            {
                "error_code": code,
                "partition_index": index,
                "leader_id": leader,
                "leader_epoch": epoch,
                "replica_nodes": replicas,
                "isr_nodes": isr,
                "offline_replicas": offline,
            }
        )
    return {
        "error_code": NONE,
        "name": name,
        "topic_id": to_uuid(meta.topic_id),
        "is_internal": bool(getattr(meta, "internal", False)),
        "partitions": partitions,
        "topic_authorized_operations": -2147483648,
    }


def metadata_precheck(broker, header, frame):
    """Refuse a Metadata request naming more than metadata.max.topics.per.request
    topics before it is decoded (a 6 MB frame holds 2 M one-character names);
    returns the reason, or None. The count is the first field of every version."""
    if header.api_key != codec.METADATA or header.body_offset is None:
        return None
    pos = header.body_offset
    try:
        if APIS[codec.METADATA].is_flexible(header.api_version):
            count = read_uvarint(frame, pos)[0] - 1
        else:
            (count,) = struct.unpack_from(">i", frame, pos)
    except (ValueError, struct.error):
        return None  # the decoder reports the malformed body
    cap = broker.config.metadata_max_topics_per_request
    # A count the frame cannot hold is the decoder's "malformed body" instead.
    if cap < count <= len(frame) - pos:
        return f"Metadata request names {count} topics; metadata.max.topics.per.request is {cap}"
    return None


def _error_entry(name, code, topic_id=ZERO_UUID):
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [],
    }


def _by_id_entry(version, want, topics):
    """The answer for a topic asked by id (v10+), or None to answer it by
    name: v12+ looks the id up (UNKNOWN_TOPIC_ID, no name, when no topic has
    it); v10-11 may not name topics by id (Kafka's INVALID_REQUEST)."""
    if not want.get("by_id") and want["name"] is not None:
        return None
    if version < 12:
        return _error_entry("", INVALID_REQUEST, want.get("topic_id", ZERO_UUID))
    name = want["name"]
    meta = topics.get(name) if name is not None else None
    if meta is None or meta.topic_id != want["topic_id"].hex:
        return _error_entry(None, UNKNOWN_TOPIC_ID, want["topic_id"])
    return None


@defer.inlineCallbacks
def handle_metadata(ctx, request):
    broker = ctx.broker
    version = ctx.version
    resolve_topic_ids(broker, codec.METADATA, version, request)
    requested = request["topics"]
    topics = broker.coordinator.topics()
    by_id = []
    if requested is None or (version == 0 and not requested):
        names = sorted(topics)
        auto_create = False
    else:
        wanted = []
        for want in requested:
            entry = _by_id_entry(version, want, topics) if version >= 10 else None
            if entry is not None:
                by_id.append(entry)
            else:
                wanted.append(want["name"])
        # Kafka answers each named topic once, however often it is named.
        names = list(dict.fromkeys(wanted))
        auto_create = request.get("allow_auto_topic_creation", True) if version >= 4 else True
        # Topics asked by id are never created (Kafka's rule).
        auto_create = auto_create and not any(t.get("by_id") for t in requested)
    auto_create = auto_create and broker.config.auto_create_topics_enable
    brokers = _brokers(broker, ctx.session)
    live = {node for node, _host, _port, _rack in brokers}
    entries = []
    created = 0  # partitions auto-created by this request
    for name in names:
        meta = topics.get(name)
        if meta is None and auto_create:
            try:
                # One request may auto-create no more than CreateTopics could.
                limits.check_per_request(broker, created + broker.config.num_partitions)
                meta = yield broker.create_topic(name)
                created += meta.num_partitions
                log.info("auto-created topic {name} for {peer}", name=name, peer=ctx.peer)
            except InvalidTopicError:
                entries.append(_error_entry(name, INVALID_TOPIC_EXCEPTION))
                continue
            except KafkaError as exc:
                meta = broker.coordinator.topics().get(name)
                if meta is None:
                    entries.append(_error_entry(name, exc.error_code))
                    continue
        if meta is None:
            entries.append(_error_entry(name, UNKNOWN_TOPIC_OR_PARTITION))
        else:
            entries.append(_topic_entry(broker, name, meta, live))
    response = {
        "throttle_time_ms": 0,
        "brokers": [
            {"node_id": node, "host": host, "port": port, "rack": rack}
            for node, host, port, rack in brokers
        ],
        "cluster_id": broker.coordinator.cluster_id(),
        "controller_id": broker.coordinator.controller_id(),
        "topics": entries + by_id,
        "cluster_authorized_operations": -2147483648,
        "error_code": NONE,
    }
    if request.get("include_cluster_authorized_operations") or request.get(
        "include_topic_authorized_operations"
    ):
        _authorized_operations(ctx, request, response)
    return response


def _authorized_operations(ctx, request, response):
    # KIP-430: asked for, the principal's operations (all without an authorizer).
    if request.get("include_cluster_authorized_operations"):
        response["cluster_authorized_operations"] = authorized_operations(
            ctx, CLUSTER, CLUSTER_NAME
        )
    if request.get("include_topic_authorized_operations"):
        for entry in response["topics"]:
            if entry["error_code"] == NONE and entry["name"] is not None:
                entry["topic_authorized_operations"] = authorized_operations(
                    ctx, TOPIC, entry["name"]
                )


def own_endpoint(broker, session):
    """This broker's advertised ``(host, port)`` on the client's listener:
    Kafka answers with the endpoints of the listener the client came in on."""
    if session is None:
        return broker.advertised
    return getattr(broker, "listener_endpoints", {}).get(session.listener.name, broker.advertised)


def _brokers(broker, session=None):
    """``[(node, host, port, rack)]``: every live broker's endpoint on the
    client's listener; a broker without that listener is left out, as Kafka does."""
    own = own_endpoint(broker, session)
    listeners = getattr(broker.coordinator, "broker_endpoints", None)
    endpoints = listeners() if listeners is not None and session is not None else None
    out = []
    for node, host, port, rack in broker.coordinator.brokers():
        if node == broker.node_id:
            host, port = own
        elif endpoints is not None:
            found = endpoints.get(node, {}).get(session.listener.name)
            if found is None:
                continue
            host, port = found
        out.append((node, host, port, rack))
    return out


def endpoint_of(broker, node, session):
    """``(host, port)`` of broker ``node`` on the client's listener, or None."""
    for found, host, port, _rack in _brokers(broker, session):
        if found == node:
            return host, port
    return None


HANDLERS = {
    codec.API_VERSIONS: handle_api_versions,
    codec.METADATA: handle_metadata,
}
