"""Built-in retention policy: Kafka's time- and size-based segment deletion.

A segment may go when its newest record is older than ``retention.ms`` or
while the log exceeds ``retention.bytes`` by at least that segment's size.
The active segment is never deleted; compacted topics (``cleanup.policy``
without ``delete``) are left to the cleaner. ``now_ms`` is passed in, so
tests drive it with a Clock.
"""

from zope.interface import implementer

from pluglog.interfaces import IRetentionPolicy


@implementer(IRetentionPolicy)
class DeleteRetentionPolicy:
    """retention.ms / retention.bytes like Kafka's LogManager cleanup."""

    def segments_to_delete(self, log, topic_config, now_ms):
        if "delete" not in topic_config.cleanup_policy.split(","):
            return 0
        segments = log.segment_infos()[:-1]  # never the active segment
        count = 0
        if topic_config.retention_ms >= 0:
            for info in segments:
                if info.largest_timestamp >= 0 and (
                    now_ms - info.largest_timestamp <= topic_config.retention_ms
                ):
                    break
                if info.largest_timestamp < 0 and info.size_bytes > 0:
                    break
                count += 1
        if topic_config.retention_bytes >= 0:
            excess = log.size_bytes - topic_config.retention_bytes
            by_size = 0
            for info in segments:
                if excess < info.size_bytes:
                    break
                excess -= info.size_bytes
                by_size += 1
            count = max(count, by_size)
        return count


def make_delete_policy(config, reactor):
    return DeleteRetentionPolicy()
