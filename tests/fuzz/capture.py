"""Capture the request frames real clients send, through a recording TCP proxy.

The broker under fuzz advertises the proxy's address, so every connection a
client makes (bootstrap and partition leader alike) passes through it;
client-to-broker bytes are cut into frames and kept. :func:`capture_corpus`
runs confluent-kafka (librdkafka) and kafka-python through a produce, a
group consume with commits and an admin round, and returns the frames: the
seed corpus that :func:`tests.fuzz.harness.mutations` mutates.
"""

import socket
import struct
import threading
import time

import confluent_kafka
import kafka
from confluent_kafka.admin import AdminClient, NewTopic


class RecordingProxy:
    """127.0.0.1:``port`` -> ``upstream``, keeping every client request frame."""

    def __init__(self, port, upstream):
        self.upstream = upstream
        self.frames = []
        self._lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", port))
        self.port = self.server.getsockname()[1]
        self._stop = False
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self):
        self.server.settimeout(0.2)
        while not self._stop:
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            for args in ((client, upstream, True), (upstream, client, False)):
                thread = threading.Thread(target=self._pump, args=args, daemon=True)
                thread.start()
                self._threads.append(thread)

    def _pump(self, source, sink, record):
        pending = b""
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                sink.sendall(data)
                if record:
                    pending += data
                    while len(pending) >= 4:
                        size = struct.unpack_from(">i", pending)[0] + 4
                        if len(pending) < size:
                            break
                        with self._lock:
                            self.frames.append(pending[:size])
                        pending = pending[size:]
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self._stop = True
        self.server.close()


def _confluent_round(bootstrap, topic):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(
        30
    )
    admin.describe_configs(
        [confluent_kafka.admin.ConfigResource(confluent_kafka.admin.ResourceType.TOPIC, topic)]
    )
    for codec in ("none", "gzip", "lz4", "zstd", "snappy"):
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "compression.type": codec, "enable.idempotence": True}
        )
        for i in range(20):
            producer.produce(topic, key=b"k%d" % i, value=b"v" * i, headers=[("h", b"1")])
        producer.flush(30)
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "capture-g", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < 100 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got += 1
    consumer.commit(asynchronous=False)
    consumer.close()


def _kafka_python_round(bootstrap, topic):
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
    for i in range(10):
        producer.send(topic, key=b"k", value=b"kp%d" % i)
    producer.flush(30)
    producer.close()
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id="capture-kp",
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
    )
    for _ in consumer:
        pass
    consumer.commit()
    consumer.close()


def capture_corpus(proxy, topic="fuzz-capture"):
    """The frames real clients send through ``proxy`` (a :class:`RecordingProxy`
    whose port the broker advertises) during a produce/consume/admin round."""
    bootstrap = f"127.0.0.1:{proxy.port}"
    _confluent_round(bootstrap, topic)
    _kafka_python_round(bootstrap, topic)
    time.sleep(0.2)
    with proxy._lock:
        return list(proxy.frames)
