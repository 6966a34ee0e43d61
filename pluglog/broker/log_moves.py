"""AlterReplicaLogDirs moves, one at a time per broker, without stalling
the reactor (Kafka's ReplicaAlterLogDirsThread).

A move request is answered once the move is queued. The running move's
copy rounds (:meth:`pluglog.interfaces.ILogDirMoves.copy_step`) run in the
reactor's thread pool while the partition keeps taking appends; when a
round leaves less than :data:`FINAL_BYTES` to copy (or after
:data:`MAX_ROUNDS`), the last step runs on the reactor: nothing appends in
between, so it copies the tail appended since the last round and swaps the
future log in; no acknowledged record is left behind or copied twice.
The move is given up (its future dir removed) when the partition goes away,
its log goes offline or a dir fails; the broker stopping leaves the future
dir, which start-up removes (storage.logdir_move).

While a move runs, DescribeLogDirs lists the future replica under its
destination (``is_future_key``), as Kafka does.
"""

from collections import OrderedDict

from twisted.internet import threads
from twisted.logger import Logger

from pluglog.errors import (
    KAFKA_STORAGE_ERROR,
    LOG_DIR_NOT_FOUND,
    NONE,
    REPLICA_NOT_AVAILABLE,
    KafkaStorageError,
)
from pluglog.interfaces import ILogDirMoves, ILogDirStorage, ITieredLog
from pluglog.replication.epochs import LeaderEpochCache

log = Logger()

#: what is left for the reactor-side last step, at most (bytes)
FINAL_BYTES = 1 << 20
#: copy rounds before the last step is taken whatever is left
MAX_ROUNDS = 20
_UNLIMITED = (1 << 63) - 1


class LogDirMover:
    """The broker's queue of AlterReplicaLogDirs moves."""

    def __init__(self, broker):
        self.broker = broker
        #: (topic, partition) -> destination, in request order
        self.queued = OrderedDict()
        self.current = None
        self.stopped = False

    @property
    def storage(self):
        return self.broker.storage

    def request(self, topic, index, destination):
        """Queue a move; its error code (NONE: queued, running or not needed)."""
        key = (topic, index)
        part = self.broker.partitions.get(key)
        if part is None:
            return REPLICA_NOT_AVAILABLE
        storage = self.storage
        if not ILogDirStorage.providedBy(storage) or destination not in storage.data_dirs:
            return LOG_DIR_NOT_FOUND
        if part.log_offline or destination in storage.failed_dirs():
            return KAFKA_STORAGE_ERROR
        current = self.current
        if current is not None and current.key == key:
            self.queued.pop(key, None)
            if current.destination != destination:
                # Kafka replaces the future replica: this one stops at its next round.
                self.queued[key] = destination
            return NONE
        if storage.dir_of(topic, index) == destination:
            self.queued.pop(key, None)
            return NONE
        if not ILogDirMoves.providedBy(storage):
            return self._move_at_once(part, destination)
        self.queued[key] = destination
        self.broker.reactor.callLater(0, self._next)
        return NONE

    def futures(self):
        """``{(topic, partition): (destination, bytes copied, offset lag)}``
        of the move in progress (its future log). The lag is an upper bound:
        the log end minus the start of the first segment not copied whole."""
        move = self.current
        if move is None:
            return {}
        current = move.log
        copied = current.log_end_offset
        with move.lock:
            done_by_name = dict(move.copied)
        for segment in getattr(current, "segments", ()):
            done = done_by_name.get(f"{segment.base_offset:020d}.log")
            if done is None or done[1] < segment.size:
                copied = segment.base_offset
                break
        lag = max(current.log_end_offset - copied, 0)
        return {move.key: (move.destination, move.copied_bytes(), lag)}

    def stop(self):
        self.stopped = True
        self.queued.clear()
        if self.current is not None:
            self.current.cancelled = True  # the thread's round ends at its next chunk

    # -- the running move ----------------------------------------------------------

    def _next(self):
        if self.current is not None or self.stopped:
            return
        while self.queued:
            key, destination = self.queued.popitem(last=False)
            part = self.broker.partitions.get(key)
            if part is None or part.log_offline:
                continue
            rate = self.broker.config.replica_alter_log_dirs_io_max_bytes_per_second
            rate = 0 if rate >= _UNLIMITED else rate
            try:
                move = self.storage.begin_move(*key, destination, rate)
            except KafkaStorageError as exc:
                self._failed_to_move(key, destination, exc)
                continue
            if move is None:
                continue  # already there
            self.current = move
            log.info("moving {key} to log dir {dest}", key=key, dest=destination)
            self._round(move)
            return

    def _round(self, move):
        d = threads.deferToThreadPool(
            self.broker.reactor,
            self.broker.reactor.getThreadPool(),
            self.storage.copy_step,
            move,
        )
        d.addCallbacks(self._copied, self._round_failed, callbackArgs=(move,), errbackArgs=(move,))

    def _still_wanted(self, move):
        part = self.broker.partitions.get(move.key)
        return (
            not self.stopped
            and part is not None
            and not part.log_offline
            and part.log is move.log
            and self.queued.get(move.key, move.destination) == move.destination
            and move.destination not in self.storage.failed_dirs()
        )

    def _copied(self, _written, move):
        if not self._still_wanted(move):
            self._give_up(move, "the partition changed meanwhile")
            return
        move.rounds += 1
        if self.storage.move_pending_bytes(move) > FINAL_BYTES and move.rounds < MAX_ROUNDS:
            self._round(move)
            return
        part = self.broker.partitions[move.key]
        try:
            moved = self.storage.finish_move(move)
        except (KafkaStorageError, OSError) as exc:
            self.storage.abort_move(move)
            self._failed_to_move(move.key, move.destination, exc)
            self._done()
            return
        self.queued.pop(move.key, None)
        _switch(part, moved)
        log.info(
            "moved {topic}-{index} to log dir {dest} ({rounds} copy round(s))",
            topic=move.key[0],
            index=move.key[1],
            dest=move.destination,
            rounds=move.rounds,
        )
        self._done()

    def _round_failed(self, failure, move):
        if self.stopped:
            self.current = None
            return None
        self.storage.abort_move(move)
        if failure.check(KafkaStorageError, OSError) or move.cancelled:
            self._failed_to_move(move.key, move.destination, failure.value)
        else:
            log.failure("moving {key} failed", failure, key=move.key)
        self._done()
        return None

    def _give_up(self, move, why):
        self.storage.abort_move(move)
        log.info("move of {key} given up: {why}", key=move.key, why=why)
        self._done()

    def _done(self):
        self.current = None
        self._next()

    def _failed_to_move(self, key, destination, exc):
        log.error(
            "moving {topic}-{index} to {dest} failed: {exc}",
            topic=key[0],
            index=key[1],
            dest=destination,
            exc=exc,
        )

    def _move_at_once(self, part, destination):
        """A storage without background moves: the whole move now."""
        try:
            moved = self.storage.move_log(part.topic, part.index, destination)
        except (KafkaStorageError, OSError) as exc:
            self._failed_to_move((part.topic, part.index), destination, exc)
            return KAFKA_STORAGE_ERROR
        _switch(part, moved)
        return NONE


def _switch(part, moved):
    """The Partition serves the moved log from now on."""
    if moved is part.log:
        return
    if ITieredLog.providedBy(moved) and ITieredLog.providedBy(part.log):
        # Offsets below the local log start are read from the remote tier.
        moved.remote_tier = part.log.remote_tier
    part.log = moved
    part.epochs = LeaderEpochCache.for_log(moved)
