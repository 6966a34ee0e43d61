"""One partition as the broker sees it: its log, role, high watermark, producers, waiters.

A partition hosted here is either the leader (clients produce and fetch;
followers fetch from it) or a follower (its log is written only by the
replica fetcher). The coordinator's PartitionState decides which
(:meth:`become_leader` / :meth:`become_follower`, called by
:class:`pluglog.replication.ReplicaManager`).

The leader keeps each follower's log end offset (LEO) as reported by its
fetches, computes the high watermark (HW) as the smallest LEO over the ISR
and lets consumers read only below it (Kafka's replication design, seed 002).
A single-replica partition's HW is its LEO after every append. acks=all
produce waits for the HW to pass its batch (:meth:`wait_for_hw`); the waits
are fired from :meth:`_set_high_watermark`, never by polling. Long-polling
fetches register a waiter called once on the next append or HW move.
Everything runs on the reactor thread.

Client batches (``client=True``, the default) have every record walked by
:mod:`pluglog.broker.validation` before anything is written, and are refused
on internal topics (Kafka's "Cannot append to internal topic"); the group
coordinator appends its own batches with ``client=False``. Followers append
already-validated batches through :meth:`append_replicated`, which does not
walk them again.
"""

import heapq
import itertools

from twisted.internet import defer

from pluglog.broker.partition_txns import PartitionTransactions
from pluglog.broker.producer_state import DuplicateAppend, ProducerStateTable, producer_fields
from pluglog.broker.remote_replica import RemoteReplica
from pluglog.broker.txn_state import PartitionTxns
from pluglog.broker.validation import validate_records
from pluglog.errors import (
    NONE,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
    InvalidRecordError,
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
)
from pluglog.interfaces import IOfflineLog, ITieredLog
from pluglog.replication.epochs import LeaderEpochCache
from pluglog.storage.compaction import recompress, require_keys
from pluglog.storage.records import validate_batches

_HEADER_SIZE = 61
_seq = itertools.count()


class Partition(PartitionTransactions):
    """A topic-partition hosted by this broker."""

    def __init__(self, topic, index, log, topic_config, leader_epoch=0, node_id=0, internal=False):
        self.topic = topic
        self.internal = internal
        self.index = index
        self.log = log
        #: The storage could not open the log (pluglog.storage.offline): fixed
        #: for the partition's life, so decided once, not per request.
        self.log_offline = IOfflineLog.providedBy(log)
        self.config = topic_config
        self.node_id = node_id
        self.leader_id = node_id
        self.leader_epoch = leader_epoch
        self.replicas = (node_id,)
        self.isr = (node_id,)
        self.remotes = {}
        self.epochs = LeaderEpochCache.for_log(log)
        self.high_watermark = log.log_end_offset
        self.producers = ProducerStateTable()
        self.txns = PartitionTxns()
        self.offline = False
        self._waiters = []
        #: fetch sessions holding this partition -> their key for it; marked
        #: on every change a fetch can see (pluglog.broker.fetch_sessions)
        self.fetch_sessions = {}
        self._hw_waits = []
        self._producers_loaded = False
        self._no_producers = not self.log_offline and log.log_end_offset == 0
        #: Client records and bytes appended (per batch; read by pluglog.metrics on scrape).
        self.messages_in = 0
        self.bytes_in = 0
        #: Set by the replica manager: ``isr_writer(partition, new_isr)``.
        self.isr_writer = None
        self.isr_change_pending = False
        #: Set by the broker for topics with confluent.*.schema.validation:
        #: ``schema_check(records)`` raises InvalidRecordError. None costs one
        #: test per batch (pluglog.serialization.validation).
        self.schema_check = None

    # -- role ------------------------------------------------------------------

    @property
    def is_leader(self):
        return self.leader_id == self.node_id and not self.offline

    @property
    def replicated(self):
        """True when acks=all must wait for other replicas."""
        return len(self.replicas) > 1

    @property
    def isr_size(self):
        return len(self.isr)

    def become_leader(self, leader_epoch, replicas, isr, now_ms):
        """Take (or keep) leadership in ``leader_epoch``."""
        new_epoch = leader_epoch != self.leader_epoch or not self.is_leader
        self.leader_id = self.node_id
        self.leader_epoch = leader_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.offline = False
        self.isr_change_pending = False
        if new_epoch:
            self.epochs.assign(leader_epoch, self.log.log_end_offset)
            self.remotes = {
                broker: RemoteReplica(broker, now_ms)
                for broker in self.replicas
                if broker != self.node_id
            }
        else:
            for broker in self.replicas:
                if broker != self.node_id and broker not in self.remotes:
                    self.remotes[broker] = RemoteReplica(broker, now_ms)
        self._maybe_advance_hw()
        self._wake()

    def become_follower(self, leader_id, leader_epoch, replicas, isr):
        """Stop leading (if we did): produce waits fail, fetchers move on."""
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.remotes = {}
        self.isr_change_pending = False
        self._fail_hw_waits(NOT_LEADER_OR_FOLLOWER)
        self._wake()

    def go_offline(self):
        """Leadership is uncertain (ZooKeeper session lost): refuse clients."""
        self.offline = True
        self._fail_hw_waits(NOT_LEADER_OR_FOLLOWER)
        self._wake()

    # -- leader: produce ---------------------------------------------------------

    def append(self, records, now_ms, acks=1, client=True, answer=None):
        """Append the records of one produce request (one v2 batch).

        ``client=False`` is the broker's own append (group coordinator): it
        may write internal topics and its batches are not walked. ``answer``
        (the produce fast lane's): passed to the log's ``append`` (see
        :meth:`pluglog.interfaces.IPartitionLog.append`), which may call it
        so the response leaves before the bookkeeping; the caller answers
        from the returned info when it was not called (a duplicate, or a log
        that does not answer early).
        """
        if self.leader_id != self.node_id or self.offline:
            raise NotLeaderOrFollowerError(
                f"broker {self.node_id} is not the leader of {self.topic}-{self.index}"
            )
        if self.log_offline:
            # Kafka answers an offline replica before reading the batch. The
            # sequence check below would answer the batch after one refused
            # here OUT_OF_ORDER_SEQUENCE_NUMBER (the refused one left no
            # sequence), and librdkafka's idempotent producer then bumps its
            # epoch and renumbers everything unacknowledged, batches the new
            # leader already holds included: stored twice.
            raise KafkaStorageError(
                f"partition {self.topic}-{self.index} is offline: {self.log.reason}"
            )
        if client and self.internal:
            raise InvalidTopicError(f"Cannot append to internal topic {self.topic}")
        if acks == -1 and len(self.isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.index}: {len(self.isr)} in-sync replica(s), "
                f"min.insync.replicas is {self.config.min_insync_replicas}"
            )
        if len(records) < _HEADER_SIZE:
            raise InvalidRecordError(f"record batch of {len(records)} bytes is too short")
        if client:
            max_bytes = self.config.max_message_bytes
            try:
                validate_records(records, max_bytes)
            except KafkaError:
                # Header and CRC faults keep the storage layer's answer
                # (CORRUPT_MESSAGE for a CRC mismatch): checked on failure only.
                validate_batches(records, max_bytes)
                raise
        config = self.config
        if config.cleanup_policy != "delete":
            # Compacted: every record needs a key (Kafka refuses the batch).
            require_keys(records)
        if self.schema_check is not None:
            self.schema_check(records)
        size_in = len(records)
        if config.compression_type != "producer":
            records = recompress(records, config.compression_type)
        producer_id, epoch, first_seq, last_seq = producer_fields(records)
        if producer_id >= 0:
            # Loaded on the first idempotent batch only: plain producers never
            # pay for the header scan, and a later load still sees every batch.
            if not self._producers_loaded:
                self._load_producers()
            if client or first_seq >= 0:
                dup = self.producers.check(producer_id, epoch, first_seq, last_seq)
                if dup is not None:
                    return DuplicateAppend(dup[0], dup[1], dup[2], self.log.log_start_offset)
            else:
                # The broker's own transactional batch (TxnOffsetCommit):
                # no sequence to check, but a fenced epoch is refused.
                self._check_epoch(producer_id, epoch)
        info = self.log.append(records, now_ms, self.leader_epoch, answer)
        if producer_id >= 0:
            if records[22] & 0x10:  # attributes (int16 at 21): transactional
                self._txn_batch_appended(producer_id, info.first_offset)
            if first_seq < 0:
                self.producers.bump_epoch(producer_id, epoch)
            else:
                self.producers.update(
                    producer_id,
                    epoch,
                    first_seq,
                    last_seq,
                    info.first_offset,
                    info.last_offset,
                    info.log_append_time,
                )
        if client:
            self.messages_in += info.last_offset - info.first_offset + 1
            self.bytes_in += size_in
        if len(self.isr) == 1:
            self._set_high_watermark(self.log.log_end_offset)
        if self._waiters or self.fetch_sessions:
            self._wake()
        return info

    def wait_for_hw(self, offset, timeout_s, reactor):
        """Deferred of an error code: NONE once the HW reaches ``offset``
        (acks=all), NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR is then
        below min.insync.replicas, REQUEST_TIMED_OUT after ``timeout_s``,
        NOT_LEADER_OR_FOLLOWER if leadership moves first."""
        if self.high_watermark >= offset:
            return defer.succeed(self._acks_all_code())
        d = defer.Deferred()
        entry = [offset, next(_seq), d, None]
        entry[3] = reactor.callLater(timeout_s, self._hw_timeout, entry)
        heapq.heappush(self._hw_waits, entry)
        return d

    def _acks_all_code(self):
        if len(self.isr) < self.config.min_insync_replicas:
            return NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return NONE

    def _hw_timeout(self, entry):
        entry[3] = None
        if not entry[2].called:
            entry[2].callback(REQUEST_TIMED_OUT)

    def fail_waits(self, code):
        """The log went offline under the partition (a failed log dir):
        answer the producers and fetches waiting on it."""
        self._fail_hw_waits(code)
        self._wake()

    def _fail_hw_waits(self, code):
        waits, self._hw_waits = self._hw_waits, []
        for _offset, _seq_no, d, call in waits:
            if call is not None and call.active():
                call.cancel()
            if not d.called:
                d.callback(code)

    def _set_high_watermark(self, hw):
        if hw <= self.high_watermark:
            return
        self.high_watermark = hw
        waits = self._hw_waits
        while waits and waits[0][0] <= hw:
            _offset, _seq_no, d, call = heapq.heappop(waits)
            if call is not None and call.active():
                call.cancel()
            if not d.called:
                d.callback(self._acks_all_code())

    # -- leader: followers ---------------------------------------------------------

    def _maybe_advance_hw(self):
        hw = self.log.log_end_offset
        for broker in self.isr:
            if broker != self.node_id:
                remote = self.remotes.get(broker)
                if remote is None or remote.leo < 0:
                    return
                hw = min(hw, remote.leo)
        if hw > self.high_watermark:
            self._set_high_watermark(hw)
            self._wake()

    def update_follower(self, broker_id, fetch_offset, now_ms, clock=None):
        """A follower fetched from ``fetch_offset``: it holds everything below.

        ``clock``: the FollowerClock of the fetch session it fetched in; while
        it stays caught up, the session's later fetches that omit this
        partition count as fetches at the same offset (Kafka updates every
        session partition on each fetch)."""
        remote = self.remotes.get(broker_id)
        if remote is None:
            return False
        remote.unclock()
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            remote.last_caught_up_ms = now_ms
        elif fetch_offset >= remote.last_fetch_leader_leo >= 0:
            remote.last_caught_up_ms = remote.last_fetch_ms
        remote.last_fetch_leader_leo = leo
        remote.last_fetch_ms = now_ms
        remote.leo = fetch_offset
        if clock is not None and fetch_offset >= leo:
            remote.clock = clock
        if broker_id not in self.isr and self._caught_up(fetch_offset):
            self._request_isr(tuple(self.isr) + (broker_id,))
        self._maybe_advance_hw()
        return True

    def follower_left_session(self, broker_id, clock):
        """The follower's session ``clock`` no longer fetches this partition
        (forgotten, or the fetch failed for it): its lag counts from now."""
        remote = self.remotes.get(broker_id)
        if remote is not None and remote.clock is clock:
            remote.unclock()

    def _caught_up(self, leo):
        # Kafka's isFollowerInSync: at the HW and past this epoch's start.
        epoch_start = self.epochs.entries[-1][1] if self.epochs.entries else 0
        return leo >= self.high_watermark and leo >= epoch_start

    def lagging_followers(self, now_ms, lag_ms):
        """ISR followers that have not caught up within ``lag_ms``."""
        out = []
        for broker in self.isr:
            remote = self.remotes.get(broker)
            if remote is not None and now_ms - remote.caught_up_ms > lag_ms:
                out.append(broker)
        return out

    def _request_isr(self, new_isr):
        if self.isr_change_pending or self.isr_writer is None or self.log_offline:
            # Offline (a failed log dir): the controller decides its ISR now.
            return
        self.isr_change_pending = True
        self.isr_writer(self, new_isr)

    def isr_changed(self, new_isr):
        """The coordinator stored ``new_isr`` for the current leader epoch."""
        self.isr_change_pending = False
        self.isr = tuple(new_isr)
        self._maybe_advance_hw()
        if len(self.isr) == 1:
            self._set_high_watermark(self.log.log_end_offset)
        # Fetch sessions re-read it: a follower outside the ISR now fetches
        # through update_follower each time, and the HW may have moved.
        self._wake()

    # -- follower ----------------------------------------------------------------

    def append_replicated(self, records, leader_hw, now_ms):
        """Store batches fetched from the leader and follow its HW."""
        # Producer state follows every replicated batch (a follower may lead
        # next), loaded before the first is stored; a log that never held a
        # producer's batch stays unloaded until one comes, as on a leader:
        # no snapshots then (4.4 s per checkpoint at 10,000, session 14).
        info = headers = None
        if records:  # an answer with news of the HW only has none
            if not self._producers_loaded and not self._no_producers:
                self._load_producers()
            end = self.log.log_end_offset
            info, headers = self.log.append_replicated(records, now_ms)
        if headers:
            epochs = self.epochs
            for header in headers:
                if header.partition_leader_epoch > epochs.latest_epoch():
                    epochs.assign(header.partition_leader_epoch, header.base_offset)
            if self._producers_loaded:
                self._replicated_producer_headers(records, headers)
            elif any(header.producer_id >= 0 for header in headers):
                self._first_producers(end)
                self._replicated_producer_headers(records, headers)
        hw = self.high_watermark
        self._set_high_watermark(min(leader_hw, self.log.log_end_offset))
        if self.high_watermark > hw and (self._waiters or self.fetch_sessions):
            # Consumers parked here read from this follower (KIP-392).
            self._wake()
        return info

    def truncate_to(self, offset):
        """Drop everything at or after ``offset`` (follower truncation)."""
        if offset >= self.log.log_end_offset:
            return
        self.log.truncate_to(offset)
        self.epochs.truncate_from_end(offset)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
        # Producer state may name truncated batches: rebuild on demand.
        self._drop_snapshots_after(self.log.log_end_offset)
        self._reset_producers()
        self._wake()

    def restart_at(self, offset):
        """Empty the log and continue at ``offset`` (the leader's log start)."""
        self.log.truncate_fully_and_start_at(offset)
        self.epochs.truncate_from_end(-1)
        self.high_watermark = offset
        self._drop_snapshots_after(-1)  # every one names the history that is gone
        self._reset_producers()
        self._wake()

    # -- tiers -------------------------------------------------------------------

    @property
    def earliest_offset(self):
        """The first offset readable from either tier: the remote tier's
        start when the log has one (tiered storage), else the log start
        (ListOffsets EARLIEST, DeleteRecords' low watermark). None while a
        remote tier's metadata is still being read (after a start)."""
        plog = self.log
        start = plog.log_start_offset
        tier = plog.remote_tier if ITieredLog.providedBy(plog) else None
        if tier is not None:
            if not tier.loaded:
                return None  # not known until the remote metadata is read
            remote = tier.log_start_offset
            if remote is not None and remote < start:
                return remote
        return start

    def delete_records(self, offset):
        """DeleteRecords up to ``offset`` in both tiers; returns the new
        low watermark."""
        plog = self.log
        if offset > plog.log_start_offset:
            plog.delete_records_before(offset)
        if ITieredLog.providedBy(plog) and plog.remote_tier is not None:
            plog.remote_tier.delete_records_before(offset)
        self._wake()
        earliest = self.earliest_offset
        return plog.log_start_offset if earliest is None else earliest

    def log_start_moved(self):
        """Retention (or the leader's log start, on a follower) moved the
        log start outside this class: fetch sessions must send it."""
        self._wake()

    def log_rewritten(self):
        """The cleaner swapped segments in: fetch sessions read it afresh."""
        self._wake()

    def data_ready(self):
        """Bytes a parked fetch waited for arrived (a remote tier read): wake it."""
        self._wake()

    # -- waiters -------------------------------------------------------------------

    def _wake(self):
        if self.fetch_sessions:
            for session, key in list(self.fetch_sessions.items()):
                session.mark(key)
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                waiter(self)

    @property
    def parked_fetches(self):
        """The fetches waiting for this partition's next append or HW move."""
        return tuple(self._waiters)

    @property
    def parked_produces(self):
        """acks=all produces waiting for the HW to pass their batch."""
        return len(self._hw_waits)

    def add_waiter(self, waiter):
        self._waiters.append(waiter)

    def remove_waiter(self, waiter):
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass
