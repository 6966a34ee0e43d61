"""What the remote log manager uploads, and the upload itself (in a pool thread).

* :func:`eligible_segment`: the oldest closed local segment not yet in the
  remote tier and wholly below the high watermark and the last stable
  offset (KIP-405: only committed data goes up);
* :func:`segment_files`: the parts of one segment upload (the ``.log``, its
  offset, time and transaction indexes, the leader-epoch slice);
* :func:`copy_segment`: the provider call, run in the manager's copier
  thread pool, never on the reactor.

Retention (what is deleted) is :mod:`.retention`'s; the manager
(:mod:`.manager`) decides when and records the states.
"""

import os
import threading
import time

from pluglog.errors import RemoteStorageError
from pluglog.storage.remote.metadata import epoch_checkpoint_bytes

#: Kafka's default of remote.log.manager.copy.max.bytes.per.second: no limit.
UNLIMITED = 9223372036854775807


class CopyQuota:
    """KIP-956's copy quota (``remote.log.manager.copy.max.bytes.per.second``),
    shared by the broker's upload threads: each segment copy starts only
    once the bytes copied before it have had their time at the rate, so
    uploads average at most that rate and leave the disk and the network
    to produce and fetch. Like Kafka's, it paces whole segments (a copy in
    flight is not slowed). Thread-safe; waits in the caller's pool thread."""

    def __init__(self, bytes_per_second, clock=time.monotonic):
        self.rate = bytes_per_second
        self.clock = clock
        self._lock = threading.Lock()
        self._free_at = 0.0
        self._stopping = threading.Event()
        #: Seconds upload threads have waited for the quota (a metric).
        self.waited_s = 0.0

    @property
    def limited(self):
        return self.rate < UNLIMITED

    def acquire(self, size):
        """Wait until ``size`` bytes may go up (then charge them)."""
        if not self.limited:
            return
        with self._lock:
            now = self.clock()
            start = max(now, self._free_at)
            self._free_at = start + size / self.rate
            self.waited_s += start - now
        if start > now and self._stopping.wait(start - now):
            raise RemoteStorageError("the broker is stopping; the upload is left for later")

    def stop(self):
        """Wake waiting threads (the broker is stopping)."""
        self._stopping.set()


def eligible_segment(part, tier):
    """The oldest closed local segment not yet uploaded and wholly below
    the high watermark and the last stable offset, or None."""
    segments = getattr(part.log, "segments", None)
    if not segments:
        return None
    bound = min(part.high_watermark, part.last_stable_offset)
    copied = max(tier.next_offset, tier.start_offset)
    for segment in segments[:-1]:
        if segment.next_offset <= copied or segment.size == 0:
            continue
        if segment.next_offset > bound:
            return None
        return segment
    return None


def segment_files(local, remote):
    """``{part: path or bytes}`` of local segment ``local`` uploaded as ``remote``."""
    return {
        "log": local.log_path,
        "index": local.index.path,
        "timeindex": local.time_index.path,
        "txnindex": local.txn_index.path,
        "leader_epoch": epoch_checkpoint_bytes(remote.leader_epochs),
    }


def copy_segment(storage, segment, files, quota=None):
    """In a pool thread: upload the segment's parts, after ``quota`` (a
    :class:`CopyQuota`) lets its bytes go; an index file that is
    missing (never written) goes up empty."""
    parts = {}
    for part, source in files.items():
        if isinstance(source, str) and not os.path.exists(source):
            if part == "log":
                raise RemoteStorageError(f"{source} is gone (deleted before its upload)")
            source = b""
        parts[part] = source
    if quota is not None:
        quota.acquire(segment.size_bytes)
    storage.copy_segment(segment, parts)
