"""Sessions of static members that stop without LeaveGroup, with real clients.

Static members (``group.instance.id``) send no LeaveGroup when they close, so
only their session ends their membership. The sequence is issue 26's: three
static members with a 5 s session; the first closes, the second closes 3.5 s
later, and the third closes while its JoinGroup for the rebalance that the
first one's expiry started is parked on the coordinator (the rebalance waits
for the second one's session). Each member must be gone from
DescribeConsumerGroups within ``session.timeout.ms`` (plus the describe
polling and scheduling slack) of its close; the third used to stay until the
rebalance completed plus a whole session.
"""

import threading
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from tests import kafka_python_group
from tests.broker_process import BrokerProcess
from tests.integration.clients import create_topic

pytestmark = pytest.mark.integration

SESSION_MS = 5000
#: how late a member may disappear: the coordinator's timers are exact, this
#: covers describe polling (0.1 s) and a loaded machine's scheduling
SLACK_S = 1.0
INSTANCES = ("s0", "s1", "s2")


@pytest.fixture(scope="module")
def short_session_broker(tmp_path_factory):
    # Kafka's default group.min.session.timeout.ms (6 s) refuses a 5 s session.
    proc = BrokerProcess(
        tmp_path_factory.mktemp("sessions") / "data",
        settings={"group.min.session.timeout.ms": "1000"},
    ).start()
    yield proc
    proc.stop()


class Member(threading.Thread):
    """One static consumer polling in its own thread until told to close."""

    def __init__(self, client, bootstrap, group, topic, instance):
        super().__init__(daemon=True)
        self.client, self.bootstrap, self.group, self.topic = client, bootstrap, group, topic
        self.instance = instance
        self.assigned = 0
        self.stopping = threading.Event()
        self.closed_at = None
        self.error = None

    def run(self):
        try:
            if self.client == "confluent":
                self._run_confluent()
            else:
                self._run_kafka_python()
        except Exception as exc:  # reported by the test, not lost in a thread
            self.error = exc

    def _run_confluent(self):
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "group.instance.id": self.instance,
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": 500,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([self.topic])
        while not self.stopping.is_set():
            consumer.poll(0.1)
            self.assigned = len(consumer.assignment())
        consumer.close()
        self.closed_at = time.monotonic()

    def _run_kafka_python(self):
        consumer = kafka_python_group.group_consumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            group_instance_id=self.instance,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=500,
            auto_offset_reset="earliest",
        )
        while not self.stopping.is_set():
            # Plain poll, so a join may still be in flight when close() comes.
            consumer.poll(timeout_ms=100)
            self.assigned = len(consumer.assignment())
        consumer.close()
        self.closed_at = time.monotonic()

    def close(self):
        self.stopping.set()
        self.join(30)
        assert self.error is None, f"{self.instance}: {self.error!r}"
        assert self.closed_at is not None, f"{self.instance} did not close"


def describe(admin, group):
    """The group's description (DescribeConsumerGroups)."""
    return admin.describe_consumer_groups([group])[group].result(timeout=10)


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Watcher(threading.Thread):
    """Polls DescribeConsumerGroups; notes when each instance is first missing."""

    def __init__(self, admin, group):
        super().__init__(daemon=True)
        self.admin, self.group = admin, group
        self.gone_at = {}
        self.state = None
        self.stopping = threading.Event()

    def run(self):
        while not self.stopping.is_set() and len(self.gone_at) < len(INSTANCES):
            description = describe(self.admin, self.group)
            now = time.monotonic()
            self.state = description.state
            present = {m.group_instance_id for m in description.members}
            for instance in INSTANCES:
                if instance not in present:
                    self.gone_at.setdefault(instance, now)
            time.sleep(0.1)


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_closed_static_members_expire_within_their_session(short_session_broker, client):
    broker = short_session_broker
    bootstrap = broker.bootstrap
    topic, group = f"sessions-{client}", f"sessions-{client}-g"
    create_topic(bootstrap, topic, partitions=6)
    members = [Member(client, bootstrap, group, topic, i) for i in INSTANCES]
    watcher = Watcher(AdminClient({"bootstrap.servers": bootstrap}), group)
    for member in members:
        member.start()
    try:
        wait_until(
            lambda: all(m.assigned for m in members) and sum(m.assigned for m in members) == 6,
            60,
            "three members sharing six partitions",
        )
        watcher.start()
        members[0].close()
        time.sleep(3.5)
        members[1].close()
        # s0's session ends: the rebalance starts and s2 rejoins, where it
        # waits for s1 (closed, its session still running).
        wait_until(
            lambda: watcher.state == confluent_kafka.ConsumerGroupState.PREPARING_REBALANCING,
            SESSION_MS / 1000 + SLACK_S,
            "the rebalance s0's expiry starts",
        )
        time.sleep(1.0)
        members[2].close()
        watcher.join(SESSION_MS / 1000 + 5)
    finally:
        watcher.stopping.set()
        for member in members:
            member.stopping.set()
    since_close = {
        m.instance: round(watcher.gone_at.get(m.instance, float("inf")) - m.closed_at, 2)
        for m in members
    }
    late = {i: s for i, s in since_close.items() if s > SESSION_MS / 1000 + SLACK_S}
    assert not late, f"seconds from close to expiry beyond the {SESSION_MS} ms session: {late}"
    if client == "confluent":
        # The sequence did reach the case it is about: s2 closed while parked.
        assert "closed its connection with a JoinGroup pending" in broker.log_since_start()
