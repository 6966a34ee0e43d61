"""Idempotent-producer state per partition: sequence checks and deduplication.

For each producer id the partition keeps the epoch and the metadata of the
last five appended batches (Kafka's ``NUM_BATCHES_TO_RETAIN``; clients cap
in-flight requests at five with idempotence). A retried batch that matches
one of them is answered with its original offsets instead of being stored
twice. Only batch headers are read, never records.
"""

import struct
from collections import deque

from pluglog.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    OutOfOrderSequenceError,
)

NUM_BATCHES_TO_RETAIN = 5
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence at 43
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta at 23
INT32_MAX = 2**31 - 1


def producer_fields(batch):
    """Return ``(producer_id, epoch, base_seq, last_seq)`` of a v2 batch."""
    producer_id, epoch, base_seq = _PRODUCER_FIELDS.unpack_from(batch, 43)
    (delta,) = _LAST_DELTA.unpack_from(batch, 23)
    last_seq = base_seq + delta
    if last_seq > INT32_MAX:
        last_seq -= INT32_MAX + 1
    return producer_id, epoch, base_seq, last_seq


class _Entry:
    __slots__ = ("epoch", "batches")

    def __init__(self, epoch):
        self.epoch = epoch
        # (first_seq, last_seq, first_offset, last_offset, append_time)
        self.batches = deque(maxlen=NUM_BATCHES_TO_RETAIN)


class ProducerStateTable:
    """Producer id -> epoch and recent batches for one partition."""

    def __init__(self):
        self._entries = {}

    def __len__(self):
        return len(self._entries)

    def check(self, producer_id, epoch, first_seq, last_seq):
        """Validate a batch before append.

        Returns the retained ``(first_offset, last_offset, append_time)`` for
        a duplicate, ``None`` for a new batch; raises for a bad sequence.
        """
        if producer_id < 0:
            return None
        if first_seq < 0:
            raise InvalidRecordError("idempotent batch without a base sequence")
        entry = self._entries.get(producer_id)
        if entry is None:
            return None  # unknown or expired producer: accept, as Kafka does
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than {entry.epoch}"
            )
        if epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} new epoch {epoch} must start at sequence 0, "
                    f"got {first_seq}"
                )
            return None
        for b_first, b_last, first_offset, last_offset, append_time in entry.batches:
            if b_first == first_seq and b_last == last_seq:
                return first_offset, last_offset, append_time
        if entry.batches:
            expected = entry.batches[-1][1] + 1
            if expected > INT32_MAX:
                expected = 0
            if first_seq != expected:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} expected sequence {expected}, got {first_seq}"
                )
        return None

    def update(
        self, producer_id, epoch, first_seq, last_seq, first_offset, last_offset, append_time
    ):
        """Record an appended batch."""
        if producer_id < 0:
            return
        entry = self._entries.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self._entries[producer_id] = _Entry(epoch)
        entry.batches.append((first_seq, last_seq, first_offset, last_offset, append_time))

    def epoch_of(self, producer_id):
        entry = self._entries.get(producer_id)
        return None if entry is None else entry.epoch

    def bump_epoch(self, producer_id, epoch):
        """A transaction marker (or snapshot) says ``producer_id`` is at
        ``epoch``: a newer epoch starts with no batches, so its next batch
        may start anywhere (the producer restarts its sequences)."""
        entry = self._entries.get(producer_id)
        if entry is None or epoch > entry.epoch:
            self._entries[producer_id] = _Entry(epoch)

    def dump(self):
        """``[[producer_id, epoch, [batch, ...]], ...]`` for a snapshot."""
        return [
            [pid, entry.epoch, [list(b) for b in entry.batches]]
            for pid, entry in sorted(self._entries.items())
        ]

    def items(self):
        """``(producer_id, epoch, last_seq, last_timestamp)`` of each producer."""
        for pid, entry in self._entries.items():
            last = entry.batches[-1] if entry.batches else None
            yield pid, entry.epoch, last[1] if last else -1, last[4] if last else -1

    def rebuild(self, headers):
        """Load state from batch headers read back from the log (oldest first)."""
        for h in headers:
            if h.producer_id >= 0 and h.base_sequence >= 0:
                last_seq = h.base_sequence + h.last_offset_delta
                if last_seq > INT32_MAX:
                    last_seq -= INT32_MAX + 1
                self.update(
                    h.producer_id,
                    h.producer_epoch,
                    h.base_sequence,
                    last_seq,
                    h.base_offset,
                    h.base_offset + h.last_offset_delta,
                    -1,
                )


class DuplicateAppend:
    """The answer for a retried idempotent batch that is already stored."""

    __slots__ = ("first_offset", "last_offset", "log_append_time", "log_start_offset")

    def __init__(self, first_offset, last_offset, log_append_time, log_start_offset):
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
