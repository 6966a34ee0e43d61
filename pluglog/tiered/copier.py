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

from pluglog.errors import RemoteStorageError
from pluglog.storage.remote.metadata import epoch_checkpoint_bytes


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
