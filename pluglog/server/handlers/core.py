"""ApiVersions and Metadata: how clients bootstrap."""

from twisted.internet import defer
from twisted.logger import Logger

from pluglog import protocol as codec
from pluglog.errors import (
    INVALID_TOPIC_EXCEPTION,
    NONE,
    UNKNOWN_TOPIC_OR_PARTITION,
    InvalidTopicError,
    KafkaError,
)

log = Logger()


def handle_api_versions(ctx, request):
    return {
        "error_code": NONE,
        "api_keys": [
            {"api_key": key, "min_version": lo, "max_version": hi}
            for key, (lo, hi) in sorted(codec.SUPPORTED.items())
        ],
        "throttle_time_ms": 0,
    }


def _topic_entry(broker, name, meta):
    node = broker.node_id
    partitions = [
        {
            "error_code": NONE,
            "partition_index": index,
            "leader_id": node,
            "leader_epoch": broker.partitions[(name, index)].leader_epoch
            if (name, index) in broker.partitions
            else 0,
            "replica_nodes": [node],
            "isr_nodes": [node],
            "offline_replicas": [],
        }
        for index in range(meta.num_partitions)
    ]
    return {
        "error_code": NONE,
        "name": name,
        "is_internal": bool(getattr(meta, "internal", False)),
        "partitions": partitions,
        "topic_authorized_operations": -2147483648,
    }


def _error_entry(name, code):
    return {"error_code": code, "name": name, "is_internal": False, "partitions": []}


@defer.inlineCallbacks
def handle_metadata(ctx, request):
    broker = ctx.broker
    version = ctx.version
    requested = request["topics"]
    topics = broker.coordinator.topics()
    if requested is None or (version == 0 and not requested):
        names = sorted(topics)
        auto_create = False
    else:
        names = [t["name"] for t in requested]
        auto_create = request.get("allow_auto_topic_creation", True) if version >= 4 else True
    auto_create = auto_create and broker.config.auto_create_topics_enable
    entries = []
    for name in names:
        meta = topics.get(name)
        if meta is None and auto_create:
            try:
                meta = yield broker.create_topic(name)
                log.info("auto-created topic {name} for {peer}", name=name, peer=ctx.peer)
            except InvalidTopicError:
                entries.append(_error_entry(name, INVALID_TOPIC_EXCEPTION))
                continue
            except KafkaError:
                meta = broker.coordinator.topics().get(name)
        if meta is None:
            entries.append(_error_entry(name, UNKNOWN_TOPIC_OR_PARTITION))
        else:
            entries.append(_topic_entry(broker, name, meta))
    return {
        "throttle_time_ms": 0,
        "brokers": [
            {"node_id": node, "host": host, "port": port, "rack": rack}
            for node, host, port, rack in _brokers(broker)
        ],
        "cluster_id": broker.coordinator.cluster_id(),
        "controller_id": broker.coordinator.controller_id(),
        "topics": entries,
        "cluster_authorized_operations": -2147483648,
    }


def _brokers(broker):
    out = []
    for node, host, port, rack in broker.coordinator.brokers():
        if node == broker.node_id:
            host, port = broker.advertised
        out.append((node, host, port, rack))
    return out


HANDLERS = {
    codec.API_VERSIONS: handle_api_versions,
    codec.METADATA: handle_metadata,
}
