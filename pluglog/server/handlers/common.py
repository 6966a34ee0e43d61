"""What every request handler shares: the context a handler gets, the
no-answer marker, the close-the-connection instruction, and the per-partition
answer helpers. A leaf of :mod:`pluglog.server.handlers`: the handler modules
and the authorization checks import it, it imports none of them.
"""

from pluglog.errors import (
    FENCED_LEADER_EPOCH,
    KAFKA_STORAGE_ERROR,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_OR_PARTITION,
    KafkaError,
)

NO_RESPONSE = object()


class CloseConnection(Exception):  # noqa: N818 - an instruction, not an error report
    """Raised by a handler when the only right answer is to drop the connection
    (e.g. a failed acks=0 produce: the client has no response slot)."""


class RequestContext:
    """What a handler knows about the request besides its body."""

    __slots__ = ("broker", "header", "peer", "version", "session", "on_close")

    def __init__(self, broker, header, peer, session=None, on_close=None):
        self.broker = broker
        self.header = header
        self.peer = peer
        self.version = header.api_version
        #: the connection's pluglog.security.sasl.Session (None: no listeners configured)
        self.session = session
        #: ``on_close(callback)`` runs ``callback()`` when the connection is
        #: lost and returns a function that cancels that; None where there is
        #: no connection (tests, embedded calls)
        self.on_close = on_close


#: (api key, first version naming topics by id, topic list key, name key)
_BY_ID = {1: (13, "topics", "topic"), 3: (10, "topics", "name"), 20: (6, "topics", "name")}


def resolve_topic_ids(broker, api_key, version, request):
    """Name the topics a request names by id (KIP-516: Fetch v13+, Metadata
    v10+, DeleteTopics v6+), in place: an entry with a non-zero ``topic_id``
    gets ``by_id`` True and its name from the broker's index (None for an
    id no topic has). Fetch's forgotten topics too. A v15+ Fetch's follower
    id (KIP-903's ``replica_state``) is copied to ``replica_id``. Idempotent;
    authorization and the handlers both work on the result."""
    spec = _BY_ID.get(api_key)
    if spec is None or version < spec[0]:
        return
    if api_key == 1 and version >= 15:
        state = request.get("replica_state")
        if state is not None and state.get("replica_id", -1) >= 0:
            request["replica_id"] = state["replica_id"]
    _, list_key, name_key = spec
    name_of = broker.topic_ids.name_of
    lists = [request.get(list_key) or ()]
    if api_key == 1:
        lists.append(request.get("forgotten_topics_data") or ())
    for entries in lists:
        for entry in entries:
            topic_id = entry.get("topic_id")
            if topic_id is not None and topic_id.int and "by_id" not in entry:
                entry["by_id"] = True
                entry[name_key] = name_of(topic_id)


def error_code(exc):
    """The Kafka error code for an exception raised while handling a request."""
    return exc.error_code if isinstance(exc, KafkaError) else -1


def _epoch_error(partition, current_leader_epoch):
    if current_leader_epoch < 0 or current_leader_epoch == partition.leader_epoch:
        return NONE
    if current_leader_epoch > partition.leader_epoch:
        return UNKNOWN_LEADER_EPOCH
    return FENCED_LEADER_EPOCH


def leader_error(broker, topic, part, want, index):
    """The error code for a request entry this broker cannot answer as the
    partition's leader (unknown, hosted elsewhere, a follower here, or a
    leader epoch that does not match), else NONE."""
    if part is None:
        meta = broker.coordinator.topics().get(topic)
        if meta is not None and 0 <= index < meta.num_partitions:
            return NOT_LEADER_OR_FOLLOWER
        return UNKNOWN_TOPIC_OR_PARTITION
    if part.log_offline:  # could not be opened: storage/offline.py
        return KAFKA_STORAGE_ERROR
    if not part.is_leader:
        return NOT_LEADER_OR_FOLLOWER
    return _epoch_error(part, want.get("current_leader_epoch", -1))


def per_partition(broker, topics, answer, topic_key="name", partition_key="partition_index"):
    """Answer every requested partition of a topics/partitions request.

    ``answer(partition, want, topic)`` gets the broker's Partition (``None`` if
    this broker has no such partition), the request's partition entry and the
    topic name, and
    returns the response entry; the result keeps the request's topic order.
    """
    out = []
    for topic in topics:
        name = topic[topic_key]
        out.append(
            {
                topic_key: name,
                "partitions": [
                    answer(broker.partitions.get((name, want[partition_key])), want, name)
                    for want in topic["partitions"]
                ],
            }
        )
    return out
