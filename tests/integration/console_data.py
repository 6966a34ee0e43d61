"""Known data for the console tests, written through a real Kafka client.

``console-demo`` has two partitions. Partition 0 holds :data:`RECORDS` in
order (offsets 0-4), among them a key and value that are HTML and a value
that is not UTF-8; partition 1 holds three records. The group
:data:`GROUP` commits offset 2 on partition 0 and 1 on partition 1, so its
lag is 3 and 2 (5 in all); :data:`HTML_GROUP` is a group whose id is HTML.
"""

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess, free_port

TOPIC = "console-demo"
GROUP = "console-billing"
HTML_GROUP = "<i>grp</i>"
HTML = "<b>x</b>"
#: (key, value, headers) of partition 0, offsets 0 to 4.
RECORDS = [
    (b"order-1", b"first value", [("source", b"test")]),
    (b"order-2", b"second value", []),
    (HTML.encode(), HTML.encode() + b"<script>document.title='owned'</script>", [("h", b"<u>")]),
    (b"binary", b"\xff\x00\xfe", []),
    (None, b"last", []),
]
#: Partition 0's record i has timestamp BASE_MS + i seconds (an hour ago: within retention).
BASE_MS = (int(time.time()) - 3600) * 1000
PARTITION_1 = [(b"p1-%d" % i, b"v%d" % i, []) for i in range(3)]
COMMITTED = {0: 2, 1: 1}
LAG = {0: len(RECORDS) - 2, 1: len(PARTITION_1) - 1}


def seed(bootstrap):
    """Create the topic, write the records, commit the groups' offsets."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for partition, records in ((0, RECORDS), (1, PARTITION_1)):
        for i, (key, value, headers) in enumerate(records):
            producer.produce(
                TOPIC,
                value=value,
                key=key,
                headers=headers,
                partition=partition,
                timestamp=BASE_MS + i * 1000,
            )
            producer.flush(30)  # one batch each: the browser reads across batches
    assert producer.flush(30) == 0
    for group in (GROUP, HTML_GROUP):
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        try:
            consumer.commit(
                offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()],
                asynchronous=False,
            )
        finally:
            consumer.close()


def serve(base_dir):
    """A broker with ``--http`` under ``base_dir``, seeded; yields
    ``(broker, console base URL)`` and stops it afterwards (a module
    fixture's body)."""
    http = free_port()
    broker = BrokerProcess(
        base_dir / "data", extra_args=["--http", f"tcp:{http}:interface=127.0.0.1"]
    ).start()
    try:
        seed(broker.bootstrap)
        yield broker, f"http://127.0.0.1:{http}"
    finally:
        broker.stop()
