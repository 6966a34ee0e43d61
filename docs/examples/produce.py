"""Produce three records and print where each landed.

python docs/examples/produce.py 127.0.0.1:9092
"""

import sys

from twisted.internet import defer, task

from pluglog.client import AdminClient, NewTopic, Producer


@defer.inlineCallbacks
def main(reactor, bootstrap="127.0.0.1:9092"):
    admin = AdminClient(reactor, bootstrap_servers=bootstrap)
    yield admin.start()
    if "example-orders" not in (yield admin.list_topics()):
        yield admin.create_topics([NewTopic("example-orders", num_partitions=3)])
    yield admin.close()

    producer = Producer(
        reactor,
        bootstrap_servers=bootstrap,
        acks="all",  # Kafka's default, like enable.idempotence=true
        linger_ms=5,
        compression_type="zstd",
    )
    yield producer.start()
    sent = [
        producer.send(
            "example-orders", b'{"total": 12}', key=b"alice", headers=[("source", b"web")]
        ),
        producer.send("example-orders", b'{"total": 7}', key=b"bob"),
        producer.send("example-orders", b'{"total": 3}', key=b"alice"),
    ]
    for metadata in (yield defer.gatherResults(sent)):
        print(f"{metadata.topic}[{metadata.partition}] offset {metadata.offset}")
    yield producer.stop()


if __name__ == "__main__":
    task.react(main, sys.argv[1:])
