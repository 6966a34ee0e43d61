"""Bad input is answered or cut off, logged once, and hurts no other client."""

import socket
import struct
import threading
import time

import confluent_kafka

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from tests.integration.clients import create_topic


def _closed(sock, timeout=5.0):
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _connect(broker):
    return socket.create_connection(("127.0.0.1", broker.port), timeout=5)


class Background:
    """A well-behaved producer+consumer pair running while the abuse happens."""

    def __init__(self, bootstrap, topic):
        self.bootstrap, self.topic = bootstrap, topic
        self.errors = []
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        producer = confluent_kafka.Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 2})

        def report(err, msg):
            if err is not None:
                self.errors.append(err)

        while not self.stop.is_set():
            producer.produce(self.topic, value=b"x" * 100, partition=0, on_delivery=report)
            self.sent += 1
            producer.poll(0.001)
        assert producer.flush(30) == 0


def test_bad_input_does_not_disturb_others(shared_broker):
    topic = "bad-input-bystander"
    create_topic(shared_broker.bootstrap, topic, partitions=1)
    bystander = Background(shared_broker.bootstrap, topic)
    bystander.thread.start()
    log_before = shared_broker.log()
    try:
        # 1. A frame larger than socket.request.max.bytes (100 MiB).
        s = _connect(shared_broker)
        s.sendall(struct.pack(">i", 200 * 1024 * 1024) + b"\0" * 100)
        assert _closed(s)
        # 2. A truncated frame: announced 100 bytes, sent 10, hung up.
        s = _connect(shared_broker)
        s.sendall(struct.pack(">i", 100) + b"\0" * 10)
        s.close()
        # 3. Garbage bytes.
        s = _connect(shared_broker)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 10)
        assert _closed(s)
        # 4. An unknown api key.
        s = _connect(shared_broker)
        s.sendall(struct.pack(">ihhih", 12, 999, 0, 7, -1) + b"\0\0")
        assert _closed(s)
        # 5. An unsupported version of a served API (Metadata v99).
        s = _connect(shared_broker)
        s.sendall(struct.pack(">ihhih", 10, 3, 99, 8, -1))
        assert _closed(s)
        # 6. An unsupported ApiVersions version: the v0 fallback body, error 35.
        with BlockingClient("127.0.0.1", shared_broker.port) as client:
            client.send_raw(struct.pack(">ihhih", 10, 18, 99, 5, -1))
            frame = client.read_frame()
            correlation_id, error, count = struct.unpack_from(">ihi", frame)
            assert (correlation_id, error) == (5, 35)
            assert struct.unpack_from(">hhh", frame, 10)[0] == 18
            # The connection stays usable afterwards.
            resp = client.request(codec.API_VERSIONS, 0, {})
            assert resp["error_code"] == 0
        # 7. A malformed body (Metadata v1 with a topic array count of 1e9).
        s = _connect(shared_broker)
        s.sendall(struct.pack(">ihhih", 14, 3, 1, 9, -1) + struct.pack(">i", 10**9))
        assert _closed(s)
        time.sleep(1.0)
    finally:
        bystander.stop.set()
        bystander.thread.join(60)
    assert shared_broker.alive()
    assert bystander.sent > 100
    assert not bystander.errors, bystander.errors[:3]
    log = shared_broker.log()[len(log_before) :]
    # Each bad connection is logged once.
    assert log.count("frame size 209715200") == 1
    assert log.count("unknown or unserved api key 999") == 1
    assert log.count("unsupported version 99 of api 3") == 1
    assert log.count("malformed request body") == 1
    assert "Traceback" not in log
