"""A real Prometheus server scrapes a real broker's ``/metrics`` (issue 23).

The broker runs with ``--http``; Debian's ``prometheus`` scrapes it every
second; confluent-kafka produces a known number of records; the test then
asks Prometheus's HTTP API (``increase()``, ``rate()``, plain selectors)
and checks the counters moved by exactly the records and bytes produced
(the bytes are the segment files' size: the batches are stored as sent),
and that the consumer-group lag gauge equals the high watermark minus what
the group committed. prometheus_client's own parser reads the page.
"""

import glob
import os
import socket
import struct
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from pluglog import protocol as codec
from pluglog.protocol.records import Record, build_batch
from tests.broker_process import BrokerProcess, free_port
from tests.prometheus import BINARY, PrometheusProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not os.path.exists(BINARY), reason="Debian's prometheus is not installed"),
]

TOPIC = "metered"
RECORDS = 2000


@pytest.fixture
def scraped(tmp_path):
    http = free_port()
    broker = BrokerProcess(
        tmp_path / "data", extra_args=["--http", f"tcp:{http}:interface=127.0.0.1"]
    ).start()
    try:
        prometheus = PrometheusProcess(tmp_path / "prometheus", [f"127.0.0.1:{http}"]).start()
    except Exception:
        broker.stop()
        raise
    yield broker, f"http://127.0.0.1:{http}", prometheus
    prometheus.stop()
    broker.stop()


def _create_topic(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
        future.result(30)


def _produce(bootstrap):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    failed = []

    def report(err, _msg):
        if err is not None:
            failed.append(err)

    for i in range(RECORDS):
        value = b"v" * (i % 97)
        producer.produce(TOPIC, value=value, key=b"k%d" % i, on_delivery=report)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert not failed, failed[:3]


def _segment_bytes(data_dir):
    files = glob.glob(os.path.join(str(data_dir), f"{TOPIC}-*", "*.log"))
    assert files
    return sum(os.path.getsize(f) for f in files)


def _exact_increase(prometheus, metric):
    """``increase()`` evaluated at the newest sample, over a window that
    starts at a sample of 0: Prometheus then extrapolates nothing, so the
    answer is the exact increase."""
    samples = prometheus.query(f"{metric}[5m]")
    assert len(samples) == 1, samples
    values = samples[0]["values"]
    assert float(values[0][1]) == 0.0, values[:3]  # scraped before the first record
    return prometheus.value(f"increase({metric}[5m])", at=values[-1][0])


def _unknown_partition_produce(bootstrap):
    """A Produce to partition 99 of the topic: the fast lane's error answer."""
    records = build_batch([Record(b"x", b"k")], base_timestamp=1)
    topic_data = [{"name": TOPIC, "partition_data": [{"index": 99, "records": records}]}]
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": topic_data}
    frame = codec.encode_request(codec.PRODUCE, 8, 5, "metrics-test", body)
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frame)
        (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
        sock.recv(size, socket.MSG_WAITALL)


def test_prometheus_sees_exact_records_bytes_and_lag(scraped):
    broker, http, prometheus = scraped
    _create_topic(broker.bootstrap)
    messages = f'pluglog_messages_in_total{{topic="{TOPIC}"}}'
    size = f'pluglog_bytes_in_total{{topic="{TOPIC}"}}'
    # The topic's counters exist (at 0) in Prometheus before anything is produced.
    prometheus.wait_value(messages, lambda v: v == 0)
    prometheus.wait_value(size, lambda v: v == 0)

    _produce(broker.bootstrap)
    expected_bytes = _segment_bytes(broker.data_dir)
    assert prometheus.wait_value(messages, lambda v: v > 0) == RECORDS
    assert prometheus.wait_value(size, lambda v: v > 0) == expected_bytes
    assert _exact_increase(prometheus, messages) == RECORDS
    assert _exact_increase(prometheus, size) == expected_bytes
    assert prometheus.value(f"rate({messages}[1m])") > 0
    produce_requests = prometheus.wait_value(
        'pluglog_requests_total{api="Produce"}', lambda v: v > 0
    )
    assert produce_requests <= RECORDS  # counted per request, never per record

    # A group commits part of each partition; the lag gauge says the rest.
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "billing", "enable.auto.commit": False}
    )
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), 10)[1] for p in (0, 1)}
        assert sum(ends.values()) == RECORDS
        consumer.commit(
            offsets=[TopicPartition(TOPIC, p, ends[p] // 3) for p in (0, 1)], asynchronous=False
        )
        committed = {
            tp.partition: tp.offset
            for tp in consumer.committed([TopicPartition(TOPIC, p) for p in (0, 1)], 10)
        }
    finally:
        consumer.close()
    for p in (0, 1):
        labels = f'group="billing",topic="{TOPIC}",partition="{p}"'
        want = ends[p] - committed[p]
        lag = prometheus.wait_value(
            f"pluglog_consumer_group_lag{{{labels}}}", lambda v, want=want: v == want
        )
        assert lag > 0
        offset = prometheus.value(f"pluglog_consumer_group_committed_offset{{{labels}}}")
        assert offset == committed[p]

    # An error answer is counted by its code (the fast lane answered it).
    _unknown_partition_produce(broker.bootstrap)
    prometheus.wait_value(
        'pluglog_request_errors_total{api="Produce",error="UNKNOWN_TOPIC_OR_PARTITION"}',
        lambda v: v == 1,
    )

    # prometheus_client's parser reads the page; the families have their types.
    with urllib.request.urlopen(f"{http}/metrics", timeout=10) as response:
        assert response.headers["content-type"].startswith("text/plain")
        text = response.read().decode("utf-8")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, kind in {
        "pluglog_messages_in": "counter",
        "pluglog_bytes_in": "counter",
        "pluglog_bytes_out": "counter",
        "pluglog_requests": "counter",
        "pluglog_request_duration_seconds": "histogram",
        "pluglog_request_errors": "counter",
        "pluglog_connections": "gauge",
        "pluglog_purgatory_size": "gauge",
        "pluglog_log_size_bytes": "gauge",
        "pluglog_log_segments": "gauge",
        "pluglog_partition_high_watermark": "gauge",
        "pluglog_under_replicated_partitions": "gauge",
        "pluglog_controller": "gauge",
        "pluglog_consumer_group_lag": "gauge",
        "process_cpu_seconds": "counter",
        "process_resident_memory_bytes": "gauge",
        "process_open_fds": "gauge",
    }.items():
        assert families[name].type == kind, name
    histogram = {
        (s.name, s.labels.get("le")): s.value
        for s in families["pluglog_request_duration_seconds"].samples
        if s.labels["api"] == "Produce"
    }
    requests = {s.labels["api"]: s.value for s in families["pluglog_requests"].samples}
    assert histogram[("pluglog_request_duration_seconds_count", None)] == requests["Produce"]
    assert histogram[("pluglog_request_duration_seconds_bucket", "+Inf")] == requests["Produce"]
    sizes = {
        s.labels["partition"]: s.value
        for s in families["pluglog_log_size_bytes"].samples
        if s.labels["topic"] == TOPIC
    }
    assert sum(sizes.values()) == expected_bytes
