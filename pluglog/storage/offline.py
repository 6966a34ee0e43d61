"""OfflineLog: what a partition holds when its log could not be opened.

Start-up must not die because one partition's files are unreadable (a
permission error, a file-descriptor limit, a damaged directory): the broker
logs why, gives that partition an OfflineLog and serves the rest. Every
operation that needs the data raises KafkaStorageError, which produce,
fetch and the other per-partition handlers answer as KAFKA_STORAGE_ERROR
for that partition only; Metadata reports it the same way (Kafka's answer
for a replica on an offline log directory). The partition comes back on the
next start once the cause is fixed.
"""

from zope.interface import implementer

from pluglog.errors import KafkaStorageError
from pluglog.interfaces import IOfflineLog


@implementer(IOfflineLog)
class OfflineLog:
    """An IPartitionLog stand-in whose data operations all fail."""

    config = None
    log_start_offset = 0
    log_end_offset = 0
    recovery_point = 0
    size_bytes = 0
    segments = ()
    closed = True

    def __init__(self, topic, partition, reason):
        self.topic = topic
        self.partition = partition
        self.reason = reason

    def __repr__(self):
        return f"<OfflineLog {self.topic}-{self.partition}: {self.reason}>"

    def _fail(self, *args, **kwargs):
        raise KafkaStorageError(
            f"partition {self.topic}-{self.partition} is offline: {self.reason}"
        )

    append = read = offset_for_timestamp = truncate_to = _fail
    delete_records_before = delete_oldest_segments = roll = _fail

    def segment_infos(self):
        return []

    def batch_headers(self, start_offset=0):
        return iter(())

    def update_config(self, config):
        pass

    def maybe_flush(self, now_ms):
        return False

    def flush(self):
        pass

    def close(self):
        pass
