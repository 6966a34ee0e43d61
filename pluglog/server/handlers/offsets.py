"""ListOffsets: the offsets of a partition's special positions and by timestamp.

The special timestamps are Kafka's (``ListOffsetsRequest``), each from
the version that introduced it; an older request with one gets
UNSUPPORTED_VERSION:

* LATEST (-1): the high watermark, or the last stable offset for
  read_committed;
* EARLIEST (-2): the first offset of either tier (tiered storage: the
  remote tier's start);
* MAX_TIMESTAMP (-3, v7+, KIP-734): the record with the largest timestamp,
  which may be in a remote segment;
* EARLIEST_LOCAL (-4, v8+, KIP-405): the local log's start;
* LATEST_TIERED (-5, v9+, KIP-1005): the last offset uploaded to the remote
  tier, answered as Kafka's ``UnifiedLog.fetchOffsetByTimestamp`` does.

A timestamp >= 0 is the first record at or after it, in either tier.
Lookups that read a remote segment answer through a Deferred; nothing
here blocks the reactor.
"""

from twisted.internet import defer
from twisted.logger import Logger

from pluglog import protocol as codec
from pluglog.broker.timestamps import (
    max_timestamp_offset_deferred,
    offset_for_timestamp_deferred,
)
from pluglog.errors import (
    NONE,
    OFFSET_NOT_AVAILABLE,
    UNKNOWN_SERVER_ERROR,
    UNSUPPORTED_VERSION,
)
from pluglog.interfaces import ITieredLog
from pluglog.server.handlers.common import leader_error, per_partition

_log = Logger()

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # ListOffsets v7+ (KIP-734)
EARLIEST_LOCAL = -4  # ListOffsets v8+ (KIP-405): the local log's start
LATEST_TIERED = -5  # ListOffsets v9+ (KIP-1005): the last offset uploaded


def handle_list_offsets(ctx, request):
    committed = request.get("isolation_level", 0) == 1
    #: Timestamp lookups still reading a remote segment (tiered storage).
    pending = []

    def answer(part, want, topic):
        entry = {
            "partition_index": want["partition_index"],
            "error_code": NONE,
            "old_style_offsets": [],
            "timestamp": -1,
            "offset": -1,
            "leader_epoch": -1,
        }
        entry["error_code"] = leader_error(ctx.broker, topic, part, want, want["partition_index"])
        if entry["error_code"] != NONE:
            return entry
        ts = want["timestamp"]
        if ts == LATEST:
            latest = part.last_stable_offset if committed else part.high_watermark
            entry["offset"], entry["leader_epoch"] = latest, part.leader_epoch
        elif ts == EARLIEST:
            # Tiered storage: the remote tier's start (Kafka's logStartOffset);
            # unknown for a moment after a start: the client retries.
            earliest = part.earliest_offset
            if earliest is None:
                entry["error_code"] = OFFSET_NOT_AVAILABLE
            else:
                entry["offset"], entry["leader_epoch"] = earliest, part.leader_epoch
        elif ts == MAX_TIMESTAMP and ctx.version >= 7:
            # Tiered storage: the largest timestamp may be in a remote segment.
            d = max_timestamp_offset_deferred(part.log, part.high_watermark)
            args = (entry, part, ctx.version)
            d.addCallbacks(_timestamp_found, _timestamp_failed, args, None, args)
            if not d.called:
                pending.append(d)
        elif ts == EARLIEST_LOCAL and ctx.version >= 8:
            entry["offset"], entry["leader_epoch"] = part.log.log_start_offset, part.leader_epoch
        elif ts == LATEST_TIERED and ctx.version >= 9:
            _latest_tiered(ctx.broker, part, entry)
        elif ts < 0:
            # Kafka's later specs (-6 earliest pending upload, v11) are not served.
            entry["error_code"] = UNSUPPORTED_VERSION
        elif part.earliest_offset is None:
            # Tiered storage, the remote metadata still being read after a
            # start: the answer may be remote, so the client retries.
            entry["error_code"] = OFFSET_NOT_AVAILABLE
        else:
            d = offset_for_timestamp_deferred(part.log, ts, part.high_watermark)
            args = (entry, part, ctx.version)
            d.addCallbacks(_timestamp_found, _timestamp_failed, args, None, args)
            if not d.called:
                pending.append(d)
            return entry
        if ctx.version == 0 and entry["offset"] >= 0:
            entry["old_style_offsets"] = [entry["offset"]]
        return entry

    topics = per_partition(ctx.broker, request["topics"], answer)
    response = {"throttle_time_ms": 0, "topics": topics}
    if not pending:
        return response
    return defer.gatherResults(pending).addCallback(lambda _: response)


def _latest_tiered(broker, part, entry):
    """Fill a LATEST_TIERED (-5) entry as Kafka does: on a partition
    without a remote tier (the topic's ``remote.storage.enable`` or the
    broker's ``remote.log.storage.system.enable`` off) offset -1 and
    leader epoch -1; on a tiered one the last offset uploaded and the
    leader epoch it was written in (the epoch cache's, as Kafka's
    ``epochForOffset``; -1 with offset -1 while nothing is uploaded).

    Unlike Kafka, which answers -1 until its remote log manager has read
    the metadata after a start or a failover, a tier whose metadata is
    not read yet answers OFFSET_NOT_AVAILABLE (the client retries), as
    EARLIEST does here: -1 would say that nothing is uploaded."""
    plog = part.log
    tiered = (
        part.config.remote_storage_enable
        and broker.remote_log_manager is not None
        and ITieredLog.providedBy(plog)
    )
    if not tiered:
        return
    tier = plog.remote_tier
    if tier is None or not tier.loaded:
        entry["error_code"] = OFFSET_NOT_AVAILABLE
        return
    highest = tier.highest_offset
    entry["offset"] = highest
    if highest < 0:
        return
    epoch = part.epochs.epoch_for_offset(highest)
    if epoch is None:
        # A replica whose epoch cache starts later (a wiped follower built
        # only the local tail): the uploaded segment's own epoch slice.
        slice_ = [e for e, start in tier.segments[-1].leader_epochs if start <= highest]
        epoch = slice_[-1] if slice_ else -1
    entry["leader_epoch"] = epoch


def _timestamp_found(found, entry, part, version):
    """Fill a ListOffsets entry with a timestamp lookup's answer."""
    if found is not None:
        entry["offset"], entry["timestamp"] = found
        entry["leader_epoch"] = part.leader_epoch
    if version == 0 and entry["offset"] >= 0:
        entry["old_style_offsets"] = [entry["offset"]]


def _timestamp_failed(failure, entry, part, version):
    """The remote tier could not be read (the store is failing): an error
    for this partition, and one line in the log."""
    _log.warn(
        "ListOffsets by timestamp in the remote tier of {t}-{i} failed: {e}",
        t=part.topic,
        i=part.index,
        e=failure.getErrorMessage(),
    )
    entry["error_code"] = UNKNOWN_SERVER_ERROR


HANDLERS = {codec.LIST_OFFSETS: handle_list_offsets}
