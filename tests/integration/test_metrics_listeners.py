"""Per-listener and quota metrics of a real broker (issue 23): open connections
and failed SASL logins per listener, and the throttle time a producer over its
quota is given."""

import socket
import time
import urllib.request
import uuid

import pytest
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from tests.broker_process import BrokerProcess, free_port
from tests.integration.secure_broker import PASSWORD, USER, add_user, sasl_props

pytestmark = pytest.mark.integration


def scrape(url, wait=10.0):
    """The samples of ``url``/metrics; waits up to ``wait`` s for the
    --http listener, which starts after the Kafka listeners."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
                text = response.read().decode("utf-8")
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_connections_and_authentication_failures_per_listener(tmp_path):
    data = tmp_path / "data"
    assert add_user(data, USER, PASSWORD).returncode == 0
    sasl, plain, http = free_port(), free_port(), free_port()
    listeners = f"SASL_PLAINTEXT://127.0.0.1:{sasl},PLAINTEXT://127.0.0.1:{plain}"
    broker = BrokerProcess(
        data,
        port=plain,
        settings={"listeners": listeners},
        extra_args=["--http", f"tcp:{http}:interface=127.0.0.1"],
    ).start()
    url = f"http://127.0.0.1:{http}"
    try:
        before = scrape(url)
        assert before[("pluglog_connections", (("listener", "PLAINTEXT"),))] == 0
        assert before[("pluglog_connections", (("listener", "SASL_PLAINTEXT"),))] == 0
        assert not [k for k in before if k[0] == "pluglog_authentication_failures_total"]

        with (
            socket.create_connection(("127.0.0.1", plain)),
            socket.create_connection(("127.0.0.1", plain)),
        ):
            time.sleep(0.3)
            during = scrape(url)
            assert during[("pluglog_connections", (("listener", "PLAINTEXT"),))] == 2

        conf = {
            "bootstrap.servers": f"127.0.0.1:{sasl}",
            **sasl_props(USER, "wrong-" + uuid.uuid4().hex),
        }
        admin = AdminClient({**conf, "log_level": 0})
        with pytest.raises(Exception):  # noqa: B017 - KafkaException or a timeout
            admin.list_topics(timeout=3)
        del admin
        time.sleep(0.3)
        after = scrape(url)
    finally:
        broker.stop()
    failures = after[("pluglog_authentication_failures_total", (("listener", "SASL_PLAINTEXT"),))]
    logged = [line for line in broker.log().splitlines() if "SASL authentication failed" in line]
    # Every failed connection is counted; the log keeps at most 20 lines per 10 s.
    assert failures >= len(logged) >= 1
    assert ("pluglog_authentication_failures_total", (("listener", "PLAINTEXT"),)) not in after
    assert "GET /metrics" not in broker.log()  # scrapes leave no access-log line


def test_throttle_time_of_a_producer_over_its_quota(tmp_path):
    from confluent_kafka import Producer

    http = free_port()
    settings = {
        "quota.producer.default": "200000",  # 200 KB/s per client id
        "quota.window.num": "3",
        "quota.window.size.seconds": "1",
    }
    broker = BrokerProcess(
        tmp_path / "data",
        settings=settings,
        extra_args=["--http", f"tcp:{http}:interface=127.0.0.1"],
    ).start()
    url = f"http://127.0.0.1:{http}"
    throttles = []
    try:
        assert not [k for k in scrape(url) if k[0] == "pluglog_throttled_responses_total"]
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "client.id": "greedy",
                "linger.ms": 5,
                "throttle_cb": lambda event: throttles.append(event.throttle_time),
            }
        )
        for _ in range(60):  # 600 KB at once: three seconds' worth
            producer.produce("throttled", b"q" * 10_000)
        producer.flush(30)
        found = scrape(url)
    finally:
        broker.stop()
    throttled = found[("pluglog_throttled_responses_total", (("api", "Produce"),))]
    seconds = found[("pluglog_throttle_time_seconds_total", (("api", "Produce"),))]
    assert [t for t in throttles if t > 0], throttles  # librdkafka was told, too
    assert throttled >= 1 and seconds > 0
    # Every throttle the client reported is one the broker counted.
    assert throttled >= len([t for t in throttles if t > 0])
