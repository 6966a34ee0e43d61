"""``ssl.client.auth`` and certificate principals, with confluent-kafka.

Certificates are made in the test with ``cryptography`` (tests/tls_certs.py):
a CA, the broker's certificate and a client certificate whose subject is
O=pluglog, OU=eng, CN=alice. With ``required`` a client without a
certificate cannot connect; the principal is Kafka's default X.500 name
``User:CN=alice,OU=eng,O=pluglog`` and ACLs on it apply. With ``requested``
a client without a certificate is User:ANONYMOUS, and
``ssl.principal.mapping.rules`` turns the subject into ``User:alice``.
"""

import uuid

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from pluglog.cli.login import connect
from tests.broker_process import BrokerProcess, free_port
from tests.integration.secure_broker import add_user
from tests.tls_certs import make_certs

ADMIN = ("admin", "admin-pw")
SUBJECT = x509.Name(
    [
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pluglog"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
        x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
    ]
)
X500 = "User:CN=alice,OU=eng,O=pluglog"


def _broker(base, client_auth, **settings):
    certs = make_certs(base / "certs", client_subject=SUBJECT)
    data = base / "data"
    assert add_user(data, *ADMIN).returncode == 0
    ssl, sasl, plain = free_port(), free_port(), free_port()
    listeners = f"SSL://127.0.0.1:{ssl},SASL_PLAINTEXT://127.0.0.1:{sasl}"
    proc = BrokerProcess(
        data,
        port=plain,
        settings={
            "listeners": listeners + f",PLAINTEXT://127.0.0.1:{plain}",
            "ssl.keystore.location": certs["server_cert"],
            "ssl.key.location": certs["server_key"],
            "ssl.truststore.location": certs["ca"],
            "ssl.client.auth": client_auth,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
            **settings,
        },
    ).start()
    proc.ssl = f"127.0.0.1:{ssl}"
    proc.sasl = f"127.0.0.1:{sasl}"
    proc.certs = certs
    return proc


@pytest.fixture(scope="module")
def required(tmp_path_factory):
    proc = _broker(tmp_path_factory.mktemp("mtls-required"), "required")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def requested(tmp_path_factory):
    proc = _broker(
        tmp_path_factory.mktemp("mtls-requested"),
        "requested",
        **{"ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=eng,.*$/$1/L,DEFAULT"},
    )
    yield proc
    proc.stop()


def ssl_conf(broker, with_cert=True):
    conf = {
        "bootstrap.servers": broker.ssl,
        "security.protocol": "SSL",
        "ssl.ca.location": broker.certs["ca"],
        "message.timeout.ms": 5000,
    }
    if with_cert:
        conf["ssl.certificate.location"] = broker.certs["client_cert"]
        conf["ssl.key.location"] = broker.certs["client_key"]
    return conf


def allow_write(broker, principal, topic):
    props = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": ADMIN[0],
        "sasl.password": ADMIN[1],
    }
    binding = {
        "resource_type": 2,
        "resource_name": topic,
        "resource_pattern_type": 3,
        "principal": principal,
        "host": "*",
        "operation": 4,  # WRITE
        "permission_type": 3,
    }
    with connect(broker.sasl, props) as admin:
        answer = admin.request(30, 1, {"creations": [binding]})
        assert answer["results"][0]["error_code"] == 0
        body = {
            "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
            "timeout_ms": 10000,
            "validate_only": False,
        }
        assert admin.request(19, 4, body)["topics"][0]["error_code"] == 0


def produce(conf, topic):
    from confluent_kafka import Producer

    errors = []
    producer = Producer(conf)
    producer.produce(topic, b"v", on_delivery=lambda e, _m: errors.append(e))
    producer.flush(15)
    return [e.code() if e is not None else None for e in errors]


def test_required_refuses_a_client_without_a_certificate(required):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(ssl_conf(required))
    assert list(admin.list_topics(timeout=10).brokers) == [0]
    without = AdminClient(ssl_conf(required, with_cert=False))
    with pytest.raises(KafkaException):
        without.list_topics(timeout=4)


def test_certificate_principal_is_the_x500_name_and_acls_apply(required):
    from confluent_kafka import KafkaError

    suffix = uuid.uuid4().hex[:6]
    mine, other = f"mtls-{suffix}", f"mtls-other-{suffix}"
    allow_write(required, X500, mine)
    allow_write(required, "User:bob", other)
    assert produce(ssl_conf(required), mine) == [None]
    assert produce(ssl_conf(required), other) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_requested_and_principal_mapping_rules(requested):
    from confluent_kafka import KafkaError

    topic = f"mtls-map-{uuid.uuid4().hex[:6]}"
    allow_write(requested, "User:alice", topic)  # the mapped name, not the X.500 one
    assert produce(ssl_conf(requested), topic) == [None]
    # Requested, not required: no certificate still connects, as User:ANONYMOUS.
    without = produce(ssl_conf(requested, with_cert=False), topic)
    assert without == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
