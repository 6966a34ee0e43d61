"""The ``_schemas`` topic: where the broker's schema registry keeps its state.

A compacted single-partition internal topic, keyed like Confluent's registry
(see :mod:`pluglog.serialization.registry`). It is created on the first
write, like Kafka's ``__consumer_offsets``, with Confluent's
``kafkastore.topic.replication.factor`` (default 3) capped at the live
brokers, and ``min.insync.replicas`` 2 once it has three replicas (one
replica may fail without stopping writes). Reading yields the records of an
offset range of the local replica in order, so the last value of a key wins
and a tombstone removes it, which is what compaction leaves behind. Appends
are one batch per registry operation through the partition's ``append`` as
the broker's own write (``client=False``: clients may not append to internal
topics) with acks=all; :mod:`pluglog.serialization.replicated` waits for the
high watermark before answering.
"""

from twisted.internet import defer

from pluglog.errors import TopicExistsError
from pluglog.protocol import records as batches

SCHEMAS_TOPIC = "_schemas"
SCHEMAS_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
#: Confluent's kafkastore.topic.replication.factor default.
DEFAULT_REPLICATION_FACTOR = 3


def topic_configs(replication_factor):
    """The topic configs for ``replication_factor`` replicas."""
    configs = dict(SCHEMAS_TOPIC_CONFIGS)
    configs["min.insync.replicas"] = str(max(1, min(2, replication_factor - 1)))
    return configs


class SchemaStore:
    """Creates, reads and appends the ``_schemas`` topic of one broker."""

    def __init__(self, broker, topic=SCHEMAS_TOPIC, replication_factor=DEFAULT_REPLICATION_FACTOR):
        self.broker = broker
        self.topic = topic
        self.wanted_replication_factor = replication_factor

    def exists(self):
        return self.broker.num_partitions(self.topic) is not None

    def replication_factor(self):
        """The wanted factor capped at the live brokers (as Confluent does)."""
        live = len(self.broker.coordinator.brokers())
        return max(1, min(self.wanted_replication_factor, live))

    def ensure_topic(self):
        """A Deferred fired once the topic exists (created if missing)."""
        if self.exists():
            return defer.succeed(None)
        rf = self.replication_factor()
        d = self.broker.create_topic(self.topic, 1, rf, topic_configs(rf), internal=True)

        def lost_race(failure):
            # Another creator (a second broker, an operator) is as good, even
            # before our view of the cluster shows its topic.
            if self.exists() or failure.check(TopicExistsError):
                return None
            return failure

        return d.addErrback(lost_race)

    def local_partition(self):
        """This broker's replica of ``_schemas``-0, or None."""
        return self.broker.partitions.get((self.topic, 0))

    @staticmethod
    def read(part, start, end, chunk_bytes=8 << 20):
        """Yield ``(key, value)`` of the records at offsets ``[start, end)``."""
        plog = part.log
        offset = max(start, plog.log_start_offset)
        while offset < end:
            result = plog.read(offset, chunk_bytes, max_offset=end)
            if not result.size:
                return
            data = result.records
            if not isinstance(data, bytes | bytearray | memoryview):
                data = data.read()
            advanced = offset
            for batch in batches.iter_batches(data, verify_crc=False):
                advanced = batch.base_offset + batch.last_offset_delta + 1
                if batch.is_control:
                    continue
                for record in batch.records:
                    # A read returns whole batches: skip what is before start.
                    if start <= record.offset < end:
                        yield record.key, record.value
            if advanced <= offset:
                return
            offset = advanced

    def append(self, part, records):
        """Append ``[(key, value | None)]`` as one batch with acks=all; returns
        the offset after it. Raises KafkaError (not the leader, too few
        in-sync replicas, ...)."""
        now = self.broker.now_ms()
        batch = batches.build_batch(
            [batches.Record(key, value, (), now) for key, value in records], base_timestamp=now
        )
        # The broker's own append: _schemas is internal, refused to clients.
        info = part.append(batch, now, acks=-1, client=False)
        return info.last_offset + 1
