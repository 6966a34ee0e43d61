"""Connection limits shared by every client connection of one listener.

:class:`ConnectionGuard` owns what a single connection cannot see alone:

* ``max.connections`` and ``max.connections.per.ip`` (with
  ``max.connections.per.ip.overrides``): a connection over either cap is
  closed as soon as it is accepted, before it can send anything (Kafka's
  per-IP behaviour; Kafka's acceptor also stops accepting at the broker
  cap, here the new connection is closed instead, so the listen backlog
  cannot fill up with sockets that will never be served).
* ``queued.max.request.bytes``: the bytes of requests being read. A
  connection reserves a frame's size as soon as it has read the size
  prefix; while the reservations are at or over the limit, further
  connections that start a frame stop being read (``pauseProducing``) until
  memory is released, like Kafka's MemoryPool muting channels. A single
  frame may overshoot the limit (Kafka grants while anything is left), so
  a request up to ``socket.request.max.bytes`` can always be read.
* ``connections.max.idle.ms`` and ``request.read.timeout.ms``: one periodic
  sweep (not a timer per connection, so the read path pays nothing but an
  integer increment) closes connections that sent nothing and wait for
  nothing for the idle time, and connections that started a request and did
  not finish it within the read timeout (truncated frames, slow senders).

Refusals are counted and logged once per sweep with the count, so a flood of
connections cannot flood the log.
"""

from collections import Counter, deque

from twisted.internet import task
from twisted.logger import Logger

log = Logger()

#: Sweep interval bounds, seconds: a quarter of the shortest timeout, within these.
MIN_SWEEP = 0.05
MAX_SWEEP = 5.0


class ConnectionGuard:
    """Counts connections per IP, hands out request memory, expires idle and slow ones."""

    def __init__(self, config, reactor):
        self.reactor = reactor
        self.max_connections = config.max_connections
        self.max_per_ip = config.max_connections_per_ip
        self.overrides = dict(config.max_connections_per_ip_overrides)
        self.idle_s = config.connections_max_idle_ms / 1000.0
        self.read_timeout_s = config.request_read_timeout_ms / 1000.0
        limit = config.queued_max_request_bytes
        self.memory_limit = limit if limit > 0 else None
        self.reserved = 0
        self.waiting = deque()
        self.connections = set()
        self.per_ip = Counter()
        self.refused = Counter()
        self.expired = Counter()
        self._sweeper = None
        timeouts = [t for t in (self.idle_s, self.read_timeout_s) if t > 0]
        self.sweep_interval = (
            min(MAX_SWEEP, max(MIN_SWEEP, min(timeouts) / 4)) if timeouts else None
        )

    # -- admission -------------------------------------------------------

    def admit(self, proto, host):
        """Register ``proto``; return None, or why it must be closed."""
        if len(self.connections) >= self.max_connections:
            self.refused["max.connections"] += 1
            return f"max.connections ({self.max_connections}) reached"
        cap = self.overrides.get(host, self.max_per_ip)
        if host is not None and self.per_ip[host] >= cap:
            self.refused["max.connections.per.ip"] += 1
            return f"max.connections.per.ip ({cap}) reached for {host}"
        self.connections.add(proto)
        if host is not None:
            self.per_ip[host] += 1
        self._start_sweeper()
        return None

    def forget(self, proto, host):
        if proto not in self.connections:
            return
        self.connections.discard(proto)
        if host is not None:
            self.per_ip[host] -= 1
            if self.per_ip[host] <= 0:
                del self.per_ip[host]
        if proto._reserved:
            self.release(proto)
        try:
            self.waiting.remove(proto)
        except ValueError:
            pass

    # -- request memory (queued.max.request.bytes) ----------------------

    def reserve(self, proto, size):
        """Reserve ``size`` bytes for ``proto``'s frame; False means wait."""
        if self.memory_limit is None:
            return True
        if self.reserved < self.memory_limit and not self.waiting:
            self.reserved += size
            proto._reserved = size
            return True
        proto._wanted = size
        self.waiting.append(proto)
        return False

    def release(self, proto):
        self.reserved -= proto._reserved
        proto._reserved = 0
        while self.waiting and self.reserved < self.memory_limit:
            nxt = self.waiting.popleft()
            self.reserved += nxt._wanted
            nxt._reserved, nxt._wanted = nxt._wanted, 0
            nxt.memory_granted()

    def cancel_wait(self, proto):
        """``proto``'s frame completed from bytes already read: stop waiting."""
        try:
            self.waiting.remove(proto)
        except ValueError:
            pass
        proto._wanted = 0

    # -- timeouts --------------------------------------------------------

    def _start_sweeper(self):
        if self._sweeper is None and self.sweep_interval is not None:
            self._sweeper = task.LoopingCall(self.sweep)
            self._sweeper.clock = self.reactor
            self._sweeper.start(self.sweep_interval, now=False)

    def stop(self):
        if self._sweeper is not None and self._sweeper.running:
            self._sweeper.stop()
        self._sweeper = None

    def sweep(self):
        """Close idle connections and connections stuck in a request."""
        now = self.reactor.seconds()
        for proto in list(self.connections):
            reason = self._check(proto, now)
            if reason is not None:
                self.expired[reason[0]] += 1
                proto.expire(reason[1])
        self._report()

    def _check(self, proto, now):
        if proto._reads != proto._reads_seen:
            proto._reads_seen = proto._reads
            proto._active_at = now
        if proto._buf:
            if proto._partial_key != proto._frames or proto._mem_wait:
                # A reader paused for request memory is waiting on the broker,
                # not the client: its read timeout starts when it may read.
                proto._partial_key = proto._frames
                proto._partial_since = now
            elif 0 < self.read_timeout_s <= now - proto._partial_since:
                return (
                    "request.read.timeout.ms",
                    f"request not complete after {self.read_timeout_s * 1000:.0f} ms "
                    f"({len(proto._buf)} bytes read; request.read.timeout.ms)",
                )
            return None
        proto._partial_key = None
        if proto._slots:
            proto._active_at = now  # waiting for our answer is not idle
            return None
        if 0 < self.idle_s <= now - proto._active_at:
            return (
                "connections.max.idle.ms",
                f"idle for {self.idle_s * 1000:.0f} ms (connections.max.idle.ms)",
            )
        return None

    def _report(self):
        for counter, what in ((self.refused, "refused"), (self.expired, "closed")):
            for limit, count in sorted(counter.items()):
                log.warn(
                    "{what} {count} connection(s) over {limit}",
                    what=what,
                    count=count,
                    limit=limit,
                )
            counter.clear()
