"""The tiers of a tiered topic's partitions, for ``pluglog topics describe``.

Kafka 3.x has no request that reports a partition's remote size (its
brokers expose it as a JMX metric only), so the figures come from where the
broker itself keeps them, through ordinary Kafka requests:

* local start: ListOffsets v8 EARLIEST_LOCAL (-4), asked of the leader;
* local bytes: DescribeLogDirs, asked of the leader (its ``partition_size``
  is the local log only, as in Kafka);
* remote start, end and bytes: the partition's ``COPY_SEGMENT_FINISHED``
  segments in ``__remote_log_metadata`` (the compacted topic the brokers
  themselves read on a failover), fetched from the metadata partition that
  holds them and folded with the brokers' own decoder. Remote start is the
  first remote offset still served (a DeleteRecords or retention start
  included); remote end is the last offset uploaded, which is what
  ListOffsets v9 LATEST_TIERED (-5, KIP-1005) asked of the leader answers
  (test_tiered_latest.py checks they agree); the metadata is read anyway
  for the start and the bytes, so one source gives all three.

docs/storage.rst ("Remote tier") documents the choice.
"""

from pluglog import protocol as codec
from pluglog.cli.common import check, metadata
from pluglog.cli.routing import router
from pluglog.group.store import partition_for
from pluglog.protocol.records import iter_batches
from pluglog.storage.remote.metadata import COPY_SEGMENT_FINISHED
from pluglog.tiered.metadata_store import METADATA_TOPIC, apply_records

_DESCRIBE_LOG_DIRS_VERSION = 1
_FETCH_BYTES = 8 << 20


def local_bytes(client, topic, partitions):
    """``{partition: bytes of its leader's local log}`` (DescribeLogDirs)."""
    out = {}
    for leader, parts in router(client).by_leader(topic, partitions, skip_leaderless=True):
        resp = leader.request(
            codec.DESCRIBE_LOG_DIRS,
            _DESCRIBE_LOG_DIRS_VERSION,
            {"topics": [{"topic": topic, "partitions": parts}]},
        )
        for result in resp["results"]:
            for entry in result["topics"]:
                if entry["name"] != topic:
                    continue
                for p in entry["partitions"]:
                    if p["partition_index"] in parts and not p["is_future_key"]:
                        out[p["partition_index"]] = p["partition_size"]
    return out


def _metadata_records(client, index):
    """Every record of ``__remote_log_metadata``-``index`` below its high watermark."""
    offset, records = 0, []
    while True:
        ((leader, _parts),) = router(client).by_leader(METADATA_TOPIC, [index])
        (answer,) = leader.fetch(
            METADATA_TOPIC,
            {index: offset},
            max_bytes=_FETCH_BYTES,
            partition_max_bytes=_FETCH_BYTES,
        )
        if answer["error_code"] and offset < answer["log_start_offset"]:
            offset = answer["log_start_offset"]  # compaction moved the start
            continue
        check(answer["error_code"], f"{METADATA_TOPIC}-{index}")
        data = answer["records"] or b""
        if not isinstance(data, bytes | bytearray | memoryview):
            data = data.read()
        before = offset
        for batch in iter_batches(bytes(data), verify_crc=False):
            offset = batch.base_offset + batch.last_offset_delta + 1
            if not batch.is_control:
                records.extend(batch.records)
        if offset >= answer["high_watermark"] or offset == before:
            return records


def remote_tiers(client, topic, partitions):
    """``{partition: (remote start, remote end, remote bytes)}`` from
    ``__remote_log_metadata``; a partition with nothing uploaded yet is
    left out. ``{}`` when the metadata topic does not exist yet."""
    meta = metadata(client, [METADATA_TOPIC])["topics"][0]
    if meta["error_code"] or not meta["partitions"]:
        return {}
    count = len(meta["partitions"])
    found = {}
    for index in sorted({partition_for(f"{topic}-{p}", count) for p in partitions}):
        apply_records(found, _metadata_records(client, index))
    out = {}
    for p in partitions:
        tier = found.get((topic, p))
        if tier is None:
            continue
        segments = [
            s
            for s in tier.in_state(COPY_SEGMENT_FINISHED)
            if s.next_offset > tier.start_offset  # not yet deleted below the start
        ]
        if segments:
            start = max(segments[0].base_offset, tier.start_offset)
            out[p] = (start, segments[-1].end_offset, sum(s.size_bytes for s in segments))
    return out


def describe_tiers(client, topic, partitions, local_starts):
    """``{partition: {"local_start", "local_bytes", "remote_start",
    "remote_end", "remote_bytes"}}`` (None where unknown; the remote
    figures None while nothing is uploaded)."""
    sizes = local_bytes(client, topic, partitions)
    remote = remote_tiers(client, topic, partitions)
    out = {}
    for p in partitions:
        start, end, size = remote.get(p, (None, None, None))
        out[p] = {
            "local_start": local_starts.get(p),
            "local_bytes": sizes.get(p),
            "remote_start": start,
            "remote_end": end,
            "remote_bytes": size if size is not None else 0,
        }
    return out


def tier_line(tiers):
    """The describe line's tail for one tiered partition."""

    def shown(value):
        return "-" if value is None else value

    return (
        f"\tLocalStart: {shown(tiers['local_start'])}"
        f"\tLocalBytes: {shown(tiers['local_bytes'])}"
        f"\tRemoteStart: {shown(tiers['remote_start'])}"
        f"\tRemoteEnd: {shown(tiers['remote_end'])}"
        f"\tRemoteBytes: {tiers['remote_bytes']}"
    )
