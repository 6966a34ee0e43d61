"""``__transaction_state``: where the transaction coordinator keeps its state.

A transactional id lives in partition ``abs(java_string_hashcode(id)) %
transaction.state.log.num.partitions`` (Kafka's TransactionStateManager),
and the broker leading that partition is its coordinator. Each state change
is one record appended with acks=all semantics: the Deferred of
:meth:`TxnStore.append` fires once the partition's high watermark covers
it, so a coordinator that fails over never forgets an acknowledged step.

The topic is compacted and created on first need with replication factor
min(``transaction.state.log.replication.factor``, live brokers) and
``min.insync.replicas`` from ``transaction.state.log.min.isr`` (capped the
same way). :meth:`TxnStore.load` reads one partition back, one read chunk
per reactor turn, when this broker becomes its leader.

Runs on the reactor thread.
"""

from twisted.internet import defer, task

from pluglog.group.store import InternalTopic, OffsetStore, check_acknowledged, partition_for
from pluglog.protocol import records as batches
from pluglog.txn.model import TXN_TOPIC, TXN_TOPIC_CONFIGS, parse_key, parse_value


class TxnStore:
    """Appends and reads ``__transaction_state`` records."""

    def __init__(self, broker):
        self.broker = broker
        self.num_partitions = broker.config.transaction_state_log_num_partitions
        self.write_timeout_s = broker.config.offsets_commit_timeout_ms / 1000.0
        self._topic = InternalTopic(broker, TXN_TOPIC)

    def topic_exists(self):
        return self.broker.num_partitions(TXN_TOPIC) is not None

    def partition_of(self, transactional_id, count=None):
        count = count or self.broker.num_partitions(TXN_TOPIC) or self.num_partitions
        return partition_for(transactional_id, count)

    def ensure_topic(self):
        """A Deferred that fires once ``__transaction_state`` exists."""
        return self._topic.ensure(self._topic_spec)

    def _topic_spec(self):
        config = self.broker.config
        live = len(self.broker.coordinator.brokers())
        factor = max(1, min(config.transaction_state_log_replication_factor, live))
        configs = dict(TXN_TOPIC_CONFIGS)
        configs["segment.bytes"] = str(config.transaction_state_log_segment_bytes)
        configs["min.insync.replicas"] = str(min(config.transaction_state_log_min_isr, factor))
        return self.num_partitions, factor, configs

    def append(self, part, key, value):
        """Append one record to ``part`` (a led ``__transaction_state``
        partition); the Deferred fires once the high watermark covers it
        and errbacks with the log's KafkaError otherwise."""
        return defer.maybeDeferred(self._write, part, key, value)

    def _write(self, part, key, value):
        now = self.broker.now_ms()
        batch = batches.build_batch([batches.Record(key, value, (), now)], base_timestamp=now)
        info = part.append(batch, now, acks=-1, client=False)
        wait = part.wait_for_hw(info.last_offset + 1, self.write_timeout_s, self.broker.reactor)
        return wait.addCallback(check_acknowledged, part)

    def load(self, part, current):
        """Read ``part`` from its log start: a Deferred of ``{transactional_id:
        TxnMetadata}`` (the newest value of each id), or None when
        ``current()`` turned false meanwhile."""
        metas = {}

        def apply(chunk):
            for record in chunk:
                txn_id = parse_key(record.key)
                if record.value is None:
                    metas.pop(txn_id, None)
                else:
                    metas[txn_id] = parse_value(txn_id, record.value)

        @defer.inlineCallbacks
        def run():
            for chunk in OffsetStore.read_chunks(part):
                if not current():
                    return None
                apply(chunk)
                # One chunk per reactor turn: other requests keep flowing.
                yield task.deferLater(self.broker.reactor, 0, lambda: None)
            return metas if current() else None

        return run()
