"""What a partition's leader knows of one follower: its log end offset and
when it last fetched and was caught up (Kafka's Replica state), which the
ISR shrink (``replica.lag.time.max.ms``), the high watermark and follower
fetching's replica choice read.

A follower whose fetch session omits a caught-up partition
(:mod:`pluglog.broker.fetch_session_state`) is clocked by the session
instead of by per-partition fetches. Runs on the reactor thread.
"""


class RemoteReplica:
    """What the leader knows of one follower (Kafka's Replica state)."""

    __slots__ = (
        "broker_id",
        "leo",
        "last_caught_up_ms",
        "last_fetch_ms",
        "last_fetch_leader_leo",
        "clock",
    )

    def __init__(self, broker_id, now_ms):
        self.broker_id = broker_id
        self.leo = -1
        # A new leader gives every follower a full lag period to show up.
        self.last_caught_up_ms = now_ms
        self.last_fetch_ms = now_ms
        self.last_fetch_leader_leo = -1
        #: The follower's fetch session clock while it is caught up here and
        #: its session omits this partition (pluglog.broker.fetch_sessions):
        #: each of the session's fetches counts as one at the same offset.
        self.clock = None

    @property
    def caught_up_ms(self):
        """When the follower last had everything (Kafka's lastCaughtUpTimeMs)."""
        clock = self.clock
        if clock is not None and clock.fetch_ms > self.last_caught_up_ms:
            return clock.fetch_ms
        return self.last_caught_up_ms

    def unclock(self):
        """Fold the session fetches this partition was omitted from into the
        fetch state, as Kafka's per-fetch updates at an unchanged offset
        that was caught up would have left it."""
        clock = self.clock
        if clock is not None:
            self.clock = None
            if clock.fetch_ms > self.last_fetch_ms:
                self.last_fetch_ms = clock.fetch_ms
                self.last_caught_up_ms = max(self.last_caught_up_ms, clock.fetch_ms)

    def fetched_again(self, fetch_offset, now_ms):
        """Partition.update_follower's whole effect when the follower, behind
        the leader's log end, fetches again from the offset of the last
        update and nothing changed on the partition since (no append, HW,
        ISR or leadership move: each marks the follower's fetch session,
        pluglog.server.handlers.fetch_follower), the follower
        in the ISR: only the fetch time moves. The caught-up branches need
        an offset at the log end of that update, which no append moved
        since; the ISR and high-watermark inputs are unchanged. False, and
        nothing changed, when this state says otherwise (then the caller
        runs update_follower)."""
        if (
            self.leo != fetch_offset
            or fetch_offset >= self.last_fetch_leader_leo
            or self.clock is not None
        ):
            return False
        self.last_fetch_ms = now_ms
        return True
