"""Opening new partitions' logs without stalling the broker's other clients.

One CreateTopics of 10,000 partitions used to open every log in one reactor
turn, each with an atomic write of its ``partition.metadata`` (two fsyncs):
22-93 s in which no other client was served (bench/RESULTS.md, issue 24).
:class:`NewLogs` instead

- has a pool thread create the new logs' files (``storage.prepare_new_logs``,
  :data:`CHUNK` at a time, one chunk ahead of the reactor; fewer than
  :data:`PREPARE_MIN` are left to their open, in the request's turn);
- opens the logs in slices of at most :data:`SLICE_SECONDS` of the reactor
  each, so other clients' requests are served in between. A partition not
  opened yet answers NOT_LEADER_OR_FOLLOWER, which clients retry, as a
  Kafka broker does before its LeaderAndIsr for the partition arrives;
- writes nothing with fsyncs, and once all are open makes the logs durable
  together in a pool thread (``storage.sync_new_logs``: one syncfs per log
  dir, an fsync per file where that does not apply);
- lets CreateTopics / CreatePartitions answer only then (:meth:`wait`); a
  failed sync answers KAFKA_STORAGE_ERROR naming the file.

A crash in between leaves logs that open as new ones: empty segments, a
missing or damaged ``partition.metadata`` rewritten with the topic's id
(:mod:`pluglog.broker.topic_ids`). At start-up the broker opens its logs at
once (nothing is served yet). A reactor without a thread pool (a test's
clock) gets everything at once, synced inline.
"""

import time

from twisted.internet import defer, threads
from twisted.logger import Logger
from twisted.python.failure import Failure

from pluglog.broker import topic_ids
from pluglog.errors import KafkaStorageError
from pluglog.interfaces import IDirectoryLog, INewLogBatches

log = Logger()

#: the longest the reactor opens new logs before serving others again
SLICE_SECONDS = 0.02
#: new logs whose files a pool thread creates in one go
CHUNK = 500
#: fewer new logs than this are created by their open, in the request's
#: turn: a thread round trip would only delay them
PREPARE_MIN = 16


class _Creation:
    """The new logs of one topic event, and who waits for them."""

    def __init__(self, name, indexes, previous):
        self.name = name
        self.indexes = indexes
        self.next = 0
        self.directories = []
        #: an earlier creation of the same topic still running
        self.previous = previous
        #: None while running, then True or the Failure
        self.result = None
        self.waiters = []
        self.call = None
        #: the topic was deleted: open nothing more
        self.cancelled = False
        #: fires when this creation stops touching files (its sync may run on)
        self.ran = defer.Deferred()
        #: directories a pool thread made for it
        self.prepared = []

    def wait(self):
        if self.result is None:
            d = defer.Deferred()
            self.waiters.append(d)
            return d
        return defer.succeed(None) if self.result is True else defer.fail(self.result)

    def finish(self, result):
        if self.result is not None:
            return
        self.result = result
        waiters, self.waiters = self.waiters, []
        for d in waiters:
            if result is True:
                d.callback(None)
            else:
                d.errback(result)


class NewLogs:
    """Opens the logs of partitions created while the broker serves."""

    def __init__(self, broker):
        self.broker = broker
        #: topic -> its latest creation, until it is durable (or answered)
        self._creations = {}
        #: topic -> its latest creation still opening logs (deleted or not):
        #: the next one of the same name starts after it, so two never make
        #: the same partition's files at once
        self._opening = {}
        self._stopped = False

    def _threaded(self):
        return hasattr(self.broker.reactor, "getThreadPool")

    def open(self, name, indexes):
        """Open the logs of ``name``'s partitions ``indexes`` (in slices),
        then sync them; :meth:`wait` tells when that is done."""
        creation = _Creation(name, list(indexes), self._creations.get(name))
        self._creations[name] = creation
        before = self._opening.get(name)
        self._opening[name] = creation
        if before is None:
            self._start(creation)
        else:
            # Its partitions opened meanwhile are skipped (already served).
            before.ran.addBoth(lambda _: self._start(creation))

    def _start(self, creation):
        d = self._run(creation)
        d.addErrback(self._failed, creation)
        d.addBoth(self._ran, creation)

    def _ran(self, _result, creation):
        if self._opening.get(creation.name) is creation:
            del self._opening[creation.name]
        creation.ran.callback(None)

    def wait(self, name):
        """A Deferred firing when the logs of ``name`` opened so far are
        durable (at once if none are being made); KafkaStorageError if
        their sync failed."""
        creation = self._creations.get(name)
        if creation is None:
            return defer.succeed(None)
        if creation.result is not None and self._creations.get(name) is creation:
            del self._creations[name]  # a failure is answered once
        return creation.wait()

    def forget(self, name):
        """The topic was deleted: nothing more to open or wait for."""
        # A running creation stops at its next slice and syncs what it
        # opened; its waiters still get that result.
        creation = self._creations.pop(name, None)
        if creation is not None:
            creation.cancelled = True

    def stop(self):
        """The broker stops: open nothing more (the storage's close syncs
        what was written)."""
        self._stopped = True
        for creation in list(self._creations.values()):
            if creation.call is not None and creation.call.active():
                creation.call.cancel()
            creation.finish(Failure(KafkaStorageError("the broker is stopping")))
        self._creations.clear()

    @defer.inlineCallbacks
    def _run(self, creation):
        """Chunk by chunk: a pool thread creates the files of the next chunk
        while the reactor opens the logs of this one, in slices."""
        indexes = creation.indexes
        chunks = [indexes[i : i + CHUNK] for i in range(0, len(indexes), CHUNK)]
        ahead = self._prepare(creation, chunks[0]) if chunks else None
        for number, chunk in enumerate(chunks):
            yield ahead
            ahead = None
            if number + 1 < len(chunks):
                ahead = self._prepare(creation, chunks[number + 1])
            if creation.cancelled or self._stopped:
                break
            yield self._open_slices(creation, chunk)
        if ahead is not None:
            yield ahead  # the thread is done with the files before the next creation
        if creation.cancelled and not self._stopped:
            yield self._discard(creation)
        if not self._stopped:
            self._sync(creation)

    def _prepare(self, creation, chunk):
        """Create the files of ``chunk``'s new logs in a pool thread (the
        reactor then opens them instead of creating them). A failure is
        logged; opening them on the reactor meets it again and takes the
        partition offline, and the final sync reports it."""
        broker = self.broker
        storage = broker.storage
        meta = broker.coordinator.topics().get(creation.name)
        if (
            not self._threaded()
            or len(chunk) < PREPARE_MIN
            or creation.cancelled
            or meta is None
            or not INewLogBatches.providedBy(storage)
        ):
            return defer.succeed(None)
        node = broker.node_id
        hosted = [i for i in chunk if i < meta.num_partitions and node in meta.replicas(i)]
        paths = storage.plan_new_logs([(creation.name, i) for i in hosted])
        if not paths:
            return defer.succeed(None)
        reactor = broker.reactor
        files = topic_ids.metadata_files(meta)
        d = threads.deferToThreadPool(
            reactor, reactor.getThreadPool(), storage.prepare_new_logs, paths, files
        )

        def failed(failure):
            log.warn(
                "creating the files of new partitions of {topic} failed: {reason}",
                topic=creation.name,
                reason=str(failure.value),
            )

        return d.addCallbacks(creation.prepared.extend, failed)

    def _discard(self, creation):
        """The topic was deleted: remove the directories made for it that
        were never opened (nothing else would; opened ones were deleted
        with the topic)."""
        served = {part.log.directory for part in self._served(creation.name)}
        unopened = [path for path in creation.prepared if path not in served]
        if not unopened:
            return defer.succeed(None)
        reactor = self.broker.reactor
        storage = self.broker.storage
        d = threads.deferToThreadPool(
            reactor, reactor.getThreadPool(), storage.discard_new_logs, unopened
        )
        return d.addErrback(lambda failure: log.warn("{reason}", reason=str(failure.value)))

    def _served(self, name):
        return [
            part
            for (topic, _index), part in self.broker.partitions.items()
            if topic == name and IDirectoryLog.providedBy(part.log)
        ]

    def _open_slices(self, creation, chunk):
        """Open ``chunk``'s logs, at most SLICE_SECONDS per reactor turn."""
        done = defer.Deferred()
        self._step(creation, iter(chunk), done)
        return done

    def _step(self, creation, chunk, done):
        creation.call = None
        if self._stopped:
            return
        broker = self.broker
        meta = None if creation.cancelled else broker.coordinator.topics().get(creation.name)
        deadline = time.monotonic() + SLICE_SECONDS
        threaded = self._threaded()
        if meta is not None:
            for index in chunk:
                directory = broker.open_new_partition(meta, index, sync=False)
                if directory is not None:
                    creation.directories.append(directory)
                if threaded and time.monotonic() >= deadline:
                    creation.call = broker.reactor.callLater(0, self._step, creation, chunk, done)
                    return
        done.callback(None)

    def _sync(self, creation):
        storage = self.broker.storage
        directories, creation.directories = creation.directories, []
        if not INewLogBatches.providedBy(storage) or not directories:
            d = defer.succeed(None)
        elif self._threaded():
            reactor = self.broker.reactor
            d = threads.deferToThreadPool(
                reactor, reactor.getThreadPool(), storage.sync_new_logs, directories
            )
        else:
            d = defer.maybeDeferred(storage.sync_new_logs, directories)
        if creation.previous is not None:
            previous = creation.previous.wait()
            d = defer.gatherResults([d, previous], consumeErrors=True)
            d.addErrback(lambda failure: failure.value.subFailure)
        d.addCallbacks(lambda _: self._done(creation, True), self._failed, errbackArgs=(creation,))

    def _failed(self, failure, creation):
        if not failure.check(KafkaStorageError):
            failure = Failure(KafkaStorageError(f"cannot make the new logs: {failure.value}"))
        log.error(
            "new partitions of {topic} could not be made durable: {reason}",
            topic=creation.name,
            reason=str(failure.value),
        )
        self._done(creation, failure)

    def _done(self, creation, result):
        creation.finish(result)
        if result is True and self._creations.get(creation.name) is creation:
            del self._creations[creation.name]
