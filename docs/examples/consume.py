"""Read a topic's partitions from the beginning, without a group.

python docs/examples/consume.py 127.0.0.1:9092
"""

import sys

from twisted.internet import defer, task

from pluglog.client import Consumer


@defer.inlineCallbacks
def main(reactor, bootstrap="127.0.0.1:9092"):
    # Topics and no group_id: the consumer takes every partition of them.
    consumer = Consumer(
        reactor, "example-orders", bootstrap_servers=bootstrap, auto_offset_reset="earliest"
    )
    yield consumer.start()
    seen = 0
    while True:
        batches = yield consumer.getmany(timeout_ms=1000)
        if not batches:
            break  # nothing new for a second
        for tp, records in sorted(batches.items()):
            for record in records:
                seen += 1
                print(f"{tp.topic}[{tp.partition}]@{record.offset} {record.key} {record.value}")
    print(f"{seen} records")
    yield consumer.stop()


if __name__ == "__main__":
    task.react(main, sys.argv[1:])
