"""KIP-951 leader discovery: where a partition's leader is, in the answer.

A Fetch (v12+) or Produce (v10+) partition answered NOT_LEADER_OR_FOLLOWER
or FENCED_LEADER_EPOCH carries the tagged ``current_leader`` (leader id and
epoch, from the coordinator's partition state), and Fetch v16+ / Produce v10+
answers list those leaders' endpoints on the client's listener in the tagged
``node_endpoints``, so a client can move to the new leader without a Metadata
round trip. Both stay unsent (their defaults) when there is nothing to say.
"""

from pluglog.server.handlers.core import _brokers


def current_leader(broker, topic, index):
    """``{leader_id, leader_epoch}`` of ``topic``-``index`` as the coordinator
    has it, or None when no leader is known."""
    state = broker.coordinator.partition_state(topic, index)
    if state is None or state.leader < 0:
        return None
    return {"leader_id": state.leader, "leader_epoch": state.leader_epoch}


def leader_endpoints(broker, session, topics, partitions_key="partitions"):
    """Node endpoints of every leader named in a ``current_leader`` of the
    response ``topics``, or None when none is."""
    wanted = {
        p["current_leader"]["leader_id"]
        for t in topics
        for p in t[partitions_key]
        if p.get("current_leader")
    }
    if not wanted:
        return None
    return [
        {"node_id": node, "host": host, "port": port, "rack": rack}
        for node, host, port, rack in _brokers(broker, session)
        if node in wanted
    ]
