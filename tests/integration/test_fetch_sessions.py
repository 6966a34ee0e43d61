"""Incremental fetch sessions (KIP-227) with real clients on a real broker.

kafka-python opens a session and then sends only changed partitions; it
reads a 200-partition topic completely and in order, also while records
keep arriving and when a small fetch.max.bytes cuts every answer short. The broker's ``/metrics``
shows the session. confluent-kafka (librdkafka: session 0, epoch -1) opens
none and reads as before.
"""

import time
import urllib.request

import kafka
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pluglog.broker.fetch_sessions import SWEEP_MS
from tests.broker_process import BrokerProcess, free_port
from tests.integration.clients import (
    _norm_headers,
    by_partition,
    consume_confluent,
    create_topic,
    make_records,
    produce_confluent,
)

pytestmark = pytest.mark.integration

PARTITIONS = 200


@pytest.fixture
def metered(tmp_path):
    http = free_port()
    broker = BrokerProcess(
        tmp_path / "data", extra_args=["--http", f"tcp:{http}:interface=127.0.0.1"]
    ).start()
    yield broker, f"http://127.0.0.1:{http}/metrics"
    broker.stop()


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode("utf-8")
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_kafka_python_reads_many_partitions_through_a_session(metered):
    broker, url = metered
    topic = "sessions"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    first = make_records(3000, PARTITIONS)
    later = make_records(1000, PARTITIONS, seed=3000)
    produce_confluent(broker.bootstrap, topic, first)

    # Small answers: every response is cut by fetch.max.bytes, and the
    # partitions left out must come in later incremental answers.
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        fetch_max_bytes=4096,
        max_partition_fetch_bytes=2048,
    )
    tps = [kafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    out = []
    produced_later = False
    deadline = time.monotonic() + 60
    try:
        while len(out) < len(first) + len(later) and time.monotonic() < deadline:
            for tp_records in consumer.poll(timeout_ms=500).values():
                for msg in tp_records:
                    out.append((msg.partition, msg.key, msg.value, _norm_headers(msg.headers)))
            if not produced_later and len(out) >= len(first):
                # New records on a session whose partitions are all caught up.
                produce_confluent(broker.bootstrap, topic, later)
                produced_later = True
        found = scrape(url)
    finally:
        consumer.close()
    assert by_partition(out) == by_partition(first + later)
    # One session served every fetch: the client never had to start over
    # (a wrong epoch or a full answer it could not match would reopen one).
    assert found[("pluglog_requests_total", (("api", "Fetch"),))] > 10
    assert found[("pluglog_fetch_sessions_created_total", ())] == 1
    assert found[("pluglog_fetch_sessions", (("kind", "consumer"),))] == 1
    assert found[("pluglog_fetch_session_partitions", ())] == PARTITIONS

    # librdkafka fetches sessionless; it opens no session and reads the same.
    created = found[("pluglog_fetch_sessions_created_total", ())]
    got = consume_confluent(broker.bootstrap, topic, PARTITIONS, len(out))
    assert by_partition(got) == by_partition(first + later)
    assert scrape(url)[("pluglog_fetch_sessions_created_total", ())] == created


def test_kafka_python_pause_and_resume_forget_and_re_add_partitions(metered):
    """Pausing partitions makes kafka-python forget them in its session
    (forgotten_topics_data); records written to them meanwhile arrive only
    after resume, when they are added back."""
    broker, url = metered
    topic = "paused"
    create_topic(broker.bootstrap, topic, 20)
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    tps = [kafka.TopicPartition(topic, p) for p in range(20)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)

    def read(expected, timeout=30):
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for tp_records in consumer.poll(timeout_ms=300).values():
                out.extend((m.partition, m.value) for m in tp_records)
        return out

    try:
        first = [(p, None, f"a{p}".encode(), []) for p in range(20)]
        produce_confluent(broker.bootstrap, topic, first)
        assert sorted(read(20)) == sorted((p, v) for p, _k, v, _h in first)
        consumer.pause(*tps[:10])
        read(0, timeout=1)  # a fetch or two that forget the paused partitions
        second = [(p, None, f"b{p}".encode(), []) for p in range(20)]
        produce_confluent(broker.bootstrap, topic, second)
        got = read(10)
        assert sorted(got) == [(p, f"b{p}".encode()) for p in range(10, 20)]
        assert read(1, timeout=2) == []  # nothing from the paused ones
        found = scrape(url)
        assert found[("pluglog_fetch_session_partitions", ())] == 10
        consumer.resume(*tps[:10])
        assert sorted(read(10)) == [(p, f"b{p}".encode()) for p in range(10)]
        assert scrape(url)[("pluglog_fetch_session_partitions", ())] == 20
        assert scrape(url)[("pluglog_fetch_sessions_created_total", ())] == 1
    finally:
        consumer.close()


def test_many_partitions_read_exactly_once_while_records_trickle_in(metered):
    """1,000 partitions, one kafka-python consumer: a session's fetch reads
    only the partitions that changed, and parks on the session between
    trickles of records to a few partitions at a time. Every record
    arrives exactly once, in order; confluent-kafka (sessionless) reads
    the same."""
    broker, url = metered
    topic = "trickle"
    partitions = 1000
    create_topic(broker.bootstrap, topic, partitions)
    first = make_records(2000, partitions)
    produce_confluent(broker.bootstrap, topic, first)
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    tps = [kafka.TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    out = []

    def poll_until(count, timeout=60):
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for tp_records in consumer.poll(timeout_ms=300).values():
                for msg in tp_records:
                    out.append((msg.partition, msg.key, msg.value, _norm_headers(msg.headers)))

    later = []
    waits = []
    try:
        poll_until(len(first))
        # Caught up: trickles of 7 records, each to a few partitions, with
        # the consumer's fetches parked in between.
        for n in range(12):
            trickle = [
                ((p * 37 + n * 101) % partitions, k, v, h)
                for p, k, v, h in make_records(7, partitions, seed=10_000 + 7 * n)
            ]
            produce_confluent(broker.bootstrap, topic, trickle)
            later.extend(trickle)
            started = time.monotonic()
            poll_until(len(first) + len(later), timeout=20)
            waits.append(time.monotonic() - started)
        # Nothing new for a while, then one record: the parked fetch wakes.
        poll_until(len(out) + 1, timeout=1.5)
        last = [(partitions - 1, b"last", b"v", [])]
        produce_confluent(broker.bootstrap, topic, last)
        later.extend(last)
        started = time.monotonic()
        poll_until(len(first) + len(later), timeout=20)
        waits.append(time.monotonic() - started)
        poll_until(len(out) + 1, timeout=1.0)  # and nothing more comes
        found = scrape(url)
    finally:
        consumer.close()
    assert by_partition(out) == by_partition(first + later)
    # Delivered by the appends' marks, not by the session's full read
    # every SWEEP_MS (which would hide a change no hook reported).
    assert max(waits) < SWEEP_MS / 1000 - 2, waits
    assert found[("pluglog_fetch_sessions_created_total", ())] == 1
    got = consume_confluent(broker.bootstrap, topic, partitions, len(first) + len(later))
    assert by_partition(got) == by_partition(first + later)
