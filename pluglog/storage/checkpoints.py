"""Kafka's text checkpoint files: ``{(topic, partition): offset}``.

The storage's ``recovery-point-offset-checkpoint`` and
``log-start-offset-checkpoint`` and the log cleaner's checkpoint share this
format (see :mod:`pluglog.storage.manager`); writes are atomic and durable.
"""

from pluglog.errors import KafkaStorageError
from pluglog.fileutil import atomic_write

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
