"""A group member: joins "example-billing", commits what it processed.

    python docs/examples/group_consumer.py 127.0.0.1:9092

Run it twice at once and the two processes split the partitions.
"""

import sys

from twisted.internet import defer, task

from pluglog.client import Consumer


class Rebalances:
    """Kafka's ConsumerRebalanceListener; methods may return Deferreds."""

    def on_partitions_revoked(self, revoked):
        print(f"revoked {sorted(revoked)}")

    def on_partitions_assigned(self, assigned):
        print(f"assigned {sorted(assigned)}")


@defer.inlineCallbacks
def main(reactor, bootstrap="127.0.0.1:9092", rounds="3"):
    consumer = Consumer(
        reactor,
        "example-orders",
        bootstrap_servers=bootstrap,
        group_id="example-billing",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        partition_assignment_strategy="roundrobin",
        listener=Rebalances(),
    )
    yield consumer.start()
    for _ in range(int(rounds)):
        batches = yield consumer.getmany(timeout_ms=1000)
        for tp, records in batches.items():
            print(f"{tp.topic}[{tp.partition}]: {len(records)} records")
        yield consumer.commit()  # the positions of everything returned so far
    yield consumer.stop()  # LeaveGroup: the others take the partitions at once


if __name__ == "__main__":
    task.react(main, sys.argv[1:])
