"""Client quotas against the real broker: AlterClientQuotas / DescribeClientQuotas
(pluglog's BlockingClient: kafka-python's and confluent-kafka's admin clients have no
quota calls, see docs/protocol.rst), confluent-kafka producers held to them (and told
of the throttle)."""

import os
import threading
import time

import confluent_kafka
import pytest

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from tests.broker_process import BrokerProcess
from tests.integration.clients import create_topic

QUOTA = 1024 * 1024  # 1 MB/s
VALUE = os.urandom(10_000)


def alter(admin, client_id, key, value, remove=False):
    """AlterClientQuotas v1 (flexible) for one client-id entity; ``admin`` is a
    BlockingClient."""
    body = {
        "entries": [
            {
                "entity": [{"entity_type": "client-id", "entity_name": client_id}],
                "ops": [{"key": key, "value": float(value), "remove": remove}],
            }
        ],
        "validate_only": False,
    }
    return admin.request(codec.ALTER_CLIENT_QUOTAS, 1, body)["entries"][0]["error_code"]


def describe(admin, client_id):
    body = {
        "components": [{"entity_type": "client-id", "match_type": 0, "match": client_id}],
        "strict": False,
    }
    response = admin.request(codec.DESCRIBE_CLIENT_QUOTAS, 1, body)
    assert response["error_code"] == 0
    return {v["key"]: v["value"] for entry in response["entries"] for v in entry["values"]}


class Meter:
    """A confluent-kafka producer sending 10 kB values as fast as it may,
    recording when each one was acknowledged."""

    def __init__(self, bootstrap, topic, client_id):
        self.acks = []
        self.throttles = []
        self.errors = []
        self.producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "linger.ms": 5,
                # A short queue: flushing a throttled backlog takes its time.
                "queue.buffering.max.messages": 200,
                "throttle_cb": self.throttles.append,
            }
        )
        self.topic = topic

    def _acked(self, error, message):
        if error is not None:
            self.errors.append(error)
        else:
            self.acks.append((time.monotonic(), len(message.value())))

    def run(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                self.producer.produce(self.topic, VALUE, on_delivery=self._acked)
                self.producer.poll(0)
            except BufferError:
                self.producer.poll(0.01)
        self.producer.flush(30)
        self.producer.close()

    def rate(self, start, end):
        """Acknowledged value bytes per second in [start, end) (monotonic)."""
        done = sum(size for at, size in self.acks if start <= at < end)
        return done / (end - start)


@pytest.fixture
def quota_broker(tmp_path):
    # Three one-second windows: the first-burst allowance (two padded windows)
    # is short enough for a short test.
    settings = {"quota.window.num": "3", "quota.window.size.seconds": "1"}
    proc = BrokerProcess(tmp_path / "data", settings=settings).start()
    yield proc
    proc.stop()


def test_admin_sets_and_describes_quotas_and_they_persist(tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        admin = BlockingClient.from_bootstrap(broker.bootstrap)
        assert alter(admin, "svc", "producer_byte_rate", 5000) == 0
        assert alter(admin, "svc", "consumer_byte_rate", 7000) == 0
        assert alter(admin, "svc", "no_such_quota", 1) == 42  # INVALID_REQUEST
        assert describe(admin, "svc") == {
            "producer_byte_rate": 5000.0,
            "consumer_byte_rate": 7000.0,
        }
        admin.close()
    finally:
        broker.stop()
    broker = BrokerProcess(data, port=broker.port).start()
    try:
        admin = BlockingClient.from_bootstrap(broker.bootstrap)
        assert describe(admin, "svc") == {
            "producer_byte_rate": 5000.0,
            "consumer_byte_rate": 7000.0,
        }
        alter(admin, "svc", "producer_byte_rate", 0, remove=True)
        assert describe(admin, "svc") == {"consumer_byte_rate": 7000.0}
        admin.close()
    finally:
        broker.stop()


def test_produce_quota_holds_one_client_at_1mb_per_second(quota_broker):
    bootstrap = quota_broker.bootstrap
    create_topic(bootstrap, "quota", partitions=1)
    with BlockingClient.from_bootstrap(bootstrap) as admin:
        assert alter(admin, "slow", "producer_byte_rate", QUOTA) == 0

    alone = Meter(bootstrap, "quota", "fast")
    started = time.monotonic()
    alone.run(3)
    baseline = alone.rate(started + 0.5, started + 3)

    slow, fast = Meter(bootstrap, "quota", "slow"), Meter(bootstrap, "quota", "fast")
    threads = [
        threading.Thread(target=slow.run, args=(10,)),
        threading.Thread(target=fast.run, args=(10,)),
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # Skip the first windows: Kafka's rate lets a new client burst while the
    # measurement window fills.
    window = (started + 4, started + 10)
    slow_rate, fast_rate = slow.rate(*window), fast.rate(*window)
    print(
        f"\nquota 1 MB/s: throttled client {slow_rate / QUOTA:.2f} MB/s, unthrottled "
        f"{fast_rate / QUOTA:.2f} MB/s (alone {baseline / QUOTA:.2f} MB/s), "
        f"{len(slow.throttles)} throttle callbacks"
    )
    assert not slow.errors and not fast.errors
    # Kafka's throttle delays the client past the window's end, so a throttled
    # client lands a little under its quota: 0.796 in one clean CI run.
    assert 0.7 * QUOTA <= slow_rate <= 1.2 * QUOTA
    # The unthrottled client is not held to the quota. Its share of its solo
    # rate depends on the box: on 2 cores it shares the CPU with the throttled
    # client's thread and the broker, and on a quiet machine (solo 618 MB/s) it
    # kept 0.32 of it in one clean CI run. 0.1 still catches a client stalled
    # behind the muted channel.
    assert fast_rate > 3 * QUOTA and fast_rate > 0.1 * baseline
    assert slow.throttles and not fast.throttles
    # librdkafka reports each throttle, and 0 when a throttle has ended.
    assert max(event.throttle_time for event in slow.throttles) > 0
    assert all(isinstance(event, confluent_kafka.ThrottleEvent) for event in slow.throttles)
