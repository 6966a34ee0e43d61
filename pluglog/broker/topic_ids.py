"""Topic ids on this broker: the id -> name index and each partition dir's id.

The coordinator owns a topic's id (``TopicMetadata.topic_id``); the broker
keeps :class:`TopicIds`, the reverse index the APIs that name topics by id
(Fetch v13+, Metadata v10+, DeleteTopics v6) resolve through, and stamps the
id into every hosted partition's directory as Kafka's ``partition.metadata``
(:mod:`pluglog.topicids`).

A partition dir without the file (a data dir from before topic ids) adopts
the coordinator's id. A dir whose file names another id holds a previous
topic of the same name, deleted and re-created while this broker was down:
its data must not be served as the new topic's, so the broker deletes it as
Kafka deletes stray logs, and the partition starts empty (the replica
fetcher refills it from the leader on a cluster).
"""

import uuid

from twisted.logger import Logger

from pluglog import topicids
from pluglog.interfaces import IDirectoryLog, IOfflineLog

log = Logger()


class TopicIds:
    """``{hex id: topic name}`` for the topics the coordinator knows."""

    def __init__(self):
        self._names = {}
        self._ids = {}

    def update(self, meta):
        """Record ``meta``'s id (a created or changed topic)."""
        old = self._ids.get(meta.name)
        if old is not None and old != meta.topic_id:
            self._names.pop(old, None)
        if meta.topic_id:
            self._ids[meta.name] = meta.topic_id
            self._names[meta.topic_id] = meta.name

    def forget(self, name):
        old = self._ids.pop(name, None)
        if old is not None:
            self._names.pop(old, None)

    def name_of(self, topic_id):
        """The name of the topic with ``topic_id`` (a UUID or hex), or None."""
        if isinstance(topic_id, uuid.UUID):
            topic_id = topic_id.hex
        return self._names.get(topic_id)

    def id_of(self, name):
        """The hex id of ``name``, or "" when unknown."""
        return self._ids.get(name, "")


def stamp(storage, meta, index, plog, topic_config, sync=True):
    """Check and write ``partition.metadata`` of a freshly opened log; returns
    the log to use: ``plog``, or a new empty log when ``plog``'s directory
    held another topic's data. ``sync=False``: written without fsyncs, the
    caller syncs the new logs together (:mod:`pluglog.broker.log_opening`)."""
    if not meta.topic_id or not IDirectoryLog.providedBy(plog) or IOfflineLog.providedBy(plog):
        return plog
    try:
        found = topicids.read_partition_metadata(plog.directory)
    except ValueError as exc:
        # Kafka refuses to load such a log; here the coordinator's id is known
        # and authoritative, so the file is rewritten with it.
        log.warn("{reason}; rewriting it with the topic's id", reason=str(exc))
        found = None
    if found is not None and found != meta.topic_id:
        log.warn(
            "{t}-{p} on disk belongs to an earlier topic {t} (id {old}, now {new}): "
            "deleting it as a stray log",
            t=meta.name,
            p=index,
            old=topicids.to_base64(found),
            new=topicids.to_base64(meta.topic_id),
        )
        storage.delete_log(meta.name, index)
        plog = storage.open_log(meta.name, index, topic_config)
    if found != meta.topic_id:
        topicids.write_partition_metadata(plog.directory, meta.topic_id, sync)
    return plog


def metadata_files(meta):
    """``{file name: bytes}`` a new partition directory of ``meta`` gets
    (storage.prepare_new_logs): its ``partition.metadata``, if it has an id."""
    if not meta.topic_id:
        return {}
    return {topicids.FILE_NAME: topicids.partition_metadata(meta.topic_id)}


def adopt(meta, plog):
    """Write the id of a topic that has just been given one (an upgraded
    cluster's controller assigned it) into an open partition's directory."""
    if meta.topic_id and IDirectoryLog.providedBy(plog) and not IOfflineLog.providedBy(plog):
        topicids.write_partition_metadata(plog.directory, meta.topic_id)
