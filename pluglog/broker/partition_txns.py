"""The transactional side of a partition: markers, the LSO, producer-state load and snapshots.

A mixin of :class:`pluglog.broker.partition.Partition`, which owns ``log``,
``producers`` (:class:`~pluglog.broker.producer_state.ProducerStateTable`),
``txns`` (:class:`~pluglog.broker.txn_state.PartitionTxns`) and the role and
high watermark these methods read.

Producer state (idempotence windows, epochs, open transactions, aborted
transactions) is loaded on first need: the first idempotent or
transactional batch, marker, read_committed fetch or LSO query. Loading
starts from the newest producer-state snapshot at or below the log end
(``<offset>.snapshot`` in the log's directory, Kafka's name) and reads only
the batch headers after it; without a snapshot it reads every header from
the log start once. Snapshots are written by :meth:`snapshot_producers`
(the broker's periodic checkpoint and clean shutdown), so a restart reads
the headers of at most one checkpoint interval. The two newest are kept.
The periodic ones are not fsynced: with 10,000 partitions the two fsyncs
each held the event loop for a minute per checkpoint (bench/RESULTS.md).
A snapshot is a cache of what the log's headers say: one an OS crash left
empty or torn is unreadable, dropped, and the state read from an older
snapshot or the log, as with none (the log itself is flushed before).

Markers are read back from the log only while loading (a header does not
say COMMIT or ABORT); a leader knows what it writes, a follower parses the
control batches it replicates.
"""

import json
import os

from twisted.logger import Logger

from pluglog.broker.producer_state import ProducerStateTable
from pluglog.broker.txn_state import AbortedTxn, PartitionTxns
from pluglog.errors import InvalidProducerEpochError, NotLeaderOrFollowerError
from pluglog.fileutil import atomic_write
from pluglog.interfaces import IDirectoryLog, ITieredLog, ITransactionIndexLog
from pluglog.protocol.control import COMMIT, marker_batch, markers_in

log = Logger()

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_KEEP_SNAPSHOTS = 2
_TRANSACTIONAL = 0x10
_CONTROL = 0x20


def _snapshot_files(directory):
    out = []
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for name in names:
        stem, _, ext = name.partition(".")
        if "." + ext == SNAPSHOT_SUFFIX and len(stem) == 20 and stem.isdigit():
            out.append((int(stem), os.path.join(directory, name)))
    out.sort()
    return out


class PartitionTransactions:
    """Mixin: transactions and producer state of a Partition."""

    # -- load -----------------------------------------------------------------

    #: log end offset of the newest snapshot this partition wrote
    _snapshot_offset = -1
    #: True while the log is known to hold no batch with a producer id: it
    #: was empty when this partition opened it, and no idempotent or
    #: transactional batch came since (each would load the state first,
    #: which clears this). The producer state is then empty without a
    #: load: a read_committed fetch (librdkafka's default) or an LSO query
    #: of a plain producer's partition reads no headers, and the
    #: checkpoint writes it no snapshot (10,000 such partitions cost a
    #: full header scan each, then 10,000 fsynced snapshots).
    _no_producers = False

    #: bumped whenever the producer state is dropped (a truncation, a
    #: restart at the leader's log start): a snapshot taken before is stale
    _generation = 0

    def _reset_producers(self):
        self._generation += 1
        self._snapshot_offset = -1
        self.producers = ProducerStateTable()
        self.txns = PartitionTxns()
        self._producers_loaded = False

    def _load_producers(self):
        self._producers_loaded = True
        self._no_producers = False
        producers = self.producers = ProducerStateTable()
        txns = self.txns = PartitionTxns()
        plog = self.log
        start = plog.log_start_offset
        if ITransactionIndexLog.providedBy(plog):
            for entry in plog.aborted_txns():
                txns.add_aborted(AbortedTxn(*entry))
        snap = self._read_snapshot(plog.log_end_offset)
        if snap is not None:
            self._snapshot_offset = snap["offset"]
            start = max(start, snap["offset"])
            self._apply_snapshot(snap)
        markers = 0
        for header in plog.batch_headers(start):
            if header.producer_id < 0:
                continue
            if header.attributes & _CONTROL:
                # Markers must be applied in order with the data around
                # them; read this one now (markers are few: one per
                # transaction and partition).
                markers += 1
                self._apply_loaded_marker(header)
            else:
                self._follow_data_header(header)
        txns.drop_before(plog.log_start_offset)
        if markers or snap is None and len(producers):
            log.debug(
                "{topic}-{index}: loaded {n} producer(s) from offset {start}",
                topic=self.topic,
                index=self.index,
                n=len(producers),
                start=start,
            )

    def _first_producers(self, log_end):
        """The first producer's batch came to a ``_no_producers`` log,
        stored from ``log_end`` on: the state before it is empty, as a load
        would find it, without reading the headers before it. Snapshots
        past ``log_end`` (none should exist) name another history."""
        self._reset_producers()
        self._producers_loaded = True
        self._no_producers = False
        self._drop_snapshots_after(log_end)

    def _apply_loaded_marker(self, header):
        result = self.log.read(header.base_offset, 1 << 16, max_offset=header.base_offset + 1)
        data = result.records
        if not isinstance(data, bytes | bytearray | memoryview):
            data = data.read()
        for offset, pid, epoch, kind in markers_in(bytes(data)):
            if offset == header.base_offset:
                self.producers.bump_epoch(pid, epoch)
                self._end_txn(pid, kind == COMMIT, offset)

    def _ensure_loaded(self):
        if not self._producers_loaded:
            self._load_producers()

    # -- snapshots --------------------------------------------------------------

    def _drop_snapshots_after(self, log_end):
        """Kafka's truncateAndReload: a snapshot past the new log end names
        truncated batches. Reading skips one past the log end, but once the
        log grows past its offset again a restart would take it for the new
        history's producer state (wrong sequences: duplicates let through,
        good batches refused)."""
        directory = self._snapshot_dir()
        if directory is not None:
            unlink_all([path for offset, path in _snapshot_files(directory) if offset > log_end])

    def _snapshot_dir(self):
        return self.log.directory if IDirectoryLog.providedBy(self.log) else None

    def _read_snapshot(self, log_end):
        directory = self._snapshot_dir()
        if directory is None:
            return None
        for offset, path in reversed(_snapshot_files(directory)):
            if offset > log_end:
                # Written before a truncation (unclean restart, follower
                # truncation): it names batches that are gone.
                _unlink(path)
                continue
            try:
                with open(path, encoding="utf-8") as handle:
                    snap = json.load(handle)
                if snap.get("version") != SNAPSHOT_VERSION or snap.get("offset") != offset:
                    raise ValueError(f"unexpected version or offset in {path}")
                return snap
            except (OSError, ValueError) as exc:
                log.warn("ignoring unreadable producer snapshot {path}: {exc}", path=path, exc=exc)
                _unlink(path)
        return None

    def _apply_snapshot(self, snap):
        for pid, epoch, batches in snap["producers"]:
            self.producers.bump_epoch(pid, epoch)
            for first_seq, last_seq, first_offset, last_offset, append_time in batches:
                self.producers.update(
                    pid, epoch, first_seq, last_seq, first_offset, last_offset, append_time
                )
        txns = self.txns
        for pid, first in snap["ongoing"]:
            txns.ongoing[pid] = first
        txns.completed = [tuple(c) for c in snap["completed"]]
        for entry in snap["aborted"]:
            txns.add_aborted(AbortedTxn(*entry))

    def snapshot_producers(self, sync=True, retired=None):
        """Write the producer state as of the log end (when it is loaded and
        the log has a directory); keep the two newest snapshots. ``sync=False``:
        no fsync (the module docstring says why that is safe). ``retired``: a
        list the paths of older snapshots go to for the caller to unlink
        (off the event loop), instead of unlinking them here."""
        captured = self.capture_snapshot()
        if captured is not None:
            self.write_snapshot(captured, sync, retired)

    def capture_snapshot(self):
        """The producer state as of the log end, to write now or in a later
        reactor turn with :meth:`write_snapshot` (the broker's checkpoint
        takes every partition's in the turn of its flush, so none names data
        the flush did not sync, and writes them over the turns after); None
        when there is nothing new to write."""
        directory = self._snapshot_dir()
        if directory is None or not self._producers_loaded or self.log_offline:
            return None
        plog = self.log
        offset = plog.log_end_offset
        if offset == self._snapshot_offset:
            return None  # nothing appended since the last one: no directory listing
        txns = self.txns
        txns.drop_before(plog.log_start_offset)
        snap = {
            "version": SNAPSHOT_VERSION,
            "offset": offset,
            "producers": self.producers.dump(),
            "ongoing": sorted(txns.ongoing.items()),
            "completed": txns.completed,
            # A log with its own index (.txnindex) keeps these itself.
            "aborted": []
            if ITransactionIndexLog.providedBy(plog)
            else [list(entry) for entry in txns.aborted],
        }
        data = json.dumps(snap, separators=(",", ":")).encode("utf-8")
        return plog, self._generation, directory, offset, data

    def write_snapshot(self, captured, sync=True, retired=None):
        """Write a :meth:`capture_snapshot` (``sync``, ``retired``: as for
        :meth:`snapshot_producers`); skipped, returning False, when the
        state it took may no longer hold: the log was truncated, reset,
        replaced (a log dir move or failure) or went offline since. OSError
        as the write raises it."""
        plog, generation, directory, offset, data = captured
        if plog is not self.log or generation != self._generation or self.log_offline:
            return False
        if plog.closed or offset <= self._snapshot_offset:
            return False
        files = _snapshot_files(directory)
        path = os.path.join(directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")
        atomic_write(path, data, sync)
        self._snapshot_offset = offset
        old = [p for o, p in files[: max(0, len(files) + 1 - _KEEP_SNAPSHOTS)] if o != offset]
        if retired is None:
            unlink_all(old)
        else:
            retired.extend(old)
        return True

    # -- queries ----------------------------------------------------------------

    @property
    def has_transactions(self):
        """Loaded, with an open or unreplicated transaction (cheap)."""
        return self._producers_loaded and bool(self.txns)

    @property
    def last_stable_offset(self):
        if not self._producers_loaded:
            if self._no_producers:
                return self.high_watermark  # no transaction was ever here
            self._load_producers()
        return self.txns.last_stable_offset(self.high_watermark)

    def aborted_transactions(self, start, end):
        """AbortedTransactions of a read_committed fetch of ``[start, end)``."""
        if not self._producers_loaded:
            if self._no_producers:
                return []  # nor in a remote tier: the log began empty
            self._load_producers()
        found = [(e.producer_id, e.first_offset) for e in self.txns.aborted_between(start, end)]
        plog = self.log
        if start < plog.log_start_offset and ITieredLog.providedBy(plog) and plog.remote_tier:
            # Tiered storage: the index entries of segments now only remote.
            remote = [(e[0], e[1]) for e in plog.remote_tier.aborted_between(start, end)]
            found = sorted(set(found) | set(remote), key=lambda pair: pair[1])
        return [{"producer_id": pid, "first_offset": first} for pid, first in found]

    def transactions_for_cleaning(self):
        """``(first unstable offset or None, [(producer id, first offset,
        marker offset)])`` for the log cleaner."""
        self._ensure_loaded()
        txns = self.txns
        txns.drop_before(self.log.log_start_offset)
        first = txns.first_unstable_offset(self.high_watermark)
        return first, [(e.producer_id, e.first_offset, e.last_offset) for e in txns.aborted]

    def producer_states(self):
        """``(producer_id, epoch, last_sequence, last_timestamp)`` of each
        producer this partition remembers (DescribeProducers)."""
        self._ensure_loaded()
        return list(self.producers.items())

    def ongoing_transaction(self, producer_id):
        """First offset of ``producer_id``'s open transaction here, or -1."""
        self._ensure_loaded()
        return self.txns.ongoing.get(producer_id, -1)

    # -- leader: markers ------------------------------------------------------------

    def write_marker(self, producer_id, producer_epoch, commit, coordinator_epoch, now_ms):
        """Append a COMMIT or ABORT marker for ``producer_id`` (the
        coordinator's WriteTxnMarkers); returns the AppendInfo. The caller
        waits for the high watermark to pass it before answering."""
        if self.leader_id != self.node_id or self.offline:
            raise NotLeaderOrFollowerError(
                f"broker {self.node_id} is not the leader of {self.topic}-{self.index}"
            )
        self._ensure_loaded()
        self._check_epoch(producer_id, producer_epoch)
        batch = marker_batch(
            producer_id, producer_epoch, commit, coordinator_epoch, now_ms, self.leader_epoch
        )
        info = self.log.append(batch, now_ms, self.leader_epoch)
        self.producers.bump_epoch(producer_id, producer_epoch)
        self._end_txn(producer_id, commit, info.first_offset)
        if len(self.isr) == 1:
            self._set_high_watermark(self.log.log_end_offset)
        self._wake()
        return info

    def _check_epoch(self, producer_id, producer_epoch):
        current = self.producers.epoch_of(producer_id)
        if current is not None and producer_epoch < current:
            raise InvalidProducerEpochError(
                f"epoch {producer_epoch} is older than producer {producer_id}'s {current}"
            )

    def _txn_batch_appended(self, producer_id, first_offset):
        self.txns.begin(producer_id, first_offset)

    # -- follower -------------------------------------------------------------------

    def _replicated_producer_headers(self, records, headers):
        """Follow the producers and transactions in batches just replicated
        from the leader."""
        markers = None
        for header in headers:
            pid = header.producer_id
            if pid < 0:
                continue
            attributes = header.attributes
            if attributes & _CONTROL:
                if markers is None:
                    data = records if isinstance(records, bytes) else bytes(records)
                    markers = {m[0]: m for m in markers_in(data)}
                marker = markers.get(header.base_offset)
                if marker is not None:
                    self.producers.bump_epoch(pid, marker[2])
                    self._end_txn(pid, marker[3] == COMMIT, header.base_offset)
                continue
            self._follow_data_header(header, header.max_timestamp if header.timestamp_type else -1)

    def _follow_data_header(self, header, append_time=-1):
        """A data batch of a producer, stored or read back: its transaction
        (if transactional) and its idempotence window or epoch."""
        pid = header.producer_id
        if header.attributes & _TRANSACTIONAL and header.records_count:
            # (An empty batch, left by the cleaner for producer state, has
            # nothing to hide and its marker may be gone.)
            self.txns.begin(pid, header.base_offset)
        if header.base_sequence < 0:
            # The broker's own transactional batches carry no sequence.
            self.producers.bump_epoch(pid, header.producer_epoch)
            return
        self.producers.update(
            pid,
            header.producer_epoch,
            header.base_sequence,
            _last_seq(header),
            header.base_offset,
            header.base_offset + header.last_offset_delta,
            append_time,
        )

    def _end_txn(self, producer_id, commit, marker_offset):
        """A marker was appended (here or by the leader): the transaction
        ends, and an abort goes into the log's own index when it keeps one."""
        entry = self.txns.end(producer_id, commit, marker_offset)
        if entry is not None and ITransactionIndexLog.providedBy(self.log):
            self.log.append_aborted_txn(*entry)


def _last_seq(header):
    last = header.base_sequence + header.last_offset_delta
    return last - 2**31 if last > 2**31 - 1 else last


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def unlink_all(paths):
    """Unlink older snapshots; safe in a thread: one still present when a
    load reads it is used, one gone is skipped like an unreadable one, and
    the newest snapshot is never among them."""
    for path in paths:
        _unlink(path)
