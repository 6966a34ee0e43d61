"""Direct reads of a topic's remote tier: history straight from the object store.

With tiered storage (docs/storage.rst, "Remote tier") a partition's offsets
below its local log start live only in the object store. When the source is
given the remote tier's location, under the broker's own key names
(``rsm.config.s3.bucket``, ``rsm.config.s3.endpoint.url``,
``rsm.config.s3.region``, ``rsm.config.s3.prefix``, or
``rsm.config.filesystem.root``), the driver plans those offsets as
:class:`RemotePartition` splits, one per uploaded segment, and the executors
fetch the segment objects themselves and decode their record batches with
pluglog's codec; only the local tail is read through the broker.

Planning (driver): the segments come from ``__remote_log_metadata``, read
through the broker and folded with the broker's own decoder
(:func:`pluglog.tiered.metadata_store.apply_records`); only
``COPY_SEGMENT_FINISHED`` segments count. The local start is ListOffsets v8
EARLIEST_LOCAL. Credentials come from boto3's usual sources in the
executors, as on the broker.

read_committed is refused for ranges that reach the remote tier: the
segments' aborted-transaction entries are in the metadata, but filtering
them is not implemented yet.
"""

import logging

from pyspark.sql.datasource import InputPartition

from pluglog_spark import executor
from pluglog_spark.options import OptionError

log = logging.getLogger("pluglog_spark")


def storage(config):
    """The broker's own provider, built in the executor from ``config``."""
    if config.get("root"):
        from pluglog.storage.remote.filesystem import FilesystemRemoteStorage

        return FilesystemRemoteStorage(config["root"])
    from pluglog.storage.remote.s3 import S3RemoteStorage

    return S3RemoteStorage(
        config["bucket"],
        endpoint_url=config.get("endpoint_url", ""),
        region=config.get("region", ""),
        prefix=config.get("prefix", ""),
    )


class RemotePartition(InputPartition):
    """Offsets ``[start, end)`` of one remote segment (its metadata as JSON)."""

    def __init__(self, topic, partition, start, end, segment):
        super().__init__((topic, partition, start, end, segment))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end
        self.segment = segment


def remote_segments(cluster, tps):
    """``{(topic, partition): [RemoteSegment, ...]}`` (finished copies,
    by base offset) from ``__remote_log_metadata``."""
    from pluglog.storage.remote.metadata import COPY_SEGMENT_FINISHED
    from pluglog.tiered.metadata_store import METADATA_TOPIC, apply_records

    found = {}
    for index in cluster.partitions([METADATA_TOPIC]).get(METADATA_TOPIC, []):
        apply_records(found, cluster.read_partition(METADATA_TOPIC, index))
    return {tp: found[tp].in_state(COPY_SEGMENT_FINISHED) if tp in found else [] for tp in tps}


def _gap(r, start, end, fail_on_data_loss):
    """Offsets below the local start that no finished remote segment holds:
    remote retention or DeleteRecords removed them after the plan's
    data-loss check."""
    message = (
        f"pluglog: {r.topic}-{r.partition}: offsets [{start}, {end}) are in no remote "
        "segment any more (remote retention or DeleteRecords removed them)"
    )
    if fail_on_data_loss:
        raise executor.DataLossError(message + "; set failOnDataLoss=false to skip them")
    log.warning("%s; skipping them (failOnDataLoss=false)", message)


def split(cluster, ranges, read_committed, fail_on_data_loss=True):
    """Cut each ``OffsetRange`` below its partition's local start into
    per-segment :class:`RemotePartition` splits: ``(remote, local ranges)``."""
    from pluglog_spark.offsets import OffsetRange

    tps = sorted({(r.topic, r.partition) for r in ranges})
    local_start = cluster.earliest_local(tps) if tps else {}
    below = [r for r in ranges if r.start < local_start[(r.topic, r.partition)]]
    if not below:
        return [], ranges
    if read_committed:
        r = below[0]
        raise OptionError(
            f"{r.topic}-{r.partition}: offsets [{r.start}, {local_start[(r.topic, r.partition)]})"
            " are in the remote tier, and direct remote reads support read_uncommitted only; "
            "drop the rsm.config.* options to read them through the broker"
        )
    segments = remote_segments(cluster, sorted({(r.topic, r.partition) for r in below}))
    remote, local = [], []
    for r in ranges:
        tp = (r.topic, r.partition)
        boundary = min(r.end, local_start[tp])
        covered = r.start
        for seg in segments.get(tp, []):
            if covered < min(seg.base_offset, boundary):
                _gap(r, covered, min(seg.base_offset, boundary), fail_on_data_loss)
            # Segments of different leaders may overlap (KIP-405 allows it):
            # each offset is read from the first segment that holds it.
            lo, hi = max(covered, seg.base_offset), min(boundary, seg.next_offset)
            if lo < hi:
                remote.append(RemotePartition(r.topic, r.partition, lo, hi, seg.to_json()))
                covered = hi
        if covered < boundary:
            _gap(r, covered, boundary, fail_on_data_loss)
        if r.end > local_start[tp]:
            local.append(OffsetRange(r.topic, r.partition, max(r.start, local_start[tp]), r.end))
    return remote, local


def read_segment(config, partition):
    """Yield Arrow batches of ``partition``'s offsets, decoded from the
    segment's ``.log`` object by pluglog's consumer codec (batch headers in
    Python, records in C; control batches skipped, CRCs checked)."""
    from pluglog.client.fetcher import records_from
    from pluglog.serializers import BytesSerializer
    from pluglog.storage.remote.metadata import RemoteSegment

    segment = RemoteSegment.from_json(partition.segment)
    data = storage(config).fetch(segment, "log", 0, None)
    raw = BytesSerializer()
    records, _ = records_from(
        partition.topic, partition.partition, data, partition.start, raw, raw
    )
    end = partition.end
    rows = executor.Columns()
    for r in records:
        if r.offset >= end:
            break
        rows.add(r.key, r.value, r.offset, r.timestamp, r.timestamp_type == 1, r.headers)
        if len(rows) >= executor.ROWS_PER_BATCH:
            yield rows.batch(partition.topic, partition.partition)
            rows = executor.Columns()
    if len(rows):
        yield rows.batch(partition.topic, partition.partition)
