"""The transactional producer's half that talks to the transaction coordinator.

:class:`TransactionManager` is what Kafka's producer calls its
TransactionManager: a :class:`~pluglog.client.producer.Producer` built with
``transactional_id=`` owns one, and its ``init_transactions()``,
``begin_transaction()``, ``send_offsets_to_transaction()``,
``commit_transaction()`` and ``abort_transaction()`` come here.

- ``init_transactions()`` finds the coordinator (FindCoordinator key type 1)
  and sends InitProducerId with the transactional id: the coordinator bumps
  the id's epoch, which fences an older producer with the same id and aborts
  the transaction it left open (answering CONCURRENT_TRANSACTIONS until that
  abort is complete).
- A partition's first batch in a transaction waits in its queue until
  AddPartitionsToTxn for it is answered: the sender (:meth:`need` from
  ``_drain``) collects the new partitions and one request at a time adds
  them; the producer sets the transactional bit on every batch.
- ``send_offsets_to_transaction()`` is AddOffsetsToTxn to the transaction
  coordinator, then TxnOffsetCommit (KIP-447: the consumer's generation and
  member id) to the group's coordinator.
- ``commit_transaction()`` flushes, then EndTxn(commit); ``abort_transaction()``
  fails the records not sent yet (TransactionAbortedError), waits for those on
  the wire, then EndTxn(abort).

Coordinator requests are retried on the reactor clock for up to
``max.block.ms`` (as Kafka's blocking calls wait): CONCURRENT_TRANSACTIONS and
COORDINATOR_LOAD_IN_PROGRESS after a short backoff, NOT_COORDINATOR and
COORDINATOR_NOT_AVAILABLE after finding the coordinator again.
PRODUCER_FENCED or INVALID_PRODUCER_EPOCH from any request is fatal
(:class:`~pluglog.client.errors.ProducerFencedError`); another failure inside
a transaction (a record that could not be written, a refused partition) is
abortable: ``commit_transaction()`` fails with it and only
``abort_transaction()`` is allowed until the transaction is aborted.
"""

from twisted.internet import defer, task

from pluglog import errors as codes
from pluglog.client.cluster import TopicPartition
from pluglog.client.config import ms
from pluglog.client.errors import (
    BrokerResponseError,
    KafkaClientError,
    KafkaConnectionError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionAbortedError,
    TransactionStateError,
)
from pluglog.client.offsets import ConsumerGroupMetadata
from pluglog.protocol.api_keys import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    INIT_PRODUCER_ID,
    TXN_OFFSET_COMMIT,
)

# States (Kafka's TransactionManager.State, the ones a caller can see).
UNINITIALIZED = "UNINITIALIZED"
INITIALIZING = "INITIALIZING"
READY = "READY"
IN_TRANSACTION = "IN_TRANSACTION"
COMMITTING = "COMMITTING_TRANSACTION"
ABORTING = "ABORTING_TRANSACTION"
ABORTABLE_ERROR = "ABORTABLE_ERROR"
FATAL_ERROR = "FATAL_ERROR"

FENCED = frozenset({codes.PRODUCER_FENCED, codes.INVALID_PRODUCER_EPOCH})
# Errors after which the same request is sent again (to a coordinator found
# again for the first two).
_FIND_AGAIN = frozenset({codes.NOT_COORDINATOR, codes.COORDINATOR_NOT_AVAILABLE})
_RETRY = frozenset(
    {
        codes.CONCURRENT_TRANSACTIONS,
        codes.COORDINATOR_LOAD_IN_PROGRESS,
        codes.REQUEST_TIMED_OUT,
        codes.UNKNOWN_TOPIC_OR_PARTITION,
        codes.UNSTABLE_OFFSET_COMMIT,
    }
)
# Kafka's producer retries CONCURRENT_TRANSACTIONS on AddPartitionsToTxn after
# 20 ms instead of retry.backoff.ms: the previous transaction's markers are
# usually written by then.
_CONCURRENT_BACKOFF_MS = 20


def _worst(codes_seen):
    """One code for a per-partition answer: fenced first, then a code that is
    not retried, then a retriable one (OPERATION_NOT_ATTEMPTED only says
    another partition failed)."""
    seen = {c for c in codes_seen if c and c != codes.OPERATION_NOT_ATTEMPTED}
    for group in (FENCED, None, _RETRY | _FIND_AGAIN):
        for code in sorted(seen):
            if group is None:
                if code not in _RETRY and code not in _FIND_AGAIN:
                    return code
            elif code in group:
                return code
    return codes.NONE


class TransactionManager:
    """A transactional producer's state and coordinator requests."""

    def __init__(self, producer):
        self.producer = producer
        self.client = producer.client
        self.reactor = producer.reactor
        self.config = producer.config
        self.transactional_id = producer.config["transactional.id"]
        self.state = UNINITIALIZED
        self.error = None  # the abortable or fatal error, once one happened
        self.coordinator = None  # node id of the transaction coordinator
        self.added = set()  # partitions AddPartitionsToTxn added to this transaction
        self.started = False  # the coordinator knows of this transaction
        self._wanted = set()  # partitions whose batches wait to be added
        self._adding = False
        self._lock = defer.DeferredLock()  # one coordinator request at a time, in order

    # -- state ---------------------------------------------------------------

    def _require(self, *states, what):
        if self.state == FATAL_ERROR:
            return self.error
        if self.state not in states:
            if self.state == ABORTABLE_ERROR:
                return TransactionStateError(
                    f"cannot {what}: the transaction must be aborted after {self.error}"
                )
            return TransactionStateError(f"cannot {what} in state {self.state}")
        return None

    def send_error(self):
        """Why ``send()`` is refused now, or None inside a transaction."""
        if self.state == IN_TRANSACTION:
            return None
        if self.state in (ABORTABLE_ERROR, FATAL_ERROR):
            return self.error
        return TransactionStateError(
            f"cannot send in state {self.state}: call begin_transaction() first"
        )

    def accepting(self):
        """Whether records may still enter batches (not while aborting)."""
        return self.state in (IN_TRANSACTION, COMMITTING)

    def in_transaction(self):
        return self.state in (IN_TRANSACTION, ABORTABLE_ERROR)

    def _failed(self, exc):
        """Record a failure: fencing is fatal, the rest aborts the transaction."""
        self.producer._lanes.clear()  # send()'s C fast case must see the state
        if isinstance(exc, ProducerFencedError) or self.state == FATAL_ERROR:
            self.state = FATAL_ERROR
            self.error = exc if isinstance(exc, ProducerFencedError) else self.error
        elif self.state in (IN_TRANSACTION, COMMITTING):
            self.state = ABORTABLE_ERROR
            self.error = exc
        return self.error or exc

    def batch_failed(self, exc):
        """A batch of the transaction failed: the exception its records get."""
        if isinstance(exc, BrokerResponseError) and exc.error_code in FENCED:
            exc = ProducerFencedError(exc.error_code, self.transactional_id, exc.where)
        if not isinstance(exc, TransactionAbortedError):
            self._failed(exc)
        return exc

    # -- the public calls (through the Producer) --------------------------------

    @defer.inlineCallbacks
    def init_transactions(self):
        error = self._require(UNINITIALIZED, what="init_transactions()")
        if error is not None:
            raise error
        self.state = INITIALIZING
        try:
            yield self.producer.start()
            body = {
                "transactional_id": self.transactional_id,
                "transaction_timeout_ms": self.config["transaction.timeout.ms"],
                "producer_id": -1,
                "producer_epoch": -1,
            }
            response = yield self._lock.run(
                self._coordinated, INIT_PRODUCER_ID, 4, body, "InitProducerId"
            )
        except Exception as exc:
            self.state = FATAL_ERROR if isinstance(exc, ProducerFencedError) else UNINITIALIZED
            self.error = exc if self.state == FATAL_ERROR else None
            raise
        producer = self.producer
        producer.producer_id = response["producer_id"]
        producer.producer_epoch = response["producer_epoch"]
        producer._sequences.clear()  # a new epoch numbers every partition from 0
        self.state = READY
        producer._drain()

    def begin_transaction(self):
        error = self._require(READY, what="begin_transaction()")
        if error is not None:
            return defer.fail(error)
        self.state = IN_TRANSACTION
        self.added.clear()
        self.started = False
        return defer.succeed(None)

    @defer.inlineCallbacks
    def send_offsets_to_transaction(self, offsets, group):
        error = self._require(IN_TRANSACTION, what="send_offsets_to_transaction()")
        if error is not None:
            raise error
        if isinstance(group, str):
            group = ConsumerGroupMetadata(group)
        if not isinstance(group, ConsumerGroupMetadata):
            raise TypeError(f"expected a group id or Consumer.group_metadata(), got {group!r}")
        topics = {}
        for tp, offset in offsets.items():
            tp = TopicPartition(*tp)
            offset, metadata = offset if isinstance(offset, tuple) else (offset, "")
            topics.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": int(offset),
                    "committed_leader_epoch": -1,
                    "committed_metadata": metadata,
                }
            )
        try:
            # The group's coordinator first: finding it creates
            # __consumer_offsets on a broker that has none yet, which
            # AddOffsetsToTxn needs there (Kafka's producer asks after).
            node = yield self._group_coordinator(group.group_id)
            yield self._lock.run(
                self._coordinated,
                ADD_OFFSETS_TO_TXN,
                3,
                self._ids(group_id=group.group_id),
                f"AddOffsetsToTxn {group.group_id}",
            )
            self.started = True
            yield self._commit_offsets(group, topics, node)
        except Exception as exc:
            raise self._failed(exc) from None

    @defer.inlineCallbacks
    def commit_transaction(self):
        error = self._require(IN_TRANSACTION, what="commit_transaction()")
        if error is not None:
            raise error
        self.state = COMMITTING
        self.producer._lanes.clear()  # send()'s C fast case must see the state
        yield self.producer.flush()
        if self.state != COMMITTING:  # a record failed: the transaction must be aborted
            raise self.error
        yield self._end(commit=True)

    @defer.inlineCallbacks
    def abort_transaction(self):
        error = self._require(IN_TRANSACTION, ABORTABLE_ERROR, what="abort_transaction()")
        if error is not None:
            raise error
        self.state = ABORTING
        self.producer._drop_unsent(TransactionAbortedError("the transaction was aborted"))
        yield self.producer.flush()
        if self.state == FATAL_ERROR:
            raise self.error
        yield self._end(commit=False)

    def _end(self, commit):
        # Under the lock: an AddPartitionsToTxn still in flight is answered
        # (and counted in ``added``) before this decides whether to send EndTxn.
        return self._lock.run(self._end_locked, commit)

    @defer.inlineCallbacks
    def _end_locked(self, commit):
        if self.started or self.added:
            try:
                yield self._coordinated(
                    END_TXN,
                    3,
                    self._ids(committed=commit),
                    "EndTxn(commit)" if commit else "EndTxn(abort)",
                )
            except Exception as exc:
                if isinstance(exc, ProducerFencedError):
                    self._failed(exc)
                else:
                    # Not known to be ended: abort_transaction() (again) is
                    # what is left, as in Kafka's producer.
                    self.state = ABORTABLE_ERROR
                    self.error = exc
                raise
        self.state = READY
        self.error = None
        self.added.clear()
        self.started = False

    # -- AddPartitionsToTxn, driven by the sender -------------------------------

    def need(self, tp):
        """``_drain`` has a batch for ``tp``, which is not in the transaction yet."""
        self._wanted.add(tp)

    def kick(self):
        """After ``_drain``: add the waiting partitions (one request at a
        time), or fail their batches when the transaction cannot take them."""
        if not self._wanted:
            return
        if self.state in (ABORTABLE_ERROR, FATAL_ERROR, ABORTING):
            wanted, self._wanted = self._wanted, set()
            exc = self.error if self.state != ABORTING else None
            self.producer._fail_queued(wanted, exc or TransactionAbortedError("aborted"))
            return
        if self._adding or self.state not in (IN_TRANSACTION, COMMITTING):
            return
        self._adding = True
        tps = sorted(self._wanted)
        topics = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append(partition)
        body = {
            "v3_and_below_transactional_id": self.transactional_id,
            "v3_and_below_producer_id": self.producer.producer_id,
            "v3_and_below_producer_epoch": self.producer.producer_epoch,
            "v3_and_below_topics": [{"name": t, "partitions": p} for t, p in topics.items()],
        }
        d = self._lock.run(self._add_partitions, tps, body)
        d.addErrback(self._add_failed, tps)

    @defer.inlineCallbacks
    def _add_partitions(self, tps, body):
        yield self._coordinated(
            ADD_PARTITIONS_TO_TXN, 3, body, "AddPartitionsToTxn", _partition_codes
        )
        # Still under the lock (see _end).
        self._adding = False
        self.added.update(tps)
        self._wanted.difference_update(tps)
        self.producer._drain()

    def _add_failed(self, failure, tps):
        self._adding = False
        exc = self._failed(failure.value)
        self._wanted.difference_update(tps)
        self.producer._fail_queued(tps, exc)
        self.producer._drain()

    # -- requests --------------------------------------------------------------

    def _ids(self, **more):
        return {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer.producer_id,
            "producer_epoch": self.producer.producer_epoch,
            **more,
        }

    def _backoff(self, code):
        wait = self.config["retry.backoff.ms"]
        if code == codes.CONCURRENT_TRANSACTIONS:
            wait = min(wait, _CONCURRENT_BACKOFF_MS)
        return task.deferLater(self.reactor, ms(wait), lambda: None)

    @defer.inlineCallbacks
    def _coordinated(self, api_key, max_version, body, what, code_of=None):
        """Send to the transaction coordinator until it answers without a
        retriable error (see the module docstring); the response."""
        deadline = self.reactor.seconds() + ms(self.config["max.block.ms"])
        while True:
            try:
                if self.coordinator is None:
                    self.coordinator = yield self.client.find_coordinator(
                        self.transactional_id, key_type=1
                    )
                response = yield self.client.send(self.coordinator, api_key, max_version, body)
                code = code_of(response) if code_of else response["error_code"]
                last = BrokerResponseError(code, where=what) if code else None
            except (KafkaConnectionError, RequestTimedOutError) as exc:
                code, last = codes.COORDINATOR_NOT_AVAILABLE, exc
            except BrokerResponseError as exc:  # from FindCoordinator
                code, last = exc.error_code, exc
            if code == codes.NONE:
                return response
            if code in FENCED:
                raise ProducerFencedError(code, self.transactional_id, what)
            if code in _FIND_AGAIN:
                self.coordinator = None
            elif code not in _RETRY:
                raise last
            if self.reactor.seconds() >= deadline:
                raise KafkaClientError(
                    f"{what}: no answer without error within max.block.ms="
                    f"{self.config['max.block.ms']}: {last}"
                )
            yield self._backoff(code)

    @defer.inlineCallbacks
    def _commit_offsets(self, group, topics, node):
        """TxnOffsetCommit to the group's coordinator, retried like the rest."""
        deadline = self.reactor.seconds() + ms(self.config["max.block.ms"])
        body = {
            "transactional_id": self.transactional_id,
            "group_id": group.group_id,
            "producer_id": self.producer.producer_id,
            "producer_epoch": self.producer.producer_epoch,
            "generation_id": group.generation_id,
            "member_id": group.member_id,
            "group_instance_id": group.group_instance_id,
            "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
        }
        what = f"TxnOffsetCommit {group.group_id}"
        while True:
            try:
                if node is None:
                    node = yield self._group_coordinator(group.group_id)
                response = yield self.client.send(node, TXN_OFFSET_COMMIT, 3, body)
                code = _worst(p["error_code"] for t in response["topics"] for p in t["partitions"])
                last = BrokerResponseError(code, where=what) if code else None
            except (KafkaConnectionError, RequestTimedOutError) as exc:
                code, last = codes.COORDINATOR_NOT_AVAILABLE, exc
            except BrokerResponseError as exc:
                code, last = exc.error_code, exc
            if code == codes.NONE:
                return
            if code in FENCED:
                raise ProducerFencedError(code, self.transactional_id, what)
            if code in _FIND_AGAIN:
                node = None
            elif code not in _RETRY:
                raise last  # e.g. ILLEGAL_GENERATION: a stale consumer (KIP-447)
            if self.reactor.seconds() >= deadline:
                raise KafkaClientError(f"{what}: still failing after max.block.ms: {last}")
            yield self._backoff(code)

    @defer.inlineCallbacks
    def _group_coordinator(self, group_id):
        """Node id of ``group_id``'s coordinator, retried while it loads."""
        deadline = self.reactor.seconds() + ms(self.config["max.block.ms"])
        while True:
            try:
                node = yield self.client.find_coordinator(group_id)
                return node
            except (KafkaConnectionError, RequestTimedOutError, BrokerResponseError) as exc:
                if not getattr(exc, "retriable", True) or self.reactor.seconds() >= deadline:
                    raise
                yield self._backoff(codes.COORDINATOR_NOT_AVAILABLE)


def _partition_codes(response):
    return _worst(
        p["partition_error_code"]
        for t in response["results_by_topic_v3_and_below"]
        for p in t["results_by_partition"]
    )
