"""KIP-368 re-authentication against the broker process, with real clients.

The broker runs a SASL_PLAINTEXT listener with ``connections.max.reauth.ms``
of 2 s. confluent-kafka (librdkafka) learns the lifetime from
SaslAuthenticate and re-authenticates on its own: a producer sending for
several lifetimes keeps one connection and loses nothing. Once its user's
credentials are deleted, its next re-authentication fails and the broker
closes the connection. kafka-python re-authenticates as well. A client that
does not re-authenticate (raw requests) is closed at its first request after
the lifetime.
"""

import re
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient, ProtocolError
from tests.broker_process import BrokerProcess, free_port
from tests.integration.clients import create_topic
from tests.integration.secure_broker import add_user

pytestmark = pytest.mark.integration

LIFETIME_MS = 2000


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("reauth") / "data"
    for user in ("alice", "bob"):
        done = add_user(data, user, f"{user}-pw")
        assert done.returncode == 0, done.stderr
    sasl, plain = free_port(), free_port()
    proc = BrokerProcess(
        data,
        port=plain,
        settings={
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{sasl},PLAINTEXT://127.0.0.1:{plain}",
            "connections.max.reauth.ms": str(LIFETIME_MS),
        },
    ).start()
    proc.sasl = ("127.0.0.1", sasl)
    yield proc
    proc.stop()


def _producer(broker, user, errors):
    return confluent_kafka.Producer(
        {
            "bootstrap.servers": "{}:{}".format(*broker.sasl),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user,
            "sasl.password": f"{user}-pw",
            "message.timeout.ms": 4000,
            "error_cb": errors.append,
        }
    )


def _send_for(producer, topic, seconds):
    """Produce one message every 100 ms for ``seconds``; the delivery errors."""
    failed = []

    def delivered(error, _message):
        if error is not None:
            failed.append(error)

    deadline = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < deadline:
        producer.produce(topic, value=b"m%d" % sent, on_delivery=delivered)
        sent += 1
        producer.poll(0.1)
    producer.flush(10)
    return sent, failed


def test_confluent_reauthenticates_and_is_closed_once_its_user_is_gone(reauth_broker):
    broker = reauth_broker
    topic = "reauth"
    create_topic(broker.bootstrap, topic, partitions=1)
    start = len(broker.log_since_start())
    errors = []
    producer = _producer(broker, "alice", errors)
    sent, failed = _send_for(producer, topic, 2.5 * LIFETIME_MS / 1000)
    assert failed == [] and errors == [], (failed, errors)
    log = broker.log_since_start()[start:]
    # librdkafka re-authenticated its connections (at 90% of each lifetime):
    # none was closed for an expired session, and every message is stored.
    assert len(re.findall(r"re-authenticated as User:alice", log)) >= 2
    assert "SASL session expired" not in log
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "r", "auto.offset.reset": "earliest"}
    )
    lo, hi = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10)
    consumer.close()
    assert hi - lo == sent

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        deletion = UserScramCredentialDeletion("alice", mechanism)
        admin.alter_user_scram_credentials([deletion])["alice"].result(15)
    # Within one lifetime the re-authentication fails and the broker closes.
    _sent, failed = _send_for(producer, topic, 2.5 * LIFETIME_MS / 1000)
    log = broker.log_since_start()
    assert re.search(r"SASL authentication failed \(SCRAM-SHA-256\).*unknown user 'alice'", log)
    assert failed or any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors)
    # Another user's producer is unaffected.
    others = []
    sent, failed = _send_for(_producer(broker, "bob", others), topic, 1.0)
    assert failed == [] and others == []


def test_a_client_that_does_not_reauthenticate_is_closed_after_the_lifetime(reauth_broker):
    with BlockingClient(*reauth_broker.sasl) as client:
        shake = client.request(codec.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert shake["error_code"] == 0
        answer = client.request(36, 1, {"auth_bytes": b"\0bob\0bob-pw"})
        assert (answer["error_code"], answer["session_lifetime_ms"]) == (0, LIFETIME_MS)
        assert client.request(codec.METADATA, 1, {"topics": []})["brokers"]
        time.sleep(LIFETIME_MS / 1000 + 0.3)
        with pytest.raises((ProtocolError, OSError)):
            client.request(codec.METADATA, 1, {"topics": []})
    assert "SASL session expired without re-authentication" in reauth_broker.log_since_start()


def test_kafka_python_reauthenticates_too(reauth_broker):
    import kafka

    start = len(reauth_broker.log_since_start())
    producer = kafka.KafkaProducer(
        bootstrap_servers="{}:{}".format(*reauth_broker.sasl),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="bob",
        sasl_plain_password="bob-pw",
    )
    try:
        futures = []
        deadline = time.monotonic() + 2.5 * LIFETIME_MS / 1000
        while time.monotonic() < deadline:
            futures.append(producer.send("reauth-kp", b"x"))
            time.sleep(0.1)
        producer.flush(10)
        assert all(f.get(10).offset >= 0 for f in futures)
    finally:
        producer.close()
    log = reauth_broker.log_since_start()[start:]
    assert log.count("re-authenticated as User:bob") >= 2
    assert "SASL session expired" not in log
