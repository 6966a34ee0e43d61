"""One partition's transactions: open ones, the last stable offset, the aborted index.

Kafka's ProducerStateManager and TransactionIndex, reduced to what the
partition needs:

* ``ongoing``: producer id -> offset of the first batch of its open
  transaction in this partition. Filled by transactional data batches, emptied
  by that producer's COMMIT or ABORT marker.
* ``completed``: transactions whose marker is written but not yet below the
  high watermark. They still hold the last stable offset back, because a
  follower that becomes leader might not have the marker.
* ``aborted``: every aborted transaction still in the log, as
  :class:`AbortedTxn` ordered by marker offset. A read_committed fetch asks
  :meth:`aborted_between` for the ones its data overlaps (the response's
  AbortedTransactions); nothing is scanned at fetch time.

The last stable offset (LSO) is the smallest first offset of an open or
unreplicated transaction, or the high watermark if that is smaller.
Everything runs on the reactor thread.
"""

from bisect import bisect_left
from typing import NamedTuple


class AbortedTxn(NamedTuple):
    """Kafka's AbortedTxn: the data of ``producer_id`` in ``[first_offset,
    last_offset]`` (the ABORT marker's offset) is to be skipped;
    ``last_stable_offset`` is the LSO once the abort was written."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class PartitionTxns:
    """The transaction state of one partition (see the module docstring)."""

    __slots__ = ("ongoing", "completed", "aborted", "_aborted_ends")

    def __init__(self):
        self.ongoing = {}
        self.completed = []  # (first_offset, marker_offset), marker order
        self.aborted = []
        self._aborted_ends = []  # last_offset of each aborted entry, for bisect

    def __bool__(self):
        return bool(self.ongoing or self.completed)

    def begin(self, producer_id, offset):
        """A transactional data batch of ``producer_id`` starts at ``offset``."""
        if producer_id not in self.ongoing:
            self.ongoing[producer_id] = offset

    def end(self, producer_id, commit, marker_offset):
        """A marker of ``producer_id`` at ``marker_offset``; returns the
        AbortedTxn entry for an abort with data here, else None."""
        first = self.ongoing.pop(producer_id, None)
        if first is None:
            return None  # a marker for a transaction with no data here
        stable = None if commit else self.first_unstable_offset(-1)
        self.completed.append((first, marker_offset))
        if commit:
            return None
        entry = AbortedTxn(
            producer_id, first, marker_offset, marker_offset + 1 if stable is None else stable
        )
        self.add_aborted(entry)
        return entry

    def add_aborted(self, entry):
        if self._aborted_ends and entry.last_offset <= self._aborted_ends[-1]:
            return  # already known (a reload of the same index)
        self.aborted.append(entry)
        self._aborted_ends.append(entry.last_offset)

    def first_unstable_offset(self, high_watermark):
        """The first offset a read_committed consumer may not read yet, or
        None when nothing is unstable. Completed transactions whose marker
        is below ``high_watermark`` are dropped on the way."""
        completed = self.completed
        if completed and high_watermark >= 0:
            self.completed = completed = [c for c in completed if c[1] >= high_watermark]
        first = None
        if self.ongoing:
            first = min(self.ongoing.values())
        for start, _marker in completed:
            if first is None or start < first:
                first = start
        return first

    def last_stable_offset(self, high_watermark):
        if not self.ongoing and not self.completed:
            return high_watermark
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None else min(first, high_watermark)

    def aborted_between(self, start, end):
        """Aborted transactions whose data may lie in ``[start, end)``:
        marker at or after ``start`` and first offset before ``end``."""
        out = []
        aborted = self.aborted
        for i in range(bisect_left(self._aborted_ends, start), len(aborted)):
            entry = aborted[i]
            if entry.first_offset < end:
                out.append(entry)
            if entry.last_stable_offset >= end:
                # Every later abort began at or after this LSO (Kafka's
                # TransactionIndex.collectAbortedTxns stops here too).
                break
        return out

    def drop_before(self, log_start_offset):
        """Forget aborted transactions entirely below the log start."""
        cut = bisect_left(self._aborted_ends, log_start_offset)
        if cut:
            del self.aborted[:cut]
            del self._aborted_ends[:cut]
