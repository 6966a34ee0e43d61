"""Consume, transform, produce, exactly once: a transaction per batch.

    python docs/examples/transactions.py 127.0.0.1:9092

Reads "example-orders" as group "example-upper", writes each value upper-cased
to "example-orders-upper" and commits the group's offsets in the same
transaction, so a crash and restart neither loses nor repeats a record (as
seen by read_committed consumers).
"""

import sys

from twisted.internet import defer, task

from pluglog.client import Consumer, Producer, TopicPartition


@defer.inlineCallbacks
def main(reactor, bootstrap="127.0.0.1:9092", rounds="3"):
    consumer = Consumer(
        reactor,
        "example-orders",
        bootstrap_servers=bootstrap,
        group_id="example-upper",
        auto_offset_reset="earliest",
        enable_auto_commit=False,  # the transactions commit the offsets
        isolation_level="read_committed",
    )
    producer = Producer(
        reactor,
        bootstrap_servers=bootstrap,
        transactional_id="example-upper-0",  # stable across restarts: fences a zombie
    )
    yield consumer.start()
    yield producer.init_transactions()
    for _ in range(int(rounds)):
        batches = yield consumer.getmany(timeout_ms=1000)
        if not batches:
            continue
        yield producer.begin_transaction()
        offsets = {}
        try:
            for tp, records in batches.items():
                for record in records:
                    producer.send("example-orders-upper", record.value.upper(), key=record.key)
                offsets[tp] = records[-1].offset + 1  # the next record to read
            yield producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            yield producer.commit_transaction()
        except Exception:
            yield producer.abort_transaction()  # nothing of it becomes visible
            raise
        print(f"committed {sum(map(len, batches.values()))} records and offsets {offsets}")
    yield producer.stop()
    yield consumer.stop()

    reader = Consumer(reactor, bootstrap_servers=bootstrap, isolation_level="read_committed")
    yield reader.start()
    tp = TopicPartition("example-orders-upper", 0)
    reader.assign([tp])
    yield reader.seek_to_beginning(tp)
    batches = yield reader.getmany(timeout_ms=2000)
    print(sorted(r.value for records in batches.values() for r in records))
    yield reader.stop()


if __name__ == "__main__":
    task.react(main, sys.argv[1:])
