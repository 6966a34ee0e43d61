"""The remote log manager: uploads closed segments, applies local and remote retention.

One :class:`RemoteLogManager` per broker (a service that
:mod:`pluglog.builtin` adds when ``remote.log.storage.system.enable`` is
true). Every ``remote.log.manager.task.interval.ms`` it walks the hosted
partitions of topics with ``remote.storage.enable``:

* it attaches a :class:`~pluglog.storage.remote.tier.RemoteTier` to each
  one's log, filled from ``__remote_log_metadata``
  (:mod:`.metadata_store`) once that is loaded; from then on the log serves
  reads below its local start from the remote tier, and retention deletes
  only uploaded segments;
* on a partition this broker leads, it first finishes what a crash
  interrupted (a ``COPY_SEGMENT_STARTED`` or ``DELETE_SEGMENT_STARTED``
  segment: its objects are deleted and it is tombstoned), then uploads, one
  after the other, the closed segments wholly below the high watermark and
  the last stable offset, then deletes remote segments beyond the topic's
  total retention (``retention.ms``, ``retention.bytes``) or below a
  DeleteRecords start;
* on every hosted partition it deletes uploaded local segments beyond
  ``local.retention.ms``/``local.retention.bytes``.

Which segment goes up next and the upload call are :mod:`.copier`'s, what
retention deletes is :mod:`.retention`'s; this module holds the state
(tiers, loaded metadata, leadership) and writes the metadata records.

Provider calls run in two bounded thread pools (uploads and deletions:
``remote.log.manager.thread.pool.size``; reads:
``remote.log.reader.threads``), uploads paced by the copy quota
(``remote.log.manager.copy.max.bytes.per.second``, :class:`.copier.CopyQuota`);
the reactor thread only writes metadata
records and moves state, so produce and fetch never wait on the store. A
store that fails is logged once per partition when it starts and when it
recovers; nothing local is deleted meanwhile.
"""

from twisted.application import service
from twisted.internet import defer, task
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from pluglog.errors import RemoteStorageError
from pluglog.interfaces import ITieredLog
from pluglog.retention import DeleteRetentionPolicy
from pluglog.storage.remote.metadata import (
    COPY_SEGMENT_FINISHED,
    COPY_SEGMENT_STARTED,
    DELETE_SEGMENT_FINISHED,
    DELETE_SEGMENT_STARTED,
    RemoteSegment,
    epochs_in_range,
)
from pluglog.storage.remote.tier import ChunkCache, RemoteTier
from pluglog.tiered.copier import CopyQuota, copy_segment, eligible_segment, segment_files
from pluglog.tiered.metadata_store import METADATA_TOPIC, MetadataStore, PartitionMetadata
from pluglog.tiered.retention import (
    apply_local_retention,
    behind_local_retention,
    expired_segments,
)
from pluglog.tiered.upload_process import BACKGROUND, CATCH_UP, ProcessUploader

log = Logger()


def make_remote_log_manager(broker):
    """Build the provider named by remote.log.storage.manager.class.name,
    check the store is reachable (a one-line start-up error otherwise) and
    return the manager service."""
    config = broker.config
    name = config.remote_log_storage_manager_class_name.strip()
    if not name:
        known = ", ".join(broker.registry.names("remote_storage"))
        raise RemoteStorageError(
            "remote.log.storage.system.enable is true but "
            f"remote.log.storage.manager.class.name is not set (available: {known})"
        )
    storage = broker.registry.build("remote_storage", name, config, broker.reactor)
    storage.check()
    # The inter-broker connection (TLS, SASL as configured), for metadata
    # partitions another broker leads; deferred like the broker's own import.
    from pluglog.replication.peer import connect

    uploaders = None
    if config.remote_log_copy_processes:
        uploaders = {
            priority: ProcessUploader(
                name, config, config.remote_log_copy_processes, priority=priority
            )
            for priority in (BACKGROUND, CATCH_UP)
        }
    broker.remote_log_manager = RemoteLogManager(broker, storage, connect, uploaders)
    return broker.remote_log_manager


class RemoteLogManager(service.Service):
    """Tiered storage's periodic work for one broker (see the module doc)."""

    name = "remote-log-manager"

    def __init__(self, broker, storage, connect=None, uploaders=None):
        config = broker.config
        self.broker = broker
        self.reactor = broker.reactor
        self.storage = storage
        #: what copies segments, by priority: child processes
        #: (upload_process; catch-up ones once uploads hold local data
        #: beyond local retention), or the provider itself in the copier threads
        self.uploaders = uploaders or {BACKGROUND: storage, CATCH_UP: storage}
        #: Copies made at catch-up priority (a metric).
        self.catch_up_copies = 0
        self.node_id = broker.node_id
        self.store = MetadataStore(broker, connect)
        self.cache = ChunkCache(config.remote_log_index_file_cache_total_size_bytes)
        self.copier_pool = ThreadPool(0, config.remote_log_manager_thread_pool_size, "pluglog-rlm")
        self.reader_pool = ThreadPool(0, config.remote_log_reader_threads, "pluglog-rlm-reader")
        self.interval_s = config.remote_log_manager_task_interval_ms / 1000.0
        self.quota = CopyQuota(config.remote_log_manager_copy_max_bytes_per_second)
        #: (topic, partition) -> RemoteTier
        self.tiers = {}
        #: metadata partition -> {(topic, partition): PartitionMetadata}, once loaded
        self.metadata = {}
        self._loading = set()
        #: (topic, partition) -> the leader epoch whose metadata this broker
        #: read when it became leader (it uploads only in that epoch)
        self._led = {}
        self._busy = set()
        self._failing = set()
        self._loop = None
        self._retention = DeleteRetentionPolicy()
        #: Totals since start (pluglog.metrics.tiered reads them on scrape).
        self.segments_copied = 0
        self.bytes_copied = 0
        self.segments_deleted = 0
        self.copy_failures = 0
        #: Remote reads (reader pool calls): count, errors, seconds in all.
        self.remote_reads = 0
        self.remote_read_errors = 0
        self.remote_read_seconds = 0.0

    # -- service ------------------------------------------------------------------

    def startService(self):
        super().startService()
        self.copier_pool.start()
        self.reader_pool.start()
        self.broker.coordinator.add_listener(self._cluster_event)
        self.run_once()
        self._loop = task.LoopingCall(self._guarded)
        self._loop.clock = self.reactor
        self._loop.start(self.interval_s, now=False)

    def stopService(self):
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        for tier in self.tiers.values():
            tier.on_ready = None
        self.quota.stop()
        self.copier_pool.stop()
        for uploader in self.uploaders.values():
            if uploader is not self.storage:
                uploader.stop()
        self.reader_pool.stop()
        self.store.close()
        return super().stopService()

    def _guarded(self):
        try:
            self.run_once()
        except Exception:
            log.failure("remote log manager pass failed")

    def _in_thread(self, pool, function, *args):
        return deferToThreadPool(self.reactor, pool, function, *args)

    def _remote_read(self, function, *args):
        """A tier's fetch in the reader pool, timed (the remote fetch
        latency the metrics report: the reactor's clock, queueing included)."""
        started = self.reactor.seconds()

        def done(result):
            self.remote_reads += 1
            self.remote_read_seconds += self.reactor.seconds() - started
            if isinstance(result, Failure):
                self.remote_read_errors += 1
            return result

        return self._in_thread(self.reader_pool, function, *args).addBoth(done)

    def _cluster_event(self, event, payload):
        if not self.running:
            return
        if event == "deleted":
            self._topic_deleted(getattr(payload, "name", payload))
        elif event in ("created", "changed"):
            # Attached at once (the broker's listener has opened the logs):
            # retention must never see a tiered log without its tier.
            name = getattr(payload, "name", None)
            for (topic, _index), part in list(self.broker.partitions.items()):
                if topic == name and part.config.remote_storage_enable:
                    if ITieredLog.providedBy(part.log):
                        self._attach(part)

    # -- the periodic pass ------------------------------------------------------------

    def run_once(self):
        """One pass over the hosted partitions (the task interval's work)."""
        if not self.running:
            return
        if self.broker.num_partitions(METADATA_TOPIC) is None:
            if any(p.config.remote_storage_enable for p in self.broker.partitions.values()):
                self.store.ensure_topic().addCallbacks(
                    lambda _: self.reactor.callLater(0.05, self._guarded),
                    lambda f: log.warn(
                        "creating {t} failed: {e}", t=METADATA_TOPIC, e=f.getErrorMessage()
                    ),
                )
            # Reads below the local start wait (not OFFSET_OUT_OF_RANGE) until loaded.
            for part in list(self.broker.partitions.values()):
                if part.config.remote_storage_enable and ITieredLog.providedBy(part.log):
                    self._attach(part)
            return
        now = self.broker.now_ms()
        for part in list(self.broker.partitions.values()):
            if not part.config.remote_storage_enable or not ITieredLog.providedBy(part.log):
                continue
            tier = self._attach(part)
            key = (part.topic, part.index)
            index = self.store.partition_of(*key)
            loaded = self.metadata.get(index)
            if loaded is None:
                self._load(index)
                continue
            meta = loaded.setdefault(key, PartitionMetadata())
            if not tier.loaded:
                self._install(tier, meta)
            apply_local_retention(part, now, self._retention)
            if not part.is_leader:
                continue
            if self._led.get(key) != part.leader_epoch:
                # Newly led (a failover, a restart): the metadata the previous
                # leader wrote is read again before this broker uploads.
                self._load(index)
            elif key not in self._busy:
                self._busy.add(key)
                d = self._lead(part, tier, meta)
                d.addErrback(self._lead_failed, key)
                d.addBoth(lambda _, key=key: self._busy.discard(key))

    def _attach(self, part):
        key = (part.topic, part.index)
        tier = self.tiers.get(key)
        if tier is None:
            tier = self.tiers[key] = RemoteTier(
                part.topic,
                part.index,
                self.storage,
                self.cache,
                self._remote_read,
            )
            tier.on_ready = lambda key=key: self._wake(key)
            tier.on_start_moved = lambda offset, key=key: self._start_moved(key, offset)
        if part.log.remote_tier is not tier:
            part.log.remote_tier = tier
        return tier

    def _wake(self, key):
        part = self.broker.partitions.get(key)
        if part is not None:
            part.data_ready()

    def _install(self, tier, meta):
        start = max(meta.start_offset, tier.start_offset)
        tier.set_segments(meta.in_state(COPY_SEGMENT_FINISHED), start)
        tier.loaded = True

    def _load(self, index):
        """(Re)read metadata partition ``index`` from its local replica,
        which must be its leader or in its ISR (so it holds every state a
        previous leader had acknowledged)."""
        if index in self._loading:
            return
        part = self.broker.partitions.get((METADATA_TOPIC, index))
        if part is not None and (part.is_leader or self.node_id in part.isr):
            reading = self.store.load(part)
        else:
            # No in-sync replica here: read it from its leader, as a consumer.
            reading = self.store.load_remote(index)
        self._loading.add(index)

        def loaded(found):
            self._loading.discard(index)
            self._merge(index, found)
            log.info(
                "loaded the remote segments of {n} partition(s) from {t}-{i}",
                n=len(found),
                t=METADATA_TOPIC,
                i=index,
            )
            self.run_once()

        def failed(failure):
            self._loading.discard(index)
            # One line: retried on the next pass (a leader may be moving).
            why = failure.getErrorMessage()
            log.warn("loading {t}-{i} failed: {e}", t=METADATA_TOPIC, i=index, e=why)

        reading.addCallbacks(loaded, failed)

    def _merge(self, index, found):
        """Install a fresh read of metadata partition ``index``. A partition
        this broker has kept leading keeps its in-memory state (it is the
        only writer and has applied every state it wrote); every other one
        takes what was read, and those led now are marked as loaded in their
        current leader epoch."""
        old = self.metadata.get(index, {})
        merged = {}
        for (topic, partition), part in list(self.broker.partitions.items()):
            if topic == METADATA_TOPIC or self.store.partition_of(topic, partition) != index:
                continue
            key = (topic, partition)
            if part.is_leader and self._led.get(key) == part.leader_epoch and key in old:
                merged[key] = old[key]
            elif part.is_leader:
                self._led[key] = part.leader_epoch
        for key, meta in found.items():
            merged.setdefault(key, meta)
        self.metadata[index] = merged
        for key, meta in merged.items():
            tier = self.tiers.get(key)
            if tier is not None:
                self._install(tier, meta)

    # -- the leader's work ----------------------------------------------------------------

    @defer.inlineCallbacks
    def _lead(self, part, tier, meta):
        key = (part.topic, part.index)
        epoch = part.leader_epoch
        # What a crash (or a failed store) left half done goes first: a
        # started copy is never visible, its objects are deleted.
        for orphan in meta.in_state(COPY_SEGMENT_STARTED, DELETE_SEGMENT_STARTED):
            yield self._delete_remote(orphan, meta, tier)
        while self.running and part.is_leader and part.leader_epoch == epoch:
            segment = eligible_segment(part, tier)
            if segment is None:
                break
            yield self._upload(part, tier, meta, segment, epoch)
        for segment in expired_segments(part, tier, self.broker.now_ms()):
            if segment.next_offset > tier.start_offset:
                tier.start_offset = segment.next_offset
                yield self.store.write_start(part.topic, part.index, segment.next_offset)
                meta.start_offset = segment.next_offset
            yield self._delete_remote(segment, meta, tier)
        if key in self._failing:
            self._failing.discard(key)
            log.info("remote storage of {t}-{i} works again", t=part.topic, i=part.index)

    def _lead_failed(self, failure, key):
        self.copy_failures += 1
        if key not in self._failing:
            self._failing.add(key)
            log.warn(
                "remote storage of {t}-{i} failed (retried every pass, local data kept): {e}",
                t=key[0],
                i=key[1],
                e=failure.getErrorMessage(),
            )

    @defer.inlineCallbacks
    def _upload(self, part, tier, meta, local, epoch):
        remote = RemoteSegment.new(
            part.topic,
            part.index,
            local.base_offset,
            local.next_offset - 1,
            local.largest_timestamp,
            local.size,
            epochs_in_range(part.epochs.entries, local.base_offset, local.next_offset),
            local.txn_index.entries,
        )
        started = remote.with_state(COPY_SEGMENT_STARTED, self.broker.now_ms(), self.node_id)
        yield self.store.write(started)
        meta.apply(started)
        files = segment_files(local, started)
        priority = BACKGROUND
        if behind_local_retention(part, self.broker.now_ms(), self._retention):
            priority = CATCH_UP
            self.catch_up_copies += 1
        uploader = self.uploaders[priority]
        yield self._in_thread(self.copier_pool, copy_segment, uploader, started, files, self.quota)
        if not (part.is_leader and part.leader_epoch == epoch):
            # Leadership moved during the copy: the new leader owns the
            # partition's metadata now and deletes this copy as unfinished.
            return
        finished = started.with_state(COPY_SEGMENT_FINISHED, self.broker.now_ms(), self.node_id)
        yield self.store.write(finished)
        meta.apply(finished)
        tier.set_segments(meta.in_state(COPY_SEGMENT_FINISHED), tier.start_offset)
        self.segments_copied += 1
        self.bytes_copied += finished.size_bytes

    @defer.inlineCallbacks
    def _delete_remote(self, segment, meta, tier):
        """DELETE_SEGMENT_STARTED (no longer readable), the objects, then
        DELETE_SEGMENT_FINISHED (a tombstone)."""
        if segment.state != DELETE_SEGMENT_STARTED:
            now = self.broker.now_ms()
            segment = segment.with_state(DELETE_SEGMENT_STARTED, now, self.node_id)
            yield self.store.write(segment)
            meta.apply(segment)
            if tier is not None:
                tier.set_segments(meta.in_state(COPY_SEGMENT_FINISHED), tier.start_offset)
        self.cache.drop_segment(segment.segment_id)
        yield self._in_thread(self.copier_pool, self.storage.delete_segment, segment)
        done = segment.with_state(DELETE_SEGMENT_FINISHED, self.broker.now_ms(), self.node_id)
        yield self.store.write(done)
        meta.apply(done)
        self.segments_deleted += 1

    # -- DeleteRecords and topic deletion ---------------------------------------------------

    def _start_moved(self, key, offset):
        """DeleteRecords moved the remote start: record it (the next pass
        deletes the segments wholly below it)."""
        loaded = self.metadata.get(self.store.partition_of(*key))
        if loaded is not None:
            meta = loaded.setdefault(key, PartitionMetadata())
            meta.start_offset = max(meta.start_offset, offset)
        self.store.write_start(key[0], key[1], offset).addErrback(
            lambda f: log.warn(
                "recording the remote start {o} of {t}-{i} failed: {e}",
                o=offset,
                t=key[0],
                i=key[1],
                e=f.getErrorMessage(),
            )
        )

    def _topic_deleted(self, topic):
        """A deleted topic's remote segments go too (a topic made again
        under the name must not see them)."""
        for loaded in self.metadata.values():
            for key in [k for k in loaded if k[0] == topic]:
                meta = loaded.pop(key)
                self.tiers.pop(key, None)
                if self.store.local_partition(*key, leader=True) is None:
                    continue
                doomed = PartitionMetadata()
                for segment in list(meta.segments.values()):
                    d = self._delete_remote(segment, doomed, None)
                    d.addErrback(
                        lambda f, s=segment: log.warn(
                            "deleting remote segment {s} failed: {e}",
                            s=s.object_key("log"),
                            e=f.getErrorMessage(),
                        )
                    )
