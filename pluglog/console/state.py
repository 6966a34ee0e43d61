"""What the console shows, read from the broker in-process: plain values, no HTML.

Every function takes the :class:`~pluglog.broker.core.Broker` the web layer
holds and reads, on the reactor thread, what the Kafka handlers read: the
coordinator's cluster metadata and partition states, this broker's
partition table (log sizes and offsets of the replicas it hosts), the group
coordinator's groups and committed offsets, and the schema registry's
subjects. Nothing is cached, so each page is one consistent moment.

A partition not hosted here shows its leader, replicas and ISR (metadata)
but no sizes or offsets; a group is shown by the broker that coordinates it
(the leader of its ``__consumer_offsets`` partition), as Kafka's
DescribeGroups would answer.
"""

from pluglog import topicids
from pluglog.client.assignors import decode_assignment


class NotFoundError(Exception):
    """The named topic, partition, group or subject does not exist."""


def _live_brokers(coordinator):
    return {entry[0] for entry in coordinator.brokers()}


def _partition_view(broker, meta, index, live, figures=True):
    """One partition's metadata and, when hosted here and ``figures``, its log's."""
    coordinator = broker.coordinator
    state = coordinator.partition_state(meta.name, index)
    replicas = list(meta.replicas(index))
    part = broker.partitions.get((meta.name, index))
    if state is not None:
        leader, isr = state.leader, list(state.isr)
    elif part is not None:
        leader, isr = part.leader_id, list(part.isr)
    else:
        leader, isr = -1, []
    if not replicas and part is not None:
        replicas = list(part.replicas)
    offline = (
        leader < 0
        or leader not in live
        or (leader == broker.node_id and part is not None and part.offline)
    )
    view = {
        "index": index,
        "leader": leader,
        "replicas": replicas,
        "isr": isr,
        "under_replicated": len(isr) < len(replicas),
        "offline": offline,
        "local": part is not None and not part.offline,
    }
    if view["local"] and figures:
        plog = part.log
        view.update(
            size_bytes=plog.size_bytes,
            segments=len(plog.segment_infos()),
            log_start_offset=plog.log_start_offset,
            log_end_offset=plog.log_end_offset,
            high_watermark=part.high_watermark,
            is_leader=part.is_leader,
        )
    return view


def _http_urls(coordinator):
    """``{broker id: --http URL}`` the coordinator knows (ZooKeeper's
    registrations); the local coordinator knows none."""
    urls = getattr(coordinator, "http_urls", None)
    return urls() if urls is not None else {}


def overview(broker):
    """The cluster as the coordinator's metadata has it: every registered
    broker with its rack, leaders and replicas, the controller, brokers that
    replica assignments name but that are not registered (down), and
    under-replicated and offline partitions cluster-wide."""
    coordinator = broker.coordinator
    live = _live_brokers(coordinator)
    controller = coordinator.controller_id()
    urls = _http_urls(coordinator)
    brokers = {
        node_id: {
            "node_id": node_id,
            "host": host,
            "port": port,
            "rack": rack,
            "controller": node_id == controller,
            "this": node_id == broker.node_id,
            "live": True,
            "leaders": 0,
            "replicas": 0,
            "console": urls.get(node_id, "").rstrip("/") + "/console/" if node_id in urls else "",
        }
        for node_id, host, port, rack in sorted(coordinator.brokers())
    }
    topics = coordinator.topics()
    partitions = under = offline = 0
    unhealthy = []
    for name in sorted(topics):
        meta = topics[name]
        for index in range(meta.num_partitions):
            view = _partition_view(broker, meta, index, live, figures=False)
            partitions += 1
            under += view["under_replicated"]
            offline += view["offline"]
            if (view["under_replicated"] or view["offline"]) and len(unhealthy) < 100:
                unhealthy.append({"topic": name, **view})
            for node_id in view["replicas"]:
                entry = brokers.get(node_id)
                if entry is None:  # assigned replicas on a broker that is not registered
                    entry = brokers[node_id] = {
                        "node_id": node_id,
                        "host": "",
                        "port": "",
                        "rack": None,
                        "controller": False,
                        "this": False,
                        "live": False,
                        "leaders": 0,
                        "replicas": 0,
                        "console": "",
                    }
                entry["replicas"] += 1
            if view["leader"] in brokers and not view["offline"]:
                brokers[view["leader"]]["leaders"] += 1
    listed = [brokers[n] for n in sorted(brokers)]
    return {
        "cluster_id": coordinator.cluster_id(),
        "controller": controller,
        "this_broker": broker.node_id,
        "brokers": listed,
        "live_brokers": sum(b["live"] for b in listed),
        "down_brokers": [b["node_id"] for b in listed if not b["live"]],
        "racks": sorted({b["rack"] for b in listed if b["rack"]}),
        "topics": len(topics),
        "partitions": partitions,
        "under_replicated": under,
        "offline": offline,
        "unhealthy": unhealthy,
        "hosted": len(broker.partitions),
        "groups": len(_groups(broker)),
        "schemas_loaded": broker.schema_registry is not None,
    }


def topic_names(broker, contains=""):
    """Sorted topic names, those containing ``contains`` (case-insensitive)."""
    needle = contains.lower()
    return sorted(n for n in broker.coordinator.topics() if needle in n.lower())


def topic_rows(broker, names):
    """A summary row per topic in ``names`` (one page of the list)."""
    coordinator = broker.coordinator
    topics = coordinator.topics()
    live = _live_brokers(coordinator)
    rows = []
    for name in names:
        meta = topics.get(name)
        if meta is None:  # deleted since the names were listed
            continue
        views = [_partition_view(broker, meta, i, live) for i in range(meta.num_partitions)]
        local = [v for v in views if v["local"]]
        rows.append(
            {
                "name": name,
                "partitions": meta.num_partitions,
                "replication_factor": max((len(v["replicas"]) for v in views), default=0),
                "internal": broker.is_internal(name),
                "under_replicated": sum(v["under_replicated"] for v in views),
                "offline": sum(v["offline"] for v in views),
                "size_bytes": sum(v["size_bytes"] for v in local),
                "records": sum(v["log_end_offset"] - v["log_start_offset"] for v in local),
            }
        )
    return rows


def topic(broker, name):
    """A topic's partitions and its effective configs (overrides marked)."""
    meta = broker.coordinator.topics().get(name)
    if meta is None:
        raise NotFoundError(f"no topic {name!r}")
    live = _live_brokers(broker.coordinator)
    config = broker.topic_configs.get(name)
    if config is None:
        config = broker.config.topic_defaults.with_overrides(meta.configs)
    overrides = {str(k) for k in meta.configs}
    configs = [
        {"name": key, "value": value, "override": key in overrides}
        for key, value in sorted(config.to_kafka().items())
    ]
    return {
        "name": name,
        # Kafka's spelling (URL-safe base64), as its tools and clients show it.
        "topic_id": topicids.to_base64(meta.topic_id) if meta.topic_id else "",
        "internal": broker.is_internal(name),
        "partitions": [_partition_view(broker, meta, i, live) for i in range(meta.num_partitions)],
        "configs": configs,
    }


def local_partition(broker, name, index):
    """The hosted, readable Partition ``name``-``index``; NotFoundError otherwise."""
    meta = broker.coordinator.topics().get(name)
    if meta is None:
        raise NotFoundError(f"no topic {name!r}")
    if not 0 <= index < meta.num_partitions:
        raise NotFoundError(f"topic {name!r} has no partition {index}")
    part = broker.partitions.get((name, index))
    if part is None or part.offline:
        raise NotFoundError(
            f"partition {index} of {name!r} has no readable replica on broker {broker.node_id}"
        )
    return part


def _groups(broker):
    coordinator = broker.group_coordinator
    return {} if coordinator is None else coordinator.groups


def _group_lag(partitions, group):
    lag = 0
    for key, om in group.offsets.items():
        part = partitions.get(key)
        if part is not None and not part.offline:
            lag += max(part.high_watermark - om.offset, 0)
    return lag


def group_lags(broker, limit):
    """``{group id: total lag}`` of the first ``limit`` groups coordinated here
    (the lag chart's samples)."""
    partitions = broker.partitions
    found = _groups(broker)
    return {g: _group_lag(partitions, found[g]) for g in sorted(found)[:limit]}


def groups(broker):
    """A summary row per group this broker coordinates."""
    rows = []
    partitions = broker.partitions
    for group_id, group in sorted(_groups(broker).items()):
        lag = _group_lag(partitions, group)
        rows.append(
            {
                "group_id": group_id,
                "state": group.state,
                "protocol_type": group.protocol_type or "",
                "members": len(group.members),
                "partitions": len(group.offsets),
                "lag": lag,
            }
        )
    return rows


def _assigned(data):
    try:
        return sorted(decode_assignment(data))
    except Exception:  # opaque bytes of a non-consumer protocol, or malformed
        return None


def _member_assignment(broker, found, member):
    if getattr(found, "kind", None) != "consumer":
        return _assigned(member.assignment)
    # A KIP-848 member's partitions are kept by topic id.
    names = {meta.topic_id: name for name, meta in broker.coordinator.topics().items()}
    return sorted((names.get(t, t), p) for t, parts in member.assigned.items() for p in parts)


def group(broker, group_id):
    """State, members with their assignments, committed offsets and lag."""
    found = _groups(broker).get(group_id)
    if found is None:
        raise NotFoundError(f"no group {group_id!r} on broker {broker.node_id}")
    members = [
        {
            "member_id": m.member_id,
            "instance_id": m.instance_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "assignment": _member_assignment(broker, found, m),
            "leader": m.member_id == found.leader_id,
        }
        for m in found.members.values()
    ]
    offsets = []
    total = 0
    for (topic_name, index), om in sorted(found.offsets.items()):
        part = broker.partitions.get((topic_name, index))
        row = {
            "topic": topic_name,
            "partition": index,
            "offset": om.offset,
            "metadata": om.metadata or "",
            "commit_timestamp": om.commit_timestamp,
            "high_watermark": None,
            "lag": None,
        }
        if part is not None and not part.offline:
            row["high_watermark"] = part.high_watermark
            row["lag"] = max(part.high_watermark - om.offset, 0)
            total += row["lag"]
        offsets.append(row)
    return {
        "group_id": group_id,
        "state": found.state,
        "protocol_type": found.protocol_type or "",
        "protocol": found.protocol_name or "",
        # A KIP-848 group has a group epoch where a classic one has a generation.
        "generation": getattr(found, "group_epoch", found.generation_id),
        "members": members,
        "offsets": offsets,
        "lag": total,
    }


def subjects(broker):
    """``[(subject, [Version])]`` of the schema registry, or None when not loaded."""
    registry = broker.schema_registry
    if registry is None:
        return None
    return [(s, registry.versions(s)) for s in registry.subject_names()]


def subject(broker, name):
    """The live versions of one subject, newest last."""
    registry = broker.schema_registry
    if registry is None:
        raise NotFoundError("the schema registry is not loaded on this broker")
    if name not in registry.subject_names():
        raise NotFoundError(f"no subject {name!r}")
    return registry.versions(name)
