"""Producer id allocation that survives restarts.

Ids are handed out from blocks; the end of the current block is written
(atomically, fsynced) to ``<data-dir>/producer-id-block`` before any id in
it is used, so after a crash allocation resumes past every id ever handed
out and an id is never reused. Kafka allocates blocks the same way.

In a cluster every broker hands out ids, so each draws from its own range:
broker ``N`` allocates ``N << 32`` upwards (broker 0, the single-node
default, keeps 0, 1, 2, ...). Ranges never meet, with no coordination on
the InitProducerId path; 2^32 ids per broker last about 136 years at one
per second.
"""

import os

from pluglog.fileutil import atomic_write

BLOCK_SIZE = 1000
RANGE_BITS = 32
FILE_NAME = "producer-id-block"


class ProducerIdAllocator:
    def __init__(self, data_dir, block_size=BLOCK_SIZE, broker_id=0):
        self.path = os.path.join(data_dir, FILE_NAME)
        self.block_size = block_size
        self._next = self._block_end = broker_id << RANGE_BITS
        try:
            with open(self.path, encoding="ascii") as handle:
                saved = int(handle.read().strip() or 0)
            self._next = self._block_end = max(saved, self._next)
        except FileNotFoundError:
            pass

    def allocate(self):
        if self._next >= self._block_end:
            self._block_end = self._next + self.block_size
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            atomic_write(self.path, str(self._block_end).encode("ascii"))
        producer_id = self._next
        self._next += 1
        return producer_id
