"""Producer id allocation that survives restarts.

Ids are handed out from blocks; the end of the current block is written
(atomically, fsynced) to ``<data-dir>/producer-id-block`` before any id in
it is used, so after a crash allocation resumes past every id ever handed
out and an id is never reused. Kafka allocates blocks the same way.
"""

import os

from pluglog.fileutil import atomic_write

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"


class ProducerIdAllocator:
    def __init__(self, data_dir, block_size=BLOCK_SIZE):
        self.path = os.path.join(data_dir, FILE_NAME)
        self.block_size = block_size
        self._next = 0
        self._block_end = 0
        try:
            with open(self.path, encoding="ascii") as handle:
                self._next = self._block_end = int(handle.read().strip() or 0)
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
