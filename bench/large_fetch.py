"""Consume with large fetches: 1 KB records, fetch.max.bytes 50 MB, over loopback.

Starts a broker (tests/broker_process.py) per mode, loads ``--mb`` MB of
1 KB records into one partition (pre-built 1 MB batches sent with pluglog's
blocking client, so loading is cheap), then reads the whole log back twice:

* ``raw``: a minimal Kafka client (pluglog's codec; the socket is drained
  with ``recv_into`` into one reused buffer; only batch headers are looked
  at to find the next offset). This measures what the broker can serve.
* ``librdkafka``: confluent-kafka with fetch.max.bytes = max.partition.fetch.bytes
  = 50 MB, consume(10000) in Python; the client's own cost dominates here.

Modes: ``sendfile`` (the default server path) and ``copy`` (PLUGLOG_SENDFILE=0:
file ranges read into Python and written through the transport), for the
before/after comparison. Broker CPU seconds per GB come from /proc.

Usage: ``python3 bench/large_fetch.py [--mb 1024] [--modes sendfile,copy]``.
"""

import argparse
import os
import shutil
import socket
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from pluglog import protocol as codec  # noqa: E402
from pluglog.client.blocking import FETCH_VERSION, BlockingClient, fetch_body  # noqa: E402
from pluglog.protocol.records import Record, build_batch  # noqa: E402
from pluglog.storage.records import scan_batches  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402

FETCH_MAX = 50 * 1024 * 1024
TOPIC = "large"


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(broker, megabytes):
    """Returns the number of records loaded."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(15)
    batch = build_batch([Record(value=os.urandom(1000)) for _ in range(1000)], base_timestamp=1)
    body = {
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
    }
    total = 0
    with BlockingClient.from_bootstrap(broker.bootstrap) as client:
        for _ in range(megabytes * 1024 * 1024 // len(batch)):
            response = client.request(codec.PRODUCE, 8, body)
            code = response["responses"][0]["partition_responses"][0]["error_code"]
            if code:
                raise RuntimeError(f"produce failed with error {code}")
            total += 1000
    return total


def raw_consume(broker):
    """Fetch v11 from offset 0 to the end; returns bytes of record data."""
    sock = socket.create_connection(("127.0.0.1", broker.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(FETCH_MAX + (1 << 20))
    view = memoryview(buf)
    offset, total, cid = 0, 0, 0
    while True:
        cid += 1
        body = fetch_body(TOPIC, {0: offset}, max_bytes=FETCH_MAX, partition_max_bytes=FETCH_MAX)
        sock.sendall(codec.encode_request(codec.FETCH, FETCH_VERSION, cid, "large-fetch", body))
        got = 0
        while got < 4:
            got += sock.recv_into(view[got:], 4 - got)
        (size,) = struct.unpack_from(">i", buf, 0)
        got = 0
        while got < size:
            n = sock.recv_into(view[got:size], size - got)
            if not n:
                raise RuntimeError("broker closed the connection")
            got += n
        _, response = codec.decode_response(codec.FETCH, 11, view[:size])
        records = response["responses"][0]["partitions"][0]["records"]
        if not records:
            break
        entries, _ = scan_batches(records, check_crc=False)
        offset = entries[-1][1].next_offset
        total += len(records)
    sock.close()
    return total


def librdkafka_consume(broker, expected_records):
    import confluent_kafka as ck

    consumer = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "large-fetch",
            "enable.auto.commit": False,
            "fetch.max.bytes": FETCH_MAX,
            "max.partition.fetch.bytes": FETCH_MAX,
            "receive.message.max.bytes": FETCH_MAX + (1 << 20),
            "queued.max.messages.kbytes": 2 * FETCH_MAX // 1024,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([ck.TopicPartition(TOPIC, 0, ck.OFFSET_BEGINNING)])
    got, total = 0, 0
    deadline = time.monotonic() + 120
    while got < expected_records and time.monotonic() < deadline:
        for message in consumer.consume(10000, 1.0):
            if message.error() is None:
                got += 1
                total += len(message.value())
    consumer.close()
    return total


def run_mode(mode, megabytes, work):
    data = os.path.join(work, f"large-{mode}")
    shutil.rmtree(data, ignore_errors=True)
    if mode == "copy":
        os.environ["PLUGLOG_SENDFILE"] = "0"
    broker = BrokerProcess(data).start()
    os.environ.pop("PLUGLOG_SENDFILE", None)
    try:
        loaded = load(broker, megabytes)
        pid = broker.proc.pid
        results = []
        for name, reader in (("raw", raw_consume), ("librdkafka", None)):
            c0, t0 = cpu_seconds(pid), time.perf_counter()
            if reader is None:
                nbytes = librdkafka_consume(broker, loaded)
            else:
                nbytes = reader(broker)
            seconds = time.perf_counter() - t0
            cpu = cpu_seconds(pid) - c0
            results.append((name, nbytes, seconds, cpu))
        for name, nbytes, seconds, cpu in results:
            print(
                f"{mode:8s} {name:10s} {nbytes / 1e9:6.2f} GB in {seconds:6.2f} s = "
                f"{nbytes / seconds / 1e9:5.2f} GB/s, broker CPU {cpu / (nbytes / 1e9):.2f} s/GB",
                flush=True,
            )
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--modes", default="sendfile,copy")
    parser.add_argument("--work", default="/tmp/pluglog-bench")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    for mode in args.modes.split(","):
        run_mode(mode, args.mb, args.work)


if __name__ == "__main__":
    main()
