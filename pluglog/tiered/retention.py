"""What tiered storage's retention deletes: local segments once uploaded, remote ones once expired.

* :func:`apply_local_retention`: a tiered partition's local log is bounded
  by ``local.retention.ms``/``local.retention.bytes``; the log itself
  refuses to delete a segment its remote tier does not hold yet;
* :func:`behind_local_retention`: whether segments wait beyond local
  retention for their upload (the manager then uploads at catch-up
  priority);
* :func:`expired_segments`: the remote segments beyond the topic's total
  retention (``retention.ms``, ``retention.bytes``, counting the local
  segments above the remote tier) or wholly below a DeleteRecords start.

Pure decisions over a partition and its tier; the remote log manager
(:mod:`.manager`) writes the metadata states and calls the provider.
"""

import dataclasses

from twisted.logger import Logger

log = Logger()


def _local(config):
    """``config`` with local retention as its retention."""
    return dataclasses.replace(
        config,
        retention_ms=config.effective_local_retention_ms,
        retention_bytes=config.effective_local_retention_bytes,
    )


def behind_local_retention(part, now, policy):
    """Whether ``part`` keeps local segments beyond its local retention
    (which then wait for their upload): uploads are behind, and the local
    disk grows past what the user set until they catch up."""
    return policy.segments_to_delete(part.log, _local(part.config), now) > 0


def apply_local_retention(part, now, policy):
    """Delete the local segments of ``part`` beyond its local retention
    (``policy`` is the broker's delete retention policy)."""
    count = policy.segments_to_delete(part.log, _local(part.config), now)
    if count:
        deleted = part.log.delete_oldest_segments(count)
        if deleted:
            # Fetch sessions holding the partition answer the new local start.
            part.log_start_moved()
            log.info(
                "local retention deleted {n} uploaded segment(s) of {t}-{i}",
                n=deleted,
                t=part.topic,
                i=part.index,
            )


def expired_segments(part, tier, now):
    """Remote segments beyond the total retention or below the start, oldest first."""
    config = part.config
    segments = list(tier.segments)
    out = []
    for segment in segments:
        if segment.next_offset <= tier.start_offset:
            out.append(segment)
        elif (
            config.retention_ms >= 0
            and segment.max_timestamp >= 0  # no timestamps: size decides
            and now - segment.max_timestamp > config.retention_ms
        ):
            out.append(segment)
        else:
            break
    if config.retention_bytes >= 0:
        local_segments = getattr(part.log, "segments", ())
        local = sum(s.size for s in local_segments if s.base_offset >= tier.next_offset)
        total = tier.size_bytes + local - sum(s.size_bytes for s in out)
        for segment in segments[len(out) :]:
            if total - segment.size_bytes < config.retention_bytes:
                break
            total -= segment.size_bytes
            out.append(segment)
    return out
