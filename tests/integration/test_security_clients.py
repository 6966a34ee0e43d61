"""kafka-python and kcat over SSL, SASL_PLAINTEXT and SASL_SSL; wrong
passwords and unknown users refused with SASL_AUTHENTICATION_FAILED in
every client (confluent-kafka's round trips are in test_security_listeners),
and logged by the broker naming the user, never the password."""

import subprocess
import uuid

import pytest

from tests.broker_process import BrokerProcess, free_port
from tests.integration.secure_broker import (
    MECHANISMS,
    PASSWORD,
    USER,
    add_user,
    confluent_conf,
    sasl_props,
)

CASES = [("SSL", None)] + [
    (proto, mech) for proto in ("SASL_PLAINTEXT", "SASL_SSL") for mech in MECHANISMS
]
BAD_LOGINS = [(USER, "wrong-password"), ("mallory", PASSWORD)]


def _topic(prefix, protocol, mechanism):
    return f"{prefix}-{protocol}-{mechanism}-{uuid.uuid4().hex[:6]}".replace("SCRAM-SHA-", "s")


def kafka_python_conf(secure, protocol, mechanism=None, user=USER, password=PASSWORD):
    conf = {
        "bootstrap_servers": f"127.0.0.1:{secure.ports[protocol]}",
        "security_protocol": protocol,
        "request_timeout_ms": 10000,
    }
    if "SSL" in protocol:
        conf["ssl_cafile"] = secure.certs["ca"]
    if mechanism:
        conf.update(
            sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password
        )
    return conf


@pytest.mark.parametrize("protocol,mechanism", CASES)
def test_kafka_python_roundtrip(secure, protocol, mechanism):
    from kafka import KafkaConsumer, KafkaProducer

    conf = kafka_python_conf(secure, protocol, mechanism)
    topic = _topic("kp", protocol, mechanism)
    producer = KafkaProducer(**conf)
    for i in range(3):
        producer.send(topic, f"v{i}".encode()).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        group_id="g-" + topic,
        auto_offset_reset="earliest",
        consumer_timeout_ms=15000,
        **conf,
    )
    got = []
    for msg in consumer:
        got.append(msg.value)
        if len(got) == 3:
            break
    consumer.close()
    assert got == [b"v0", b"v1", b"v2"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("user,password", BAD_LOGINS)
def test_kafka_python_bad_login_refused(secure, mechanism, user, password, caplog):
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    conf = kafka_python_conf(secure, "SASL_SSL", mechanism, user, password)
    conf["bootstrap_timeout_ms"] = 2000
    with caplog.at_level("INFO", logger="kafka"), pytest.raises(KafkaError):
        KafkaAdminClient(**conf).close()
    # kafka-python keeps retrying the bootstrap; each try ends with error 58.
    assert "[Error 58] SaslAuthenticationFailedError" in caplog.text
    assert "Authentication failed" in caplog.text


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("user,password", BAD_LOGINS)
def test_confluent_bad_login_refused(secure, mechanism, user, password):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    errors = []
    conf = confluent_conf(secure, "SASL_SSL", mechanism, user, password)
    conf["error_cb"] = errors.append
    admin = AdminClient(conf)
    with pytest.raises(Exception):  # noqa: B017 - KafkaException or a timeout
        admin.list_topics(timeout=5)
    admin.poll(1)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any("Authentication failed" in e.str() for e in errors), errors


def test_wrong_password_logged_with_the_user_never_the_password(tmp_path):
    """Its own broker: the module's broker shares its log throttle with the
    other bad-login tests."""
    from confluent_kafka.admin import AdminClient

    data = tmp_path / "data"
    assert add_user(data, USER, PASSWORD).returncode == 0
    sasl, plain = free_port(), free_port()
    listeners = f"SASL_PLAINTEXT://127.0.0.1:{sasl},PLAINTEXT://127.0.0.1:{plain}"
    broker = BrokerProcess(data, port=plain, settings={"listeners": listeners}).start()
    wrong = "wrong-" + uuid.uuid4().hex
    try:
        conf = {"bootstrap.servers": f"127.0.0.1:{sasl}", **sasl_props(USER, wrong)}
        admin = AdminClient({**conf, "log_level": 0})
        with pytest.raises(Exception):  # noqa: B017 - KafkaException or a timeout
            admin.list_topics(timeout=3)
    finally:
        broker.stop()
    log = broker.log()
    lines = [line for line in log.splitlines() if "SASL authentication failed" in line]
    assert lines, log
    assert "(SCRAM-SHA-256) for 127.0.0.1:" in lines[0]
    assert "on listener SASL_PLAINTEXT: invalid credentials for user 'alice'" in lines[0]
    # librdkafka retries every ~50 ms: one line per connection, at most the
    # throttle's burst of 20 per 10 s.
    assert len(lines) <= 20, len(lines)
    assert wrong not in log


def kcat_args(secure, protocol, mechanism=None, user=USER, password=PASSWORD):
    args = ["-b", f"127.0.0.1:{secure.ports[protocol]}", "-X", f"security.protocol={protocol}"]
    if "SSL" in protocol:
        args += ["-X", f"ssl.ca.location={secure.certs['ca']}"]
    if mechanism:
        args += ["-X", f"sasl.mechanism={mechanism}", "-X", f"sasl.username={user}"]
        args += ["-X", f"sasl.password={password}"]
    return args


@pytest.mark.parametrize("protocol,mechanism", CASES)
def test_kcat_roundtrip(secure, protocol, mechanism):
    topic = _topic("kc", protocol, mechanism)
    base = ["kcat", *kcat_args(secure, protocol, mechanism)]
    produced = subprocess.run(
        [*base, "-P", "-t", topic],
        input="one\ntwo\nthree\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        [*base, "-C", "-t", topic, "-o", "beginning", "-c", "3", "-e"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == ["one", "two", "three"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("user,password", BAD_LOGINS)
def test_kcat_bad_login_refused(secure, mechanism, user, password):
    result = subprocess.run(
        ["kcat", *kcat_args(secure, "SASL_SSL", mechanism, user, password), "-L", "-m", "5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "Authentication failed" in result.stderr, result.stderr
