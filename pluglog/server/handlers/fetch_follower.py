"""A follower's fetch on the leader: what pluglog.server.handlers.fetch asks
besides the read itself when ``replica_id`` >= 0.

KIP-320's divergence check of a v12+ fetch, the leader's replication
throttle (Kafka's leader-side rule), and whether a follower's session may
remember an empty answer and give it again (the session's
``remember_empty``, pluglog.broker.fetch_sessions): only where the follower
state the answer stands for is what update_follower left, so that giving it
again moves only the follower's fetch time (RemoteReplica.fetched_again).
"""


def diverging(part, want, offset):
    """KIP-320's check of a v12+ fetch's ``last_fetched_epoch``, as Kafka's
    ``Partition.readRecords``: the leader's end offset of that epoch (from its
    leader-epoch cache); when the leader has no such epoch or it ends before
    the fetch offset, the fetcher's log diverged: answer ``{epoch,
    end_offset}`` and no records. None when the logs agree. An epoch older
    than every cache entry (a cache started after its batches were written)
    is not a divergence here, where Kafka, whose cache covers the whole log,
    would answer OFFSET_OUT_OF_RANGE."""
    fetched = want.get("last_fetched_epoch", -1)
    if fetched < 0 or offset < part.log.log_start_offset:
        return None  # below the log start: OFFSET_OUT_OF_RANGE whatever the epochs
    epoch, end = part.epochs.end_offset_for(fetched, part.log.log_end_offset)
    if epoch < 0 or end < 0:
        return None
    if epoch < fetched or end < offset:
        return {"epoch": epoch, "end_offset": end}
    return None


def follower_memo(part, replica_id, now, throttle):
    """Whether a follower's empty answer may be remembered: made in the
    fetch's first pass (update_follower ran just before, so the follower
    state matches the answer), not throttled (a quota window is no change
    a session sees) and in the ISR (out of it, each fetch must reach
    update_follower, which asks to add it back)."""
    return bool(now) and throttle is None and replica_id in part.isr


def fetched_again(want, replica_id, now):
    """A follower's remembered empty answer given again: its fetch at the
    same offset updates the follower state as update_follower would
    (RemoteReplica.fetched_again); False when it cannot, and the partition
    is read as usual. A follower behind the log end of 10,000 partitions
    sends fetches of 10 MiB that only ~250 of them fill: the rest were
    read and updated on every fetch, ~8 µs each (bench/RESULTS.md)."""
    part = want["part"]
    remote = part.remotes.get(replica_id)
    return (
        remote is not None
        and replica_id in part.isr
        and remote.fetched_again(want["fetch_offset"], now)
    )


def leader_throttle(broker, part, replica_id):
    """The leader's throttle if it applies to this replica's fetch (Kafka's
    leader-side rule: a listed partition, a replica out of the ISR), else None."""
    throttle = broker.replicas.leader_throttle
    if (
        throttle.limited
        and replica_id not in part.isr
        and part.config.throttled("leader", part.index, broker.node_id)
    ):
        return throttle
    return None
