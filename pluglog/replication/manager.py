"""ReplicaManager: turns the coordinator's partition states into leader and follower roles.

For every partition hosted here it applies the coordinator's PartitionState
(``"partition"`` events, see :mod:`pluglog.coordination.state`): the named
leader calls :meth:`Partition.become_leader`; every other replica becomes a
follower and is handed to the :class:`~pluglog.replication.fetcher.LeaderFetcher`
of its leader, which truncates it (OffsetForLeaderEpoch) and then fetches.

A follower runs ``num.replica.fetchers`` fetchers per leader broker (Kafka's
name and default, 1; changed at run time as a dynamic broker config), each
with its own connection and fetch session over the partitions
:func:`fetcher_id` gives it. With more than one, the leader
builds one fetcher's answer while this broker stores another's: the two
processes work at once instead of in turn.

On the leader it shrinks the ISR of followers that have not caught up within
``replica.lag.time.max.ms`` (checked every half of it, Kafka's schedule) and
writes ISR changes through the coordinator's conditional ``alter_isr``; a
lost race (StaleStateError) is dropped because the winning state arrives as
an event. Only a live (registered) broker is added to an ISR (KIP-841's
eligibility, as Kafka's ZooKeeper-mode leader checks its metadata cache). A
lost ZooKeeper session takes every partition offline until the coordinator
re-announces states: another broker may already lead them.

During a controlled shutdown (:meth:`ReplicaManager.shutting_down`) this
broker stops fetching a partition once it is out of its ISR: at once for
those it is not in sync for, else when the controller's shrink arrives, as
Kafka's controller sends StopReplica with each shrink. A fetch in the new
epoch would have the leader add it back (one more ZooKeeper write and leader
epoch per partition, and an ISR naming a broker that is going away); one
still in the old epoch is fenced. Partitions it is still in sync for keep
replicating until their shrink, so acks=all does not wait on it meanwhile.

Replicas being moved can be throttled (:mod:`pluglog.replication.throttle`).
It also keeps the high-watermark checkpoint (Kafka's
``replication-offset-checkpoint``) so a restarted broker does not show
consumers records its followers may not have.
"""

import json
import os

from twisted.internet import task
from twisted.logger import Logger

from pluglog.coordination.state import NO_LEADER, StaleStateError
from pluglog.fileutil import atomic_write
from pluglog.replication.fetcher import LeaderFetcher
from pluglog.replication.throttle import ReplicationThrottle

log = Logger()

HW_CHECKPOINT = "replication-offset-checkpoint"


def fetcher_id(topic, index, count):
    """Which of a leader's ``count`` fetchers replicates ``topic``-``index``:
    Kafka's ``AbstractFetcherManager.getFetcherId``, ``abs(31 *
    topic.hashCode + partition) % count`` in Java's 32-bit arithmetic, so a
    partition lands on the fetcher it would in Kafka."""
    if count <= 1:
        return 0
    h = 0
    units = topic.encode("utf-16-be")  # String.hashCode walks UTF-16 code units
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    n = (31 * h + index) & 0xFFFFFFFF
    n = n - (1 << 32) if n >= 1 << 31 else n
    # Kafka's Utils.abs: Integer.MIN_VALUE maps to 0.
    return (0 if n == -(1 << 31) else abs(n)) % count


class ReplicaManager:
    """Leader/follower roles of this broker's partitions."""

    def __init__(self, broker):
        self.broker = broker
        self.coordinator = broker.coordinator
        self.reactor = broker.reactor
        self.config = broker.config
        self.node_id = broker.node_id
        self.fetchers = {}
        self.states = {}
        self._isr_check = None
        window_ms = self.config.replication_quota_window_size_seconds * 1000
        samples = self.config.replication_quota_window_num
        self.leader_throttle = ReplicationThrottle(
            self.config.leader_replication_throttled_rate, samples, window_ms
        )
        self.follower_throttle = ReplicationThrottle(
            self.config.follower_replication_throttled_rate, samples, window_ms
        )
        self._hw_path = os.path.join(self.config.data_dir, HW_CHECKPOINT)
        self._saved_hw = self._read_hw()
        #: ISR changes of partitions this broker leads, its own or the
        #: controller's (Kafka's IsrShrinksPerSec and IsrExpandsPerSec; read by
        #: pluglog.metrics on scrape).
        self.isr_shrinks = 0
        self.isr_expands = 0
        #: set by shutting_down (controlled shutdown): fetch only in-sync partitions
        self.in_shutdown = False

    # -- lifecycle -------------------------------------------------------------

    def start(self):
        self.coordinator.add_listener(self._on_event)
        for key in list(self.broker.partitions):
            self.refresh(*key)

    def _ensure_isr_check(self):
        # Only brokers leading a replicated partition pay for the timer.
        if self._isr_check is None:
            interval = max(self.config.replica_lag_time_max_ms / 2000.0, 0.05)
            self._isr_check = task.LoopingCall(self.shrink_isr)
            self._isr_check.clock = self.reactor
            self._isr_check.start(interval, now=False)

    def shutting_down(self):
        """Controlled shutdown begins: stop fetching every partition this
        broker is not in the ISR of, and each other one when it leaves it."""
        self.in_shutdown = True
        for fetcher in list(self.fetchers.values()):
            for key, entry in list(fetcher.partitions.items()):
                if self.node_id not in entry[0].isr:
                    fetcher.remove(key)

    def stop(self):
        if self._isr_check is not None and self._isr_check.running:
            self._isr_check.stop()
        self._isr_check = None
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()
        self.checkpoint_hw()

    # -- states ----------------------------------------------------------------

    def _on_event(self, event, payload):
        if event == "partition":
            self.apply(payload.topic, payload.partition, payload.replicas, payload.state)
        elif event == "brokers":
            for fetcher in self.fetchers.values():
                fetcher.brokers_changed()
        elif event == "session":
            if payload == "lost":
                for part in self.broker.partitions.values():
                    part.go_offline()
                for fetcher in self.fetchers.values():
                    fetcher.stop()
                self.fetchers.clear()
            else:
                for key in list(self.broker.partitions):
                    self.refresh(*key)

    def refresh(self, topic, index):
        """Apply the coordinator's current state of a hosted partition."""
        state = self.coordinator.partition_state(topic, index)
        meta = self.coordinator.topics().get(topic)
        if state is not None and meta is not None:
            self.apply(topic, index, meta.replicas(index), state, force=True)

    def initial_high_watermark(self, topic, index, log_end_offset):
        """HW of a partition opened at start: the checkpoint, never past the log."""
        saved = self._saved_hw.get(f"{topic}-{index}")
        return log_end_offset if saved is None else min(saved, log_end_offset)

    def apply(self, topic, index, replicas, state, force=False):
        part = self.broker.partitions.get((topic, index))
        if part is None:
            return
        key = (topic, index)
        old = self.states.get(key)
        if (
            not force
            and old is not None
            and (state.leader_epoch, state.version) < (old.leader_epoch, old.version)
        ):
            return  # an older event overtaken by one already applied
        self.states[key] = state
        part.isr_writer = self.write_isr
        now = self.broker.now_ms()
        if state.leader == self.node_id:
            self._unfollow(key)
            was_leader = part.is_leader and part.leader_epoch == state.leader_epoch
            if part.is_leader:
                self._count_isr_change(part.isr, state.isr)  # e.g. the controller's
            part.become_leader(state.leader_epoch, replicas, state.isr, now)
            if part.replicated:
                self._ensure_isr_check()
            if not was_leader:
                log.info(
                    "{topic}-{index}: leader in epoch {epoch}, ISR {isr}",
                    topic=topic,
                    index=index,
                    epoch=state.leader_epoch,
                    isr=list(state.isr),
                )
                self.broker.leadership_changed(part)
            return
        was_leader = part.is_leader
        part.become_follower(state.leader, state.leader_epoch, replicas, state.isr)
        if was_leader:
            self.broker.leadership_changed(part)
        current = self._fetcher_of(key)
        if (
            state.leader == NO_LEADER
            or self.node_id not in replicas
            or part.log_offline
            or (self.in_shutdown and self.node_id not in state.isr)
        ):
            # An offline log (a failed log dir) has nothing to fetch into.
            self._unfollow(key)
            return
        slot = (state.leader, fetcher_id(topic, index, self.config.num_replica_fetchers))
        if current is not None and current.key != slot:
            current.remove(key)
            current = None
        self._fetcher(slot).add(part)

    def reconfigure(self, config):
        """The broker's config changed (a dynamic update): with another
        ``num.replica.fetchers`` each followed partition moves to the fetcher
        the new count gives it, as Kafka's fetcher manager resizes its pool.
        A moved partition starts over in its new fetcher's session with the
        truncation check (a no-op where the logs agree); a fetcher left with
        none closes its connection, which ends its session on the leader."""
        old = self.config.num_replica_fetchers
        self.config = config
        count = config.num_replica_fetchers
        if count == old:
            return
        for fetcher in list(self.fetchers.values()):
            for key, entry in list(fetcher.partitions.items()):
                slot = (fetcher.leader_id, fetcher_id(key[0], key[1], count))
                if slot == fetcher.key:
                    continue
                fetcher.remove(key)
                self._fetcher(slot).add(entry[0])

    def _fetcher(self, slot):
        """The fetcher of ``slot`` (leader id, fetcher id), made if none yet."""
        fetcher = self.fetchers.get(slot)
        if fetcher is None:
            fetcher = self.fetchers[slot] = LeaderFetcher(self, *slot)
        return fetcher

    def _fetcher_of(self, key):
        for fetcher in self.fetchers.values():
            if key in fetcher.partitions:
                return fetcher
        return None

    def _unfollow(self, key):
        fetcher = self._fetcher_of(key)
        if fetcher is not None:
            fetcher.remove(key)

    def log_went_offline(self, key):
        """Its log dir failed: stop fetching for it (the controller drops
        this broker from its ISR and moves its leadership away)."""
        self._unfollow(key)

    def partition_removed(self, topic, index):
        self._unfollow((topic, index))
        self.states.pop((topic, index), None)

    # -- ISR ---------------------------------------------------------------------

    def write_isr(self, part, new_isr):
        key = (part.topic, part.index)
        state = self.states.get(key)
        if state is None or not self._eligible(part, new_isr):
            part.isr_change_pending = False
            return
        log.info(
            "{topic}-{index}: ISR {old} -> {new}",
            topic=part.topic,
            index=part.index,
            old=list(part.isr),
            new=list(new_isr),
        )
        d = self.coordinator.alter_isr(part.topic, part.index, state, tuple(new_isr))

        def stored(new_state):
            if new_state is None:
                part.isr_change_pending = False
                return
            current = self.states.get(key)
            if current is None or current.leader_epoch == new_state.leader_epoch:
                self.states[key] = new_state
                if part.is_leader and part.leader_epoch == new_state.leader_epoch:
                    self._count_isr_change(part.isr, new_state.isr)
                    part.isr_changed(new_state.isr)
                    return
            part.isr_change_pending = False

        def failed(failure):
            part.isr_change_pending = False
            if not failure.check(StaleStateError):
                log.failure("ISR update of {key} failed", failure, key=key)

        d.addCallbacks(stored, failed)

    def _eligible(self, part, new_isr):
        """Every replica ``new_isr`` adds is a live broker: one whose
        registration is gone (stopped, or cut off) is fenced (KIP-841)."""
        added = [b for b in new_isr if b not in part.isr]
        if not added:
            return True
        live = {broker[0] for broker in self.coordinator.brokers()}
        return all(b in live for b in added)

    def _count_isr_change(self, old, new):
        if len(new) < len(old):
            self.isr_shrinks += 1
        elif len(new) > len(old):
            self.isr_expands += 1

    def shrink_isr(self):
        now = self.broker.now_ms()
        lag = self.config.replica_lag_time_max_ms
        for part in list(self.broker.partitions.values()):
            if (
                not part.is_leader
                or len(part.isr) < 2
                or part.isr_change_pending
                or part.log_offline
            ):
                continue  # an offline leader's followers cannot catch up: not their fault
            lagging = part.lagging_followers(now, lag)
            if lagging:
                part._request_isr(tuple(b for b in part.isr if b not in lagging))

    # -- HW checkpoint -------------------------------------------------------------

    def _read_hw(self):
        try:
            with open(self._hw_path, encoding="utf-8") as handle:
                return {k: int(v) for k, v in json.load(handle).items()}
        except (OSError, ValueError, AttributeError):
            return {}

    def checkpoint_hw(self):
        if not os.path.isdir(self.config.data_dir) or self.config.storage == "memory":
            return
        state = {
            f"{part.topic}-{part.index}": part.high_watermark
            for part in self.broker.partitions.values()
        }
        try:
            atomic_write(self._hw_path, json.dumps(state, sort_keys=True).encode())
        except OSError as exc:
            log.warn("cannot write {path}: {exc}", path=self._hw_path, exc=exc)
