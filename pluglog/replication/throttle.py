"""The replication throttle: Kafka's ReplicationQuotaManager for reassignments.

While replicas move (AlterPartitionReassignments), copying a large log to a
new replica can starve clients of disk and network. Kafka lets an operator
cap it: ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate``
(bytes/s, broker configs) apply to the replicas listed in the topic configs
``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas``
(``*`` or ``partition:broker,...``), and only while the replica is *not* in
the ISR: in-sync replication is never slowed.

The rate is measured like Kafka's: bytes in ``replication.quota.window.num``
windows of ``replication.quota.window.size.seconds``, divided by the time they
span but at least all but one whole window (so a fresh throttle does not see
a huge rate from its first bytes). Over the rate, the follower leaves the
throttled partitions out of its next fetch, and the leader answers them with
no records: the next window lets them through again. Time is passed in.
"""

from collections import deque

UNLIMITED = 2**63 - 1


class ReplicationThrottle:
    """A byte rate over sliding windows; ``exceeded(now)`` says whether to hold back."""

    def __init__(self, rate, samples=11, window_ms=1000):
        self.rate = rate
        self.samples = max(samples, 2)
        self.window_ms = window_ms
        self._windows = deque()

    @property
    def limited(self):
        return self.rate < UNLIMITED

    def _expire(self, now_ms):
        horizon = now_ms - self.samples * self.window_ms
        while self._windows and self._windows[0][0] <= horizon:
            self._windows.popleft()

    def record(self, size, now_ms):
        if not self.limited or size <= 0:
            return
        self._expire(now_ms)
        if not self._windows or now_ms - self._windows[-1][0] >= self.window_ms:
            self._windows.append([now_ms, 0])
        self._windows[-1][1] += size

    def measured(self, now_ms):
        """Bytes per second over the live windows."""
        self._expire(now_ms)
        if not self._windows:
            return 0.0
        elapsed = max(now_ms - self._windows[0][0], (self.samples - 1) * self.window_ms)
        return sum(size for _, size in self._windows) * 1000.0 / elapsed

    def exceeded(self, now_ms):
        return self.limited and self.measured(now_ms) > self.rate
