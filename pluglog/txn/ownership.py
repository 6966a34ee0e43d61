"""Which ``__transaction_state`` partitions this broker's transaction coordinator owns.

As for groups (:mod:`pluglog.group.ownership`): the coordinator of a
transactional id is the leader of its ``__transaction_state`` partition.
:meth:`TxnOwnership.leadership_changed` (called by the Broker) loads a
partition this broker now leads and drops one it no longer leads;
:meth:`TxnOwnership.txn_error` is the check every transaction API makes
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, or NONE), and also
notices a leadership change that came without a notification.

After a load, a transaction found in PrepareCommit or PrepareAbort is
finished (markers, then Complete), as Kafka's coordinator does on
failover; an Ongoing one is left to the timeout check. An ownership is
tied to the leader epoch it was loaded in, which is also the coordinator
epoch the markers carry.
"""

from twisted.logger import Logger

from pluglog.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    INVALID_REQUEST,
    NONE,
)
from pluglog.group.ownership import leader_endpoint, not_led_error
from pluglog.txn.model import PREPARE_ABORT, PREPARE_COMMIT, TXN_TOPIC
from pluglog.txn.store import TxnStore

log = Logger()


class Owned:
    """One led ``__transaction_state`` partition in one leader epoch."""

    __slots__ = ("index", "leader_epoch", "error")

    def __init__(self, index, leader_epoch):
        self.index = index
        self.leader_epoch = leader_epoch
        self.error = COORDINATOR_LOAD_IN_PROGRESS


class TxnOwnership:
    """Loading and unloading per ``__transaction_state`` partition."""

    def __init__(self, broker):
        self.broker = broker
        self.reactor = broker.reactor
        self.store = TxnStore(broker)
        #: transactional id -> TxnMetadata, for ids of owned partitions
        self.txns = {}
        self.owned = {}
        self.active = False

    def now_ms(self):
        return self.broker.now_ms()

    def ownership_changed(self):
        """Hook: the set of owned partitions changed."""

    def start_ownership(self):
        self.active = True
        self.broker.coordinator.add_listener(self.cluster_event)
        count = self.broker.num_partitions(TXN_TOPIC) or 0
        for index in range(count):
            part = self.broker.partitions.get((TXN_TOPIC, index))
            if part is not None and part.is_leader:
                self._ensure_owned(part)

    def stop_ownership(self):
        self.active = False
        self.owned.clear()
        self.txns.clear()

    def leadership_changed(self, part):
        if part.topic != TXN_TOPIC or not self.active:
            return
        if part.is_leader:
            self._ensure_owned(part)
        elif part.index in self.owned:
            self._unload(part.index, "this broker no longer leads it")

    def cluster_event(self, event, payload):
        if event == "session" and payload == "lost" and self.active:
            for index in list(self.owned):
                self._unload(index, "the coordination session was lost")

    def txn_error(self, txn_id):
        """NONE when this broker coordinates ``txn_id`` and has loaded it."""
        if not txn_id:
            return INVALID_REQUEST
        if not self.active:
            return COORDINATOR_NOT_AVAILABLE
        count = self.broker.num_partitions(TXN_TOPIC)
        if count is None:
            self.store.ensure_topic().addErrback(
                lambda f: log.failure("creating __transaction_state failed", f)
            )
            return COORDINATOR_NOT_AVAILABLE
        index = self.store.partition_of(txn_id, count)
        part = self.broker.partitions.get((TXN_TOPIC, index))
        if part is None or not part.is_leader:
            if index in self.owned:
                self._unload(index, "this broker no longer leads it")
            return not_led_error(self.broker, TXN_TOPIC, index, part)
        return self._ensure_owned(part).error

    def led_partition(self, txn_id):
        part = self.broker.partitions.get((TXN_TOPIC, self.store.partition_of(txn_id)))
        if part is None or not part.is_leader:
            return None
        return part

    def coordinator_node(self, txn_id):
        """``(node_id, host, port)`` of the transaction coordinator of
        ``txn_id``, or None while its partition has no leader."""
        return leader_endpoint(self.broker, TXN_TOPIC, self.store.partition_of(txn_id))

    def _ensure_owned(self, part):
        owned = self.owned.get(part.index)
        if owned is not None and owned.leader_epoch == part.leader_epoch:
            return owned
        if owned is not None:
            self._unload(part.index, f"led again in leader epoch {part.leader_epoch}")
        owned = self.owned[part.index] = Owned(part.index, part.leader_epoch)
        self.ownership_changed()

        def current():
            return self.active and self.owned.get(part.index) is owned

        d = self.store.load(part, current)
        d.addCallbacks(self._install, self._load_failed, (owned,), None, (owned,))
        return owned

    def _install(self, metas, owned):
        if metas is None or not self.active or self.owned.get(owned.index) is not owned:
            return
        self.txns.update(metas)
        owned.error = NONE
        unfinished = [m for m in metas.values() if m.state in (PREPARE_COMMIT, PREPARE_ABORT)]
        log.info(
            "loaded {n} transactional id(s) from {topic}-{index}, finishing {u}",
            n=len(metas),
            topic=TXN_TOPIC,
            index=owned.index,
            u=len(unfinished),
        )
        for meta in unfinished:
            self.complete(meta)

    def _load_failed(self, failure, owned):
        log.failure("loading {t}-{i} failed", failure, t=TXN_TOPIC, i=owned.index)
        if self.owned.get(owned.index) is owned:
            owned.error = COORDINATOR_NOT_AVAILABLE

    def _unload(self, index, reason):
        self.owned.pop(index, None)
        self.ownership_changed()
        doomed = [t for t in self.txns if self.store.partition_of(t) == index]
        for txn_id in doomed:
            del self.txns[txn_id]
        log.info(
            "unloaded {n} transactional id(s) of {t}-{i}: {reason}",
            n=len(doomed),
            t=TXN_TOPIC,
            i=index,
            reason=reason,
        )
