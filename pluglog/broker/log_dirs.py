"""Failed log dirs (JBOD, ``log.dirs``): a dir that vanishes, stops being
readable or fails a checkpoint write takes its partitions offline while the
broker keeps serving those in the other dirs.

Kafka's LogDirFailureChannel does the same on an I/O error: the dir's
replicas answer KAFKA_STORAGE_ERROR and Metadata lists this broker among
their offline replicas. Here the storage notices (``probe_dirs``, run by the
flush scheduler every ``log.flush.scheduler.interval.ms``, and failed
checkpoint writes); this module swaps each affected partition's log for an
:class:`pluglog.storage.offline.OfflineLog`, which every handler already
answers as KAFKA_STORAGE_ERROR. A failed dir stays failed until restart.

In a cluster the coordinator is told (``replicas_offline``): the
controller moves the leadership of those partitions to other in-sync
replicas and drops this broker from their ISRs, and this broker stops
following them (docs/cluster.rst, "A failed log dir").
"""

from twisted.logger import Logger

from pluglog.errors import NOT_ENOUGH_REPLICAS_AFTER_APPEND
from pluglog.interfaces import ILogDirStorage
from pluglog.storage.offline import OfflineLog

log = Logger()


def check_log_dirs(broker):
    """Probe the storage's log dirs and take the partitions of any newly
    failed one offline; returns the dirs taken offline now."""
    storage = broker.storage
    if not ILogDirStorage.providedBy(storage):
        return []
    storage.probe_dirs()
    handled = broker.failed_log_dirs
    taken = []
    for directory, reason in storage.failed_dirs().items():
        if directory in handled:
            continue
        handled.add(directory)
        taken.append(directory)
        _take_offline(broker, directory, reason)
    return taken


def _take_offline(broker, directory, reason):
    keys = [key for key in broker.partitions if broker.storage.dir_of(*key) == directory]
    for key in keys:
        part = broker.partitions[key]
        part.log = OfflineLog(key[0], key[1], f"log dir {directory} failed: {reason}")
        part.log_offline = True
        # Producers waiting on this partition's high watermark learn now.
        # Their batches are in the log (followers may have them too), so the
        # answer must not say "not persisted" as KAFKA_STORAGE_ERROR does:
        # librdkafka's idempotent producer would resend them under a bumped
        # epoch and the new leader would store them twice. "Appended, not
        # acknowledged" makes it retry with the same sequence numbers, which
        # the new leader recognises.
        part.fail_waits(NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        if broker.replicas is not None:
            broker.replicas.log_went_offline(key)
    report_offline(broker, keys, [directory])
    log.error(
        "log dir {dir} failed ({reason}): {count} partition(s) offline, "
        "the other log dirs are still served",
        dir=directory,
        reason=reason,
        count=len(keys),
    )


def report_offline(broker, keys, directories):
    """Tell the coordinator these replicas are offline (a no-op without a
    cluster); a failed report is logged, the partitions stay offline here."""
    if not keys:
        return
    d = broker.coordinator.replicas_offline(keys, directories)
    d.addErrback(
        lambda failure: log.failure("reporting offline replicas {keys} failed", failure, keys=keys)
    )


def report_offline_at_start(broker):
    """Partitions whose logs could not be opened at start are offline
    replicas too: the controller must not keep them leaders."""
    keys = sorted(key for key, part in broker.partitions.items() if part.log_offline)
    storage = broker.storage
    dirs = []
    if ILogDirStorage.providedBy(storage):
        dirs = sorted({d for d in (storage.dir_of(*key) for key in keys) if d is not None})
    report_offline(broker, keys, dirs)


def write_failed(broker, topic, index, exc):
    """An append to ``topic-index`` raised an I/O error: with several log
    dirs, its dir fails (Kafka's rule) and its partitions go offline."""
    storage = broker.storage
    directory = None
    if ILogDirStorage.providedBy(storage) and len(storage.data_dirs) > 1:
        directory = storage.dir_of(topic, index)
    if directory is not None:
        storage.mark_dir_failed(directory, f"write to {topic}-{index} failed: {exc}")
        check_log_dirs(broker)
    else:
        log.error("write to {topic}-{index} failed: {exc}", topic=topic, index=index, exc=exc)
