"""Kafka's text checkpoint files: ``{(topic, partition): offset}``.

The storage's ``recovery-point-offset-checkpoint`` and
``log-start-offset-checkpoint`` and the log cleaner's checkpoint share this
format (see :mod:`pluglog.storage.manager`); writes are atomic and durable.
:class:`TruncationCheckpoints` is the storage's rule for writing them again
after a follower truncation.
"""

from twisted.logger import Logger

from pluglog.errors import KafkaStorageError
from pluglog.fileutil import atomic_write

_log = Logger()

CHECKPOINT_VERSION = 0


class CheckpointError(KafkaStorageError):
    """A checkpoint file is malformed."""


def read_checkpoint(path):
    """Return ``{(topic, partition): offset}`` from a checkpoint file ({} if absent)."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return {}
    try:
        if int(lines[0]) != CHECKPOINT_VERSION:
            raise CheckpointError(f"{path}: unknown version {lines[0]!r}")
        count = int(lines[1])
        entries = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split(" ")
            entries[(topic, int(partition))] = int(offset)
    except (IndexError, ValueError) as exc:
        raise CheckpointError(f"{path} is malformed: {exc}") from None
    if len(entries) != count:
        raise CheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


def write_checkpoint(path, entries):
    """Atomically replace ``path`` with ``entries`` ({(topic, partition): offset})."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [
        f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(entries.items())
    ]
    atomic_write(path, ("\n".join(lines) + "\n").encode("utf-8"))


class TruncationCheckpoints:
    """Mixed into the segment storage, whose ``write_checkpoints`` records
    each log's checkpointed recovery point in ``_checkpointed``; logs call
    :meth:`_truncated` (their ``on_truncation``)."""

    def _truncated(self, log):
        """A follower truncation lowered ``log``'s recovery point. Below the
        checkpointed one, the checkpoint is written again before the log
        takes new writes, as Kafka's ``LogManager.truncateTo`` does: after a
        crash, a stale checkpoint would name the cut and rewritten (unsynced)
        data as synced, and recovery would not re-scan its segment. Once per
        reactor turn, however many logs truncated in it (a leader change
        at 10,000 partitions); the next writes to a follower come with a
        later Fetch answer, a later turn. Without a reactor, at once."""
        if log.recovery_point >= self._checkpointed.get((log.topic, log.partition), 0):
            return
        if self.reactor is None:
            self.write_checkpoints()
        elif self._truncation_call is None:
            self._truncation_call = self.reactor.callLater(0, self._checkpoint_truncations)

    def _checkpoint_truncations(self):
        self._truncation_call = None
        if self.closed:
            return
        try:
            self.write_checkpoints()
        except OSError as exc:
            # The only log dir failed: the broker's next checkpoint stops it
            # (pluglog.broker.log_dirs); this one names what was not written.
            _log.error("recovery-point checkpoint after a truncation failed: {e}", e=exc)
