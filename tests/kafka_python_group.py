"""kafka-python 3.0.12 group consumers, with a work-around for its lost join.

The bug (found with ``test_kafka_python_group_of_two``; reported upstream):
``join_group_async`` runs JoinGroup+SyncGroup as a task and, when the caller's
poll timer expires first, leaves the task in flight for the next poll to
await. Only that await applies the result (state STABLE, heartbeats enabled
again, the assignment installed). But the next poll awaits it only if
``need_rejoin()`` is still true, and a leader that rejoined because its
metadata snapshot changed clears that condition itself while computing the
assignment inside the task. The finished join is then never applied: the
member stays REBALANCING with heartbeats off and no partitions, its session
expires on the coordinator, and nothing makes it join again. Any broker
(Kafka included) sees the same; kafka-python 2.x guarded this with
``join_future`` (dpkp/kafka-python#1695), which the 3.0 rewrite lost.

:func:`group_consumer` makes ``need_rejoin()`` also true while a join task
is pending, and :func:`poll` finishes a needed join without a timer before
polling, so a join is never left half-applied. Both use kafka-python
internals (``_coordinator``, ``_join_task``); drop them once a fixed
kafka-python is the one installed.
"""

import kafka


def group_consumer(topic, **config):
    """A subscribed KafkaConsumer whose joins are always applied (see above)."""
    consumer = kafka.KafkaConsumer(**config)
    coordinator = consumer._coordinator
    need_rejoin = coordinator.need_rejoin

    def need_rejoin_or_join_pending():
        return coordinator._join_task is not None or need_rejoin()

    coordinator.need_rejoin = need_rejoin_or_join_pending
    consumer.subscribe([topic])
    return consumer


def poll(consumer, timeout_ms):
    """``consumer.poll(timeout_ms)``, after finishing any join that is needed
    or still pending (bounded by the group's rebalance, not by the timer)."""
    coordinator = consumer._coordinator
    if coordinator.need_rejoin():
        coordinator.ensure_active_group()
    return consumer.poll(timeout_ms=timeout_ms)
