"""The storage contracts: a partition's log and its optional capabilities,
the storage that holds the logs, and the remote tier's object store.

Conventions shared by all of them:

* Offsets are Kafka offsets (int64). ``log_end_offset`` is the offset the
  next appended record will get.
* Nothing here reads the wall clock: callers pass ``now_ms``.
* Everything runs on the reactor thread; methods are synchronous and cheap
  (page-cache writes, no fsync unless the fsync policy says so), except
  :class:`IRemoteLogStorage`, whose methods block and run in thread pools.
"""

from zope.interface import Attribute, Interface


class IFileRange(Interface):
    """A byte range of an open file: what a fetch sends with ``os.sendfile``."""

    fileno = Attribute(
        "callable returning the OS file descriptor to read from, open at the time of "
        "the call; called again each time the broker sends from the range (also "
        "while it waits behind a slow socket), so it may reopen a closed file; "
        "raising a KafkaError drops the connection"
    )
    position = Attribute("byte offset of the range inside the file")
    size = Attribute("length of the range in bytes")

    def read():
        """Return the range's bytes (the copy-through path: TLS, tests)."""


class IPartitionLog(Interface):
    """One topic-partition's append-only log of magic-2 record batches.

    Everything the broker calls on every log; optional capabilities are the
    smaller interfaces below (:class:`ICompactableLog`,
    :class:`IReplicatedLog`, :class:`IFlushableLog`, :class:`IDirectoryLog`),
    which a log declares with ``@implementer`` and the broker checks with
    ``providedBy``. The value types (:class:`~pluglog.storage.api.AppendInfo`,
    :class:`~pluglog.storage.api.ReadResult`,
    :class:`~pluglog.storage.api.BatchHeader`,
    :class:`~pluglog.storage.api.SegmentInfo`) and the helpers that validate,
    number and check batches are in :mod:`pluglog.storage.api`; docs/storage.rst
    describes them field by field.
    """

    topic = Attribute("topic name (str)")
    partition = Attribute("partition number (int)")
    config = Attribute(
        "the TopicConfig in use (pluglog.config.TopicConfig): segment.bytes, "
        "max.message.bytes, message.timestamp.type, flush.*, cleanup.policy..."
    )
    log_start_offset = Attribute("first offset still readable (int)")
    log_end_offset = Attribute("offset the next appended record gets (int)")
    recovery_point = Attribute("every offset below this is known flushed to disk (int)")
    size_bytes = Attribute("total bytes of stored batches (int)")
    closed = Attribute("True once close() ran: the broker no longer uses the log (bool)")

    def append(batches, now_ms, leader_epoch=0, answer=None):
        """Validate and append a client's record batches; return an AppendInfo.

        ``batches`` is one bytes-like object holding one or more magic-2
        batches back to back (a produce request's records field), each with
        baseOffset 0. Every batch header and CRC-32C is checked before
        anything is written; offsets are assigned from ``log_end_offset``
        by patching ``baseOffset``, and ``partitionLeaderEpoch`` is set to
        ``leader_epoch``; with ``config.message_timestamp_type ==
        "LogAppendTime"`` each batch's timestamp type and maxTimestamp become
        ``now_ms`` (CRC recomputed). Records are never decoded.
        :func:`pluglog.storage.api.prepare_append` does all of this and
        returns the bytes to store. Raises
        :class:`pluglog.errors.CorruptRecordError` (bad CRC),
        :class:`pluglog.errors.InvalidRecordError` (bad structure) or
        :class:`pluglog.errors.MessageTooLargeError` (a batch over
        ``config.max_message_bytes``); nothing is written when it raises.

        The broker passes all four arguments positionally. ``answer`` is
        ``None`` or a callable ``answer(first_offset, log_append_time,
        log_start_offset)`` that the log MAY call once, on success, as soon
        as the batches are stored (and any fsync the flush policy requires
        is done), so the produce response leaves before the log's own
        bookkeeping. A log that never calls it is correct: the broker then
        answers from the returned AppendInfo.
        """

    def read(offset, max_bytes, max_offset=None, min_one_batch=True):
        """Return a :class:`pluglog.storage.api.ReadResult` of whole batches.

        The records start with the batch containing ``offset`` (so its first
        batch may start before ``offset``) and are at most ``max_bytes``
        long, unless ``min_one_batch`` lets the first batch alone exceed it
        (KIP-74). Batches starting at or after ``max_offset`` (exclusive,
        e.g. the high watermark) are left out. ``records`` is bytes or an
        IFileRange. When nothing is readable (``offset`` is the log end, or
        the first batch starts at ``max_offset``) the result is empty:
        ``records == b""``, ``size == 0``, ``first_offset == -1``
        (:func:`pluglog.storage.api.empty_read`). A gap left by compaction
        is skipped: the first batch after ``offset`` is returned. Raises
        :class:`pluglog.errors.OffsetOutOfRangeError` when ``offset`` is
        outside ``[log_start_offset, log_end_offset]``.
        """

    def offset_for_timestamp(timestamp_ms):
        """Return ``(offset, timestamp)`` of the first batch whose max
        timestamp is >= ``timestamp_ms`` (offset: that batch's base offset,
        at least log_start_offset), or ``None`` if there is none."""

    def batch_headers(start_offset=0):
        """Iterate, in offset order, over the
        :class:`pluglog.storage.api.BatchHeader` of every stored batch whose
        last offset is >= ``start_offset``: the batch holding
        ``start_offset`` is included. Reads headers only (recovery of
        producer state, tools)."""

    def roll(now_ms):
        """Close the active segment and start a new one at log_end_offset
        (no-op when the active one is empty). A storage without segments
        treats everything up to log_end_offset as one closed unit."""

    def delete_records_before(offset):
        """Advance log_start_offset to ``offset`` (DeleteRecords); whole
        segments below it may be removed. Raises OffsetOutOfRangeError when
        ``offset`` is beyond log_end_offset; returns the segments removed."""

    def truncate_to(offset):
        """Drop every batch at or after ``offset``. The batch holding
        ``offset`` goes whole, so log_end_offset becomes its base offset;
        an offset below log_start_offset empties the log, which continues
        at ``offset``. No-op when ``offset >= log_end_offset``."""

    def segment_infos():
        """Return a list of :class:`pluglog.storage.api.SegmentInfo`,
        oldest first, the active (written) segment last; never empty."""

    def delete_oldest_segments(count):
        """Remove the ``count`` oldest segments (never the active one);
        log_start_offset moves to the next segment's base offset. Returns the
        number removed. Retention policies decide ``count``."""

    def update_config(config):
        """Use a changed TopicConfig from the next call on (AlterConfigs)."""

    def flush():
        """fsync everything written so far and advance the recovery point."""

    def close():
        """Flush and release resources; sets ``closed``."""


class IFlushableLog(Interface):
    """A log that defers fsync under the ``interval`` policy (``--fsync``)."""

    def maybe_flush(now_ms):
        """Flush when ``config.flush_ms`` has passed since the last flush and
        something is unflushed; return whether it flushed. The broker calls it
        every ``log.flush.scheduler.interval.ms`` under ``--fsync interval``."""


class IReplicatedLog(Interface):
    """A log that can be a follower replica (topics with replication factor > 1)."""

    def append_replicated(batches, now_ms):
        """Store batches fetched from the leader exactly as they are (offsets,
        epochs, CRCs kept; gaps allowed; a trailing partial batch ignored).
        Returns ``(AppendInfo or None, [BatchHeader])``;
        :func:`pluglog.storage.api.prepare_replicated` checks and describes
        them. Raises CorruptRecordError when a batch is corrupt or does not
        follow log_end_offset."""

    def truncate_fully_and_start_at(offset):
        """Drop everything; the empty log continues at ``offset`` (both
        log_start_offset and log_end_offset become ``offset``)."""


class ICompactableLog(Interface):
    """A log that compacts itself (``cleanup.policy=compact`` topics, among
    them ``__consumer_offsets``). A storage whose logs provide it declares
    :class:`ICompactingStorage`."""

    def compact(now_ms):
        """Run one compaction pass; return the number of records removed.

        Kafka's rules: for each key only the record with the highest offset
        stays; offsets never change (gaps are left); records without a key
        go; a tombstone (null value) stays until ``config.delete_retention_ms``
        after it was first compacted; records younger than
        ``config.min_compaction_lag_ms`` and the active segment are not
        touched; control batches stay. The log cleaner calls it on the
        reactor thread every ``log.cleaner.backoff.ms``: keep a pass bounded.
        :func:`pluglog.storage.api.filter_batch` rewrites one batch."""


class IDirectoryLog(Interface):
    """A log with its own directory: the broker keeps the partition's
    leader-epoch checkpoint there (otherwise it is kept in memory only)."""

    directory = Attribute("absolute path of the log's directory (str)")


class ITransactionIndexLog(Interface):
    """A log that keeps an aborted-transaction index with its data (Kafka's
    per-segment ``.txnindex``): entries go when the data they cover goes
    (retention, truncation) and survive compaction. Without it the broker
    keeps the index in its producer-state snapshot."""

    def append_aborted_txn(producer_id, first_offset, last_offset, last_stable_offset):
        """Record that ``producer_id``'s transaction from ``first_offset`` was
        aborted by the marker at ``last_offset`` (the newest marker)."""

    def aborted_txns():
        """Every aborted transaction still in the log, as ``(producer_id,
        first_offset, last_offset, last_stable_offset)`` in marker order."""


class ITieredLog(Interface):
    """A log that can have a remote tier (tiered storage, KIP-405): its
    closed segments are files the remote log manager can upload
    (``segments``, each with ``log_path``, ``index``, ``time_index`` and
    ``txn_index``), and it serves offsets below its local start from the
    :class:`pluglog.storage.remote.tier.RemoteTier` attached to it: reads
    with a ``max_offset`` (consumers read below the high watermark) only. A
    read without one is a follower's, which gets OFFSET_OUT_OF_RANGE there
    and restarts at the leader's local start, so a new or wiped replica
    copies only the local tail (KIP-405's follower bootstrap)."""

    remote_tier = Attribute(
        "the attached RemoteTier, or None: reads below log_start_offset go to "
        "it, and delete_oldest_segments removes only segments it holds"
    )


class IOfflineLog(IPartitionLog):
    """The broker's stand-in for a log that could not be opened: every data
    operation raises KafkaStorageError (pluglog.storage.offline)."""

    reason = Attribute("why the log could not be opened (str)")


class ILogStorage(Interface):
    """The set of partition logs of one broker (a data directory)."""

    topic_defaults = Attribute(
        "TopicConfig for open_log calls without one; the broker replaces it "
        "when the broker-level defaults change at run time"
    )

    log_class = Attribute(
        "The class of the IPartitionLog objects open_log returns. The broker "
        "verifies it when it starts, before any topic is opened: IPartitionLog "
        "and each optional log interface the class implements, method "
        "signatures included, so a wrong signature stops the broker at once "
        "with one line (every opened log is verified as well)"
    )

    def open_log(topic, partition, topic_config):
        """Return the IPartitionLog for the partition, creating it if missing
        (reopening recovers what was written before a crash)."""

    def get_log(topic, partition):
        """Return the IPartitionLog, or ``None`` if the partition has no log."""

    def delete_log(topic, partition):
        """Remove the partition's log and all of its data."""

    def logs():
        """Return a list of every open IPartitionLog."""

    def flush_all():
        """fsync every log and write the recovery-point checkpoint."""

    def close():
        """Flush, write the recovery-point checkpoint, release every file."""


class ICompactingStorage(ILogStorage):
    """A storage whose logs all provide :class:`ICompactableLog`. Without it
    the broker refuses compacted topics (CreateTopics answers INVALID_CONFIG;
    an existing one stops the broker at start)."""


class IReplicatingStorage(ILogStorage):
    """A storage whose logs all provide :class:`IReplicatedLog`. Without it
    the broker refuses to host a follower replica of any partition."""


class ILogDirStorage(ILogStorage):
    """A storage over several log dirs (``log.dirs``, JBOD) that notices a
    failed one (docs/storage.rst, "Several log dirs")."""

    data_dirs = Attribute("The log dirs, absolute paths, in ``log.dirs`` order")

    def dir_of(topic, partition):
        """The log dir holding the partition, or None."""

    def failed_dirs():
        """``{log dir: reason}`` of the dirs that failed while serving."""

    def probe_dirs():
        """Check each live dir is still usable; mark failed those that are
        not and return them as ``{dir: reason}``."""

    def mark_dir_failed(directory, reason):
        """Take ``directory`` out of service: its logs stay offline (open_log
        raises KafkaStorageError) until restart."""

    def move_log(topic, partition, destination):
        """Move the partition's log into the log dir ``destination`` (one of
        ``data_dirs``), crash-safe, and return the IPartitionLog now serving
        it; KafkaStorageError when it cannot."""


class ILogDirMoves(ILogDirStorage):
    """A storage that moves a log between its dirs while the log takes
    appends: copy rounds off the reactor, a short last step on it
    (pluglog.storage.logdir_move; Kafka's ReplicaAlterLogDirsThread)."""

    def begin_move(topic, partition, destination, rate=0):
        """Make the partition's future log in ``destination``; a
        :class:`pluglog.storage.logdir_move.LogMove` (the broker reads its
        ``key``, ``log``, ``destination``, ``copied`` under ``lock``), or
        None when the log is there already. KafkaStorageError
        when it cannot move. ``rate``: bytes/s the copy rounds may write."""

    def copy_step(move):
        """One copy round, safe on any thread; the bytes copied."""

    def move_pending_bytes(move):
        """About how much a copy round would copy now."""

    def finish_move(move):
        """On the reactor: copy the rest, swap the future log in and return
        the IPartitionLog now serving the partition."""

    def abort_move(move):
        """Give the move up; the log stays where it was."""

    def moves():
        """``{(topic, partition): move}`` of the moves in progress."""


class INewLogBatches(ILogStorage):
    """A storage that makes many new logs durable together: their files
    created off the reactor, then one sync (pluglog.storage.batchsync). The
    broker opens a big CreateTopics' logs this way and answers it after
    :meth:`sync_new_logs` returned (pluglog.broker.log_opening)."""

    def plan_new_logs(keys):
        """On the reactor: choose where the new logs ``keys`` ((topic,
        partition)s) go, as ``open_log`` will; returns their directories."""

    def prepare_new_logs(directories, files):
        """Any thread: create those directories with their first segment's
        files and ``files`` ({name: bytes}), without syncs; returns the
        directories it made (not those that existed). OSError."""

    def discard_new_logs(directories):
        """Any thread: remove directories ``prepare_new_logs`` made that were
        never opened (their topic was deleted meanwhile)."""

    def sync_new_logs(directories):
        """Any thread: make new logs' directories and files durable.
        KafkaStorageError naming what failed."""


class IScheduledFlushStorage(ILogStorage):
    """A storage that runs the flush scheduler's pass itself, visiting only
    the logs that can be due (unflushed records and a finite ``flush.ms``)
    instead of every partition each ``log.flush.scheduler.interval.ms``."""

    def flush_due_logs(now_ms):
        """Run ``maybe_flush(now_ms)`` on every log that may be due; returns
        how many flushed."""


class ISlicedFlushStorage(ILogStorage):
    """A storage whose checkpoint flush (``flush_all``) can be prepared over
    several reactor turns: the broker's checkpoint (pluglog.broker.checkpoint)
    runs the preparation a few milliseconds per turn, then ``flush_all``."""

    closed = Attribute("True once ``close`` ran (a running preparation stops)")

    def flush_preparation(min_logs):
        """None when fewer than ``min_logs`` logs have anything to flush;
        else an iterator whose every step writes one log's part of the next
        flush without syncing (index entries, leader-epoch files), for the
        caller to run on the reactor between other work. ``flush_all`` then
        syncs it (it stays correct whatever ran in between: appends,
        truncations, deletions, flushes)."""


class IBackgroundFlushStorage(ILogStorage):
    """A storage whose checkpoint flush can sync in a thread: the broker's
    checkpoint (pluglog.broker.checkpoint) calls ``begin_background_flush``
    on the reactor, runs the result's ``capture()`` steps there, its
    ``sync()`` in a pool thread, its ``finish(result)`` steps on the
    reactor, then ``write_checkpoints()`` (or ``flush_all()`` when
    ``complete`` is False)."""

    def begin_background_flush():
        """None when the storage cannot sync off the reactor (the broker then
        calls ``flush_all``); else an object with ``capture()`` (the reactor:
        an iterator, each step a log writing what it has and handing it
        over), ``sync()`` (any thread: syncs everything written so far,
        returns what failed), ``finish(result)`` (the reactor: an iterator,
        each step a log's recovery point moving to its log end at the
        capture, where the sync succeeded), ``complete`` (after finish:
        False when ``flush_all`` must flush the rest) and ``abandon()`` (a
        stop: the logs take back what they handed over). Appends,
        truncations, deletions and flushes may run between any two steps."""

    def write_checkpoints():
        """Write the recovery-point and log-start-offset checkpoint files."""


class IRemoteLogStorage(Interface):
    """The remote tier's object store (KIP-405's RemoteStorageManager).

    Chosen by ``remote.log.storage.manager.class.name`` among the providers
    of ``pluglog_register_remote_storage`` (built-in: ``s3``,
    ``filesystem``); ``factory(config, reactor)`` reads its own keys under
    ``rsm.config.`` (:meth:`pluglog.config.BrokerConfig.rsm_config`).
    Unlike every other interface here, the methods BLOCK: the broker calls
    them in its remote-storage thread pools, never on the reactor thread.
    Errors are :class:`pluglog.errors.RemoteStorageError` with one line.

    ``segment`` arguments are
    :class:`pluglog.storage.remote.metadata.RemoteSegment` values: the
    provider names objects from ``segment.topic``, ``segment.partition``,
    ``segment.base_offset`` and ``segment.segment_id`` (unique per upload,
    so a retried or duplicated upload never overwrites a visible one).
    """

    def check():
        """Verify at start-up that the store is reachable and writable
        (bucket exists, credentials work); raise RemoteStorageError."""

    def copy_segment(segment, files):
        """Upload one closed segment. ``files`` maps each part to a local
        path or to bytes: ``log`` (the records), ``index``, ``timeindex``,
        ``txnindex`` (may be absent) and ``leader_epoch`` (the checkpoint
        slice, bytes). Returns nothing once every part is stored."""

    def fetch(segment, part, start, end):
        """Return bytes ``[start, end)`` of the segment's ``part`` (``end``
        None: to the end of the object)."""

    def delete_segment(segment):
        """Delete every object of the segment (missing objects are fine)."""
