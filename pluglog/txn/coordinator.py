"""The transaction coordinator (Kafka's TransactionCoordinator).

It owns the transactional ids of the ``__transaction_state`` partitions this
broker leads (:mod:`pluglog.txn.ownership`) and drives each through
Kafka's states (:mod:`pluglog.txn.model`):

* InitProducerId gives an id its producer id and bumps its epoch, fencing
  the previous producer. An open transaction of the old producer is
  aborted first (the epoch is bumped for the abort markers) and the caller
  retries on CONCURRENT_TRANSACTIONS. KIP-360: a producer naming its
  current id and epoch gets a bump, a retry of the last bump gets the
  same answer, anything else PRODUCER_FENCED.
* AddPartitionsToTxn and AddOffsetsToTxn move it to Ongoing and record
  its partitions (the group's ``__consumer_offsets`` partition for offsets).
* EndTxn writes PrepareCommit or PrepareAbort, answers, then has the
  markers written (:mod:`pluglog.txn.markers`) and writes CompleteCommit or
  CompleteAbort. A new coordinator that loads a prepared transaction
  finishes it the same way.
* A transaction open longer than its timeout is aborted with a bumped
  epoch, checked every
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` on the
  reactor clock.

Each state change is durable (acks=all in ``__transaction_state``) before
the request that caused it is answered. While one is being written the id
is ``pending`` and other changes get CONCURRENT_TRANSACTIONS. Everything
runs on the reactor thread.
"""

import struct

from twisted.internet import defer, task
from twisted.logger import Logger

from pluglog.errors import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_NOT_AVAILABLE,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    NONE,
    NOT_COORDINATOR,
    OPERATION_NOT_ATTEMPTED,
    PRODUCER_FENCED,
    TRANSACTIONAL_ID_NOT_FOUND,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from pluglog.group.store import OFFSETS_TOPIC, coordinator_error, partition_for
from pluglog.txn.markers import MarkerChannel
from pluglog.txn.model import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    STATE_CODES,
    TxnMetadata,
    txn_key,
    txn_value,
)
from pluglog.txn.ownership import TxnOwnership

log = Logger()

MAX_EPOCH = 32767
_PID_EPOCH = struct.Struct(">qh")  # producerId, producerEpoch at byte 43 of a batch


class TransactionCoordinator(TxnOwnership):
    """Transactional ids of the ``__transaction_state`` partitions led here."""

    def __init__(self, broker, allocate_producer_id, connect=None):
        super().__init__(broker)
        self.allocate_producer_id = allocate_producer_id
        self.markers = MarkerChannel(broker, connect)
        self._timer = self._expiry = None

    def start(self):
        self.start_ownership()
        return defer.succeed(self)

    def stop(self):
        self.stop_ownership()
        self.ownership_changed()
        self.markers.close()
        return defer.succeed(None)

    # -- InitProducerId ----------------------------------------------------------

    @defer.inlineCallbacks
    def init_producer_id(self, txn_id, timeout_ms, expected_pid=-1, expected_epoch=-1):
        """A Deferred of ``(error_code, producer_id, producer_epoch)``."""
        if not 0 < timeout_ms <= self.broker.config.transaction_max_timeout_ms:
            return INVALID_TRANSACTION_TIMEOUT, -1, -1
        error = self.txn_error(txn_id)
        if error != NONE:
            return error, -1, -1
        meta = self.txns.get(txn_id)
        now = self.now_ms()
        if meta is None:
            meta = TxnMetadata(txn_id, self.allocate_producer_id(), -1, timeout_ms, now)
            self.txns[txn_id] = meta
        if meta.pending is not None or meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return CONCURRENT_TRANSACTIONS, -1, -1
        if expected_pid >= 0:
            if expected_pid == meta.producer_id and expected_epoch == meta.last_producer_epoch:
                return NONE, meta.producer_id, meta.producer_epoch  # a retried bump
            if expected_pid != meta.producer_id or expected_epoch != meta.producer_epoch:
                return PRODUCER_FENCED, -1, -1
        if meta.state == ONGOING:
            # Fence the old producer: abort its transaction with a bumped
            # epoch; the new one retries once the abort is complete.
            yield self._prepare_end(meta, commit=False, bump=True)
            return CONCURRENT_TRANSACTIONS, -1, -1
        pid, epoch = meta.producer_id, meta.producer_epoch + 1
        if epoch >= MAX_EPOCH:
            pid, epoch = self.allocate_producer_id(), 0
        code = yield self._transition(
            meta,
            producer_id=pid,
            producer_epoch=epoch,
            last_producer_epoch=meta.producer_epoch,
            timeout_ms=timeout_ms,
            state=EMPTY,
            partitions=set(),
            start_ms=-1,
        )
        if code != NONE:
            if meta.producer_epoch < 0:
                self.txns.pop(txn_id, None)  # never written: forget it
            return code, -1, -1
        return NONE, pid, epoch

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------

    @defer.inlineCallbacks
    def add_partitions(self, txn_id, producer_id, producer_epoch, partitions):
        """A Deferred of ``{(topic, partition): error_code}``."""
        error = self._producer_error(txn_id, producer_id, producer_epoch)
        if error == NONE:
            meta = self.txns[txn_id]
            if meta.pending is not None or meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                error = CONCURRENT_TRANSACTIONS
        if error != NONE:
            return {key: error for key in partitions}
        topics = self.broker.coordinator.topics()
        unknown = {
            (t, p)
            for t, p in partitions
            if t not in topics or not 0 <= p < topics[t].num_partitions
        }
        if unknown:
            return {
                key: UNKNOWN_TOPIC_OR_PARTITION if key in unknown else OPERATION_NOT_ATTEMPTED
                for key in partitions
            }
        new = set(partitions) - meta.partitions
        if not new and meta.state == ONGOING:
            return {key: NONE for key in partitions}
        now = self.now_ms()
        code = yield self._transition(
            meta,
            state=ONGOING,
            partitions=meta.partitions | new,
            start_ms=meta.start_ms if meta.state == ONGOING else now,
        )
        return {key: code for key in partitions}

    @defer.inlineCallbacks
    def add_offsets(self, txn_id, producer_id, producer_epoch, group_id):
        """A Deferred of an error code: the group's offsets partition joins."""
        gc = self.broker.group_coordinator
        if self.broker.num_partitions(OFFSETS_TOPIC) is None and gc is not None:
            # The first transaction of a new cluster may come before any
            # group: make __consumer_offsets as FindCoordinator would.
            try:
                yield gc.ensure_offsets_topic()
            except Exception:
                return COORDINATOR_NOT_AVAILABLE
        count = self.broker.num_partitions(OFFSETS_TOPIC)
        if count is None:
            return COORDINATOR_NOT_AVAILABLE
        key = (OFFSETS_TOPIC, partition_for(group_id, count))
        codes = yield self.add_partitions(txn_id, producer_id, producer_epoch, [key])
        return codes[key]

    # -- EndTxn -----------------------------------------------------------------------

    @defer.inlineCallbacks
    def end_txn(self, txn_id, producer_id, producer_epoch, commit):
        """A Deferred of an error code."""
        error = self._producer_error(txn_id, producer_id, producer_epoch)
        if error != NONE:
            return error
        meta = self.txns[txn_id]
        if meta.pending is not None:
            return CONCURRENT_TRANSACTIONS
        state = meta.state
        if state == ONGOING:
            code = yield self._prepare_end(meta, commit)
            return code
        if state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
            return NONE  # a retry of what already happened
        if state == (PREPARE_COMMIT if commit else PREPARE_ABORT):
            return CONCURRENT_TRANSACTIONS
        return INVALID_TXN_STATE

    @defer.inlineCallbacks
    def _prepare_end(self, meta, commit, bump=False):
        changes = {"state": PREPARE_COMMIT if commit else PREPARE_ABORT}
        if bump:
            changes["producer_epoch"] = meta.producer_epoch + 1
            changes["last_producer_epoch"] = -1
        code = yield self._transition(meta, **changes)
        if code == NONE:
            self.complete(meta)
        return code

    def complete(self, meta):
        """Write the markers of a prepared transaction, then its Complete
        state (not awaited by the request that prepared it)."""
        commit = meta.state == PREPARE_COMMIT
        index = self.store.partition_of(meta.transactional_id)
        owned = self.owned.get(index)
        epoch = owned.leader_epoch if owned is not None else -1

        def wanted():
            return (
                self.active
                and self.owned.get(index) is owned
                and self.txns.get(meta.transactional_id) is meta
            )

        d = self.markers.send(
            meta.producer_id, meta.producer_epoch, commit, epoch, sorted(meta.partitions), wanted
        )

        def sent(done):
            if not done or not wanted():
                return None
            return self._transition(
                meta, state=COMPLETE_COMMIT if commit else COMPLETE_ABORT, partitions=set()
            )

        d.addCallback(sent)
        d.addErrback(lambda f: log.failure("completing {m} failed", f, m=meta))
        return d

    # -- timeouts -----------------------------------------------------------------------

    def ownership_changed(self):
        """Run the timeout check only while some partition is owned: a
        broker that coordinates no transaction keeps no timer."""
        running = self._timer is not None and self._timer.running
        if self.owned and self.active and not running:
            config = self.broker.config
            self._timer = task.LoopingCall(self.abort_timed_out)
            self._timer.clock = self.reactor
            interval = config.transaction_abort_timed_out_transaction_cleanup_interval_ms
            self._timer.start(interval / 1000.0, now=False)
            self._expiry = task.LoopingCall(self.expire_ids)
            self._expiry.clock = self.reactor
            interval = config.transaction_remove_expired_transaction_cleanup_interval_ms
            self._expiry.start(interval / 1000.0, now=False)
        elif running and not (self.owned and self.active):
            self._timer.stop()
            self._expiry.stop()

    def expire_ids(self):
        """Forget transactional ids idle (no transaction open) for longer
        than ``transactional.id.expiration.ms``: a tombstone in the log, as
        Kafka's removeExpiredTransactionalIds writes."""
        expiration = self.broker.config.transactional_id_expiration_ms
        now = self.now_ms()
        for meta in list(self.txns.values()):
            idle = meta.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)
            if not idle or meta.pending is not None or now - meta.last_update_ms <= expiration:
                continue
            part = self.led_partition(meta.transactional_id)
            if part is None:
                continue
            meta.pending = "Dead"
            d = self.store.append(part, txn_key(meta.transactional_id), None)
            d.addCallbacks(self._expired, self._not_expired, (meta,), None, (meta,))

    def _expired(self, _result, meta):
        meta.pending = None
        if self.txns.get(meta.transactional_id) is meta:
            del self.txns[meta.transactional_id]
            log.info("transactional id {id} expired", id=meta.transactional_id)

    def _not_expired(self, failure, meta):
        meta.pending = None  # retried on the next check

    def abort_timed_out(self):
        """Abort (with a bumped epoch) every transaction open past its timeout."""
        now = self.now_ms()
        for meta in list(self.txns.values()):
            if (
                meta.state == ONGOING
                and meta.pending is None
                and meta.start_ms >= 0
                and now - meta.start_ms > meta.timeout_ms
            ):
                log.info(
                    "aborting transaction {id} (producer {pid}): open longer than {t} ms",
                    id=meta.transactional_id,
                    pid=meta.producer_id,
                    t=meta.timeout_ms,
                )
                self._prepare_end(meta, commit=False, bump=True)

    # -- produce verification -------------------------------------------------------

    def verify(self, txn_id, batch, topic, index):
        """``(error_code, message)`` for a transactional batch of ``txn_id``
        produced to ``topic``-``index``: INVALID_TXN_STATE unless the
        partition is in the id's open transaction. Ids coordinated by
        another broker are not checked here (NONE)."""
        if txn_id is None:
            return INVALID_TXN_STATE, "a transactional batch needs the request's transactional id"
        meta = self.txns.get(txn_id)
        if meta is None:
            return NONE, None
        pid, epoch = _PID_EPOCH.unpack_from(batch, 43)
        if pid != meta.producer_id:
            return INVALID_PRODUCER_ID_MAPPING, f"{txn_id!r} does not have producer id {pid}"
        if epoch < meta.producer_epoch:
            # A zombie: a newer producer bumped the epoch (Kafka answers the
            # stale epoch before looking at the transaction).
            return INVALID_PRODUCER_EPOCH, f"epoch {epoch} of {txn_id!r} is fenced"
        if meta.state != ONGOING or (topic, index) not in meta.partitions:
            return (
                INVALID_TXN_STATE,
                f"{topic}-{index} is not in an open transaction of {txn_id!r}",
            )
        return NONE, None

    # -- operators ---------------------------------------------------------------------

    def describe(self, txn_id):
        """DescribeTransactions fields of one id (``error_code`` included)."""
        error = self.txn_error(txn_id)
        meta = self.txns.get(txn_id) if error == NONE else None
        if meta is None:
            return {"error_code": error if error != NONE else TRANSACTIONAL_ID_NOT_FOUND}
        return {
            "error_code": NONE,
            "transaction_state": meta.state,
            "transaction_timeout_ms": meta.timeout_ms,
            "transaction_start_time_ms": meta.start_ms,
            "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch,
            "topics": [{"topic": t, "partitions": p} for t, p in meta.topics().items()],
        }

    def list_transactions(self, states, producer_ids, duration_ms=-1):
        """``(unknown state filters, [listed])`` for ListTransactions."""
        unknown = [s for s in states if s not in STATE_CODES]
        wanted_states = set(states) - set(unknown)
        now = self.now_ms()
        listed = []
        for meta in self.txns.values():
            if meta.producer_epoch < 0:
                continue
            if states and meta.state not in wanted_states:
                continue
            if producer_ids and meta.producer_id not in producer_ids:
                continue
            if duration_ms >= 0 and (meta.start_ms < 0 or now - meta.start_ms < duration_ms):
                continue
            listed.append(
                {
                    "transactional_id": meta.transactional_id,
                    "producer_id": meta.producer_id,
                    "transaction_state": meta.state,
                }
            )
        return unknown, listed

    # -- helpers ----------------------------------------------------------------------

    def _producer_error(self, txn_id, producer_id, producer_epoch):
        error = self.txn_error(txn_id)
        if error != NONE:
            return error
        meta = self.txns.get(txn_id)
        if meta is None or meta.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != meta.producer_epoch:
            return PRODUCER_FENCED
        return NONE

    def _transition(self, meta, **changes):
        """Write ``meta`` with ``changes`` to the log; apply them once
        acknowledged. A Deferred of an error code."""
        part = self.led_partition(meta.transactional_id)
        if part is None:
            return defer.succeed(NOT_COORDINATOR)
        changes.setdefault("last_update_ms", self.now_ms())
        target = TxnMetadata(meta.transactional_id, -1, -1, meta.timeout_ms, -1)
        for name in TxnMetadata.__slots__:
            if name not in ("pending", "transactional_id"):
                setattr(target, name, changes.get(name, getattr(meta, name)))
        meta.pending = target.state
        d = self.store.append(part, txn_key(meta.transactional_id), txn_value(target))

        def written(_):
            meta.pending = None
            for name, value in changes.items():
                setattr(meta, name, value)
            return NONE

        def failed(failure):
            meta.pending = None
            return coordinator_error(failure)

        return d.addCallbacks(written, failed)
