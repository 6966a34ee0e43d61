"""Resource limits against the broker process: refused before any state is written.

Each case uses a real client (confluent-kafka's AdminClient) or raw sockets
where no client would send such a thing, checks the Kafka error the client
sees, and that the broker keeps serving and restarts on the same data dir.
"""

import json
import os
import select
import socket
import struct
import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from tests.broker_process import BrokerProcess
from tests.integration.clients import (
    consume_confluent,
    create_topic,
    make_records,
    produce_confluent,
)


def _error(future):
    with pytest.raises(KafkaException) as info:
        future.result(timeout=30)
    return info.value.args[0]


def _metadata(data_dir):
    with open(os.path.join(data_dir, "pluglog-metadata.json"), encoding="utf-8") as handle:
        return json.load(handle)["topics"]


def _round_trip(bootstrap, topic, total=None):
    """Produce 20 more records and read back all ``total`` the topic holds
    (None: at least those 20, when other tests may have written too)."""
    produce_confluent(bootstrap, topic, make_records(20, partitions=1))
    got = len(consume_confluent(bootstrap, topic, 1, total or 20, timeout=20 if total else 5))
    assert got == total if total else got >= 20


def test_partition_caps_refuse_before_writing_metadata(tmp_path):
    broker = BrokerProcess(tmp_path / "data", settings={"max.broker.partitions": "100"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        create_topic(broker.bootstrap, "small", partitions=1)
        before = _metadata(broker.data_dir)
        dirs_before = sorted(os.listdir(broker.data_dir))

        # 100,000 partitions in one CreateTopics: Kafka's per-request cap.
        err = _error(admin.create_topics([NewTopic("huge", 100_000, 1)])["huge"])
        assert err.code() == KafkaError.POLICY_VIOLATION
        assert "Excessively large number of partitions per request" in err.str()

        # CreatePartitions to 2^31-1 (librdkafka refuses > 100,000 itself: raw request).
        with BlockingClient.from_bootstrap(broker.bootstrap) as client:
            body = {
                "topics": [{"name": "small", "count": 2**31 - 1, "assignments": None}],
                "timeout_ms": 30000,
                "validate_only": False,
            }
            (result,) = client.request(codec.CREATE_PARTITIONS, 1, body)["results"]
        assert result["error_code"] == KafkaError.POLICY_VIOLATION, result
        assert "2147483646 requested" in result["error_message"]

        # Under the per-request cap but over max.broker.partitions (100).
        err = _error(admin.create_topics([NewTopic("wide", 200, 1)])["wide"])
        assert err.code() == KafkaError.INVALID_PARTITIONS
        assert "max.broker.partitions" in err.str()
        err = _error(admin.create_partitions([NewPartitions("small", 150)])["small"])
        assert err.code() == KafkaError.INVALID_PARTITIONS

        # Several topics whose sum crosses the per-request cap: all refused.
        futures = admin.create_topics([NewTopic(f"many{i}", 6000, 1) for i in range(2)])
        for future in futures.values():
            assert _error(future).code() == KafkaError.POLICY_VIOLATION

        assert _metadata(broker.data_dir) == before
        assert sorted(os.listdir(broker.data_dir)) == dirs_before
        _round_trip(broker.bootstrap, "small", 20)
    finally:
        assert broker.alive()
        broker.stop()
    broker.start()
    try:
        _round_trip(broker.bootstrap, "small", 40)
    finally:
        broker.stop()


# ---- connections: caps, idle and read timeouts, request memory ---------------

LIMITED = {
    "max.connections.per.ip": "10",
    "connections.max.idle.ms": "3000",
    "request.read.timeout.ms": "1500",
    "queued.max.request.bytes": str(10 * 1024 * 1024),
}


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("limited") / "data", settings=LIMITED).start()
    create_topic(proc.bootstrap, "bystander", partitions=1)
    produce_confluent(proc.bootstrap, "bystander", make_records(1, partitions=1))
    yield proc
    assert proc.alive()
    proc.stop()
    proc.start()  # and the data dir still starts
    assert len(consume_confluent(proc.bootstrap, "bystander", 1, 1)) >= 1
    proc.stop()


def _connect(broker, source="127.0.0.2"):
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect(("127.0.0.1", broker.port))
    return sock


def _closed_within(sock, seconds):
    """True if the broker closes ``sock`` within ``seconds``."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _rss_kb(pid):
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_one_ip_cannot_take_every_connection(limited):
    held = [_connect(limited) for _ in range(30)]
    try:
        time.sleep(0.5)  # well under connections.max.idle.ms
        readable, _, _ = select.select(held, [], [], 0)
        closed = [s for s in readable if _closed_within(s, 0.1)]
        assert len(closed) == 20  # max.connections.per.ip = 10 for 127.0.0.2
        # Clients from another address are served.
        _round_trip(limited.bootstrap, "bystander")
    finally:
        for sock in held:
            sock.close()


def test_idle_connection_is_closed(limited):
    sock = _connect(limited)
    start = time.monotonic()
    assert _closed_within(sock, 10)
    assert 2.5 < time.monotonic() - start < 9  # connections.max.idle.ms = 3000


def test_truncated_and_trickling_requests_are_cut_off(limited):
    truncated = _connect(limited)
    truncated.sendall(struct.pack(">i", 100) + b"\0" * 10)
    trickle = _connect(limited)
    trickle.sendall(struct.pack(">i", 1000))
    start = time.monotonic()
    closed = False
    while time.monotonic() - start < 8 and not closed:
        try:
            trickle.send(b"\0")  # a byte every 0.2 s keeps the socket "active"
        except OSError:
            closed = True
        closed = closed or _closed_within(trickle, 0.2)
    assert closed
    assert time.monotonic() - start < 5  # request.read.timeout.ms = 1500 (+ sweep)
    assert _closed_within(truncated, 1)


def test_partial_frames_cannot_exhaust_memory(limited):
    """8 connections each start a 20 MB request and send 16 MB of it: only
    about one frame's worth is read (queued.max.request.bytes = 10 MB), the
    rest wait unread in the kernel until request.read.timeout.ms closes them."""
    frame_size, sent_size = 20 * 1024 * 1024, 16 * 1024 * 1024
    pid = limited.proc.pid
    before = peak = _rss_kb(pid)
    chunk = b"\0" * (1 << 20)
    socks = [_connect(limited, f"127.0.1.{i}") for i in range(8)]
    for sock in socks:
        sock.setblocking(False)
        sock.send(struct.pack(">i", frame_size))
    sent = [0] * len(socks)
    deadline = time.monotonic() + 1.2  # within the read timeout
    while time.monotonic() < deadline:
        for i, sock in enumerate(socks):
            if sent[i] < sent_size:
                try:
                    sent[i] += sock.send(chunk)
                except OSError:
                    pass
        peak = max(peak, _rss_kb(pid))
        time.sleep(0.005)
    for sock in socks:
        sock.close()
    growth_mb = (peak - before) / 1024
    # Unlimited, 8 x 16 MB = 128 MB is read into buffers; limited, about one frame.
    assert growth_mb < 50, (growth_mb, sent)
    assert max(sent) >= sent_size, sent
    _round_trip(limited.bootstrap, "bystander")


# ---- Metadata: auto-creation and absurd topic lists ---------------------------


def _metadata_request(client, version, names, allow=True):
    body = {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": allow}
    return client.request(codec.METADATA, version, body)


def test_metadata_auto_creation_follows_flag_and_config(tmp_path):
    broker = BrokerProcess(tmp_path / "data", settings={"num.partitions": "2"}).start()
    try:
        with BlockingClient.from_bootstrap(broker.bootstrap) as client:
            # v4+: the request's allow_auto_topic_creation=false (what consumers send).
            (entry,) = _metadata_request(client, 8, ["not-created"], allow=False)["topics"]
            assert entry["error_code"] == KafkaError.UNKNOWN_TOPIC_OR_PART
            (entry,) = _metadata_request(client, 8, ["created"], allow=True)["topics"]
            assert entry["error_code"] == 0 and len(entry["partitions"]) == 2
            # Names repeated in one request are answered once (as Kafka does).
            topics = _metadata_request(client, 1, ["created"] * 1000)["topics"]
            assert [t["name"] for t in topics] == ["created"]
        assert "not-created" not in _metadata(broker.data_dir)
    finally:
        broker.stop()
    broker = BrokerProcess(
        tmp_path / "data", settings={"auto.create.topics.enable": "false"}
    ).start()
    try:
        with BlockingClient.from_bootstrap(broker.bootstrap) as client:
            for version in (1, 8):  # v1-v3 have no flag: the broker config alone decides
                (entry,) = _metadata_request(client, version, ["nope"])["topics"]
                assert entry["error_code"] == KafkaError.UNKNOWN_TOPIC_OR_PART
        assert sorted(_metadata(broker.data_dir)) == ["created"]
    finally:
        broker.stop()


def test_auto_creation_in_one_request_is_capped(tmp_path):
    settings = {"num.partitions": "40", "max.partitions.per.request": "100"}
    broker = BrokerProcess(tmp_path / "data", settings=settings).start()
    try:
        with BlockingClient.from_bootstrap(broker.bootstrap) as client:
            topics = _metadata_request(client, 8, ["a1", "a2", "a3", "a4"])["topics"]
        # 40 partitions each: the third would take the request to 120 > 100.
        codes = [t["error_code"] for t in topics]
        assert codes == [0, 0, KafkaError.POLICY_VIOLATION, KafkaError.POLICY_VIOLATION]
        assert sorted(_metadata(broker.data_dir)) == ["a1", "a2"]
    finally:
        broker.stop()


def test_metadata_naming_hundreds_of_thousands_of_topics(tmp_path):
    """The test-sized version of 2 M one-character names (bench/RESULTS.md has
    the full size): refused before decoding, in bounded time and memory."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        count = 300_000
        body = struct.pack(">i", count) + (struct.pack(">h", 1) + b"x") * count
        header = struct.pack(">hhih", codec.METADATA, 1, 5, 1) + b"c"
        frame = header + body
        pid = broker.proc.pid
        before = _rss_kb(pid)
        sock = _connect(broker, "127.0.0.1")
        start = time.monotonic()
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        assert _closed_within(sock, 10)
        elapsed = time.monotonic() - start
        growth_mb = (_rss_kb(pid) - before) / 1024
        assert elapsed < 1.0, elapsed
        assert growth_mb < 20, growth_mb
        assert "metadata.max.topics.per.request is 10000" in broker.log()
        # Up to the cap it is answered (once per distinct name).
        with BlockingClient.from_bootstrap(broker.bootstrap) as client:
            topics = _metadata_request(client, 1, ["x", "y"] * 5000)["topics"]
        assert [t["name"] for t in topics] == ["x", "y"]
    finally:
        broker.stop()
    broker.start()
    broker.stop()
