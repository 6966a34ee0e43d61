"""The ``_schemas`` topic: where the broker's schema registry keeps its state.

A compacted single-partition internal topic, created by the broker on first
start, keyed like Confluent's registry (see
:mod:`pluglog.serialization.registry`). Loading reads the whole log once at
start and applies every record in order, so the last value of a key wins and
a tombstone removes it, which is what compaction leaves behind. Writes are
one batch per registry operation through the partition's ``append`` as the
broker's own write (``client=False``: clients may not append to internal
topics; the single broker's acks=1; a replicated registry would wait for the high
watermark before answering, see docs/schema_registry.rst).
"""

from twisted.internet import defer

from pluglog.group.store import OffsetStore
from pluglog.protocol import records as batches

SCHEMAS_TOPIC = "_schemas"
SCHEMAS_TOPIC_CONFIGS = {"cleanup.policy": "compact"}


class SchemaStore:
    """Reads and appends the ``_schemas`` topic of one broker."""

    def __init__(self, broker, topic=SCHEMAS_TOPIC):
        self.broker = broker
        self.topic = topic

    def ensure_topic(self):
        """A Deferred fired once the topic exists (created if missing)."""
        if self.broker.num_partitions(self.topic) is not None:
            return defer.succeed(None)
        d = self.broker.create_topic(self.topic, 1, -1, dict(SCHEMAS_TOPIC_CONFIGS), internal=True)

        def lost_race(failure):
            # Another creator (a second broker, an operator) is as good.
            if self.broker.num_partitions(self.topic) is None:
                return failure
            return None

        return d.addErrback(lost_race)

    def load(self, registry):
        """Apply every record of the topic to ``registry``; returns the count."""
        count = 0
        part = self.broker.partition(self.topic, 0)
        for chunk in OffsetStore.read_chunks(part):
            for record in chunk:
                registry.apply(record.key, record.value)
                count += 1
        return count

    def write(self, records):
        """Append ``[(key, value | None)]`` as one batch; raises KafkaError."""
        now = self.broker.now_ms()
        part = self.broker.partition(self.topic, 0)
        batch = batches.build_batch(
            [batches.Record(key, value, (), now) for key, value in records], base_timestamp=now
        )
        # The broker's own append: _schemas is internal, refused to clients.
        part.append(batch, now, client=False)
