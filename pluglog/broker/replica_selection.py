"""Which replica a consumer reads from (KIP-392, fetching from followers).

Owns the built-in :class:`~pluglog.interfaces.IReplicaSelector` providers,
``leader`` and ``rack-aware`` (Kafka's ``LeaderSelector`` and
``RackAwareReplicaSelector``, whose class names ``replica.selector.class``
also accepts: pluglog.config_keys), and :func:`preferred_read_replica`, the
leader's answer for one partition of a consumer's Fetch v11+: the broker the
consumer should read from instead, or -1 to read here.

A follower serves such reads up to its own high watermark, which it learns
from the leader's fetch answers (pluglog.server.handlers.fetch), so a
consumer never sees a record the leader has not committed.
"""

from dataclasses import dataclass

from zope.interface import implementer

from pluglog.interfaces import IReplicaSelector


@dataclass(frozen=True)
class ReplicaView:
    """What a selector knows of one replica."""

    broker_id: int
    rack: str | None
    log_end_offset: int


@implementer(IReplicaSelector)
class LeaderSelector:
    """Every consumer reads from the leader (Kafka's default)."""

    def select(self, topic, partition, client_rack, leader, candidates):
        return None


@implementer(IReplicaSelector)
class RackAwareSelector:
    """Kafka's RackAwareReplicaSelector: the leader if it is in the client's
    rack, else the replica in that rack with the highest log end offset;
    the leader when none is, or when the client names no rack."""

    def select(self, topic, partition, client_rack, leader, candidates):
        if not client_rack:
            return None
        local = [c for c in candidates if c.rack == client_rack]
        if not local or any(c.broker_id == leader.broker_id for c in local):
            return None
        return max(local, key=lambda c: c.log_end_offset).broker_id


def make_leader_selector(config, reactor):
    return LeaderSelector()


def make_rack_aware_selector(config, reactor):
    return RackAwareSelector()


def preferred_read_replica(broker, part, client_rack, fetch_offset, now_ms):
    """The broker a consumer should fetch ``part`` from, or -1 for this
    leader. Candidates are the leader and, as in Kafka's
    ``ReplicaManager.findPreferredReadReplica``, the followers that are
    registered (alive), caught up within ``replica.lag.time.max.ms`` and
    already hold ``fetch_offset``."""
    selector = broker.replica_selector
    if selector is None or not client_rack:
        return -1
    racks = {node: rack for node, _host, _port, rack in broker.coordinator.brokers()}
    lag_ms = broker.config.replica_lag_time_max_ms
    leader = ReplicaView(broker.node_id, racks.get(broker.node_id), part.log.log_end_offset)
    candidates = [leader]
    for broker_id, remote in part.remotes.items():
        if broker_id not in racks or broker_id not in part.isr:
            continue
        if now_ms - remote.caught_up_ms > lag_ms or remote.leo < fetch_offset:
            continue
        candidates.append(ReplicaView(broker_id, racks[broker_id], remote.leo))
    chosen = selector.select(part.topic, part.index, client_rack, leader, candidates)
    if chosen is None or chosen == broker.node_id:
        return -1
    return chosen
