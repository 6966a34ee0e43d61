"""The replica fetchers' connection (pluglog.replication.peer, with the
listener choice of pluglog.security.interbroker) against a real secured broker:
SASL_PLAINTEXT and SASL_SSL logins with PLAIN and SCRAM, the
CA check on TLS, and the start-up refusals of a setup that cannot work."""

import pytest

from pluglog.client.connection import KafkaConnectionError
from pluglog.config import BrokerConfig, parse_settings
from pluglog.errors import ConfigError, KafkaError
from pluglog.protocol import api_keys
from pluglog.replication import peer
from pluglog.security import interbroker
from tests.integration.secure_broker import PASSWORD, USER
from tests.zk_cluster import ReactorThread


@pytest.fixture(scope="module")
def rt():
    thread = ReactorThread()
    yield thread
    thread.stop()


def _config(secure, listener, mechanism, password=PASSWORD, **extra):
    listeners = ",".join(f"{n}://127.0.0.1:{p}" for n, p in secure.ports.items())
    settings = {
        "listeners": listeners,
        "ssl.keystore.location": secure.certs["server_cert"],
        "ssl.key.location": secure.certs["server_key"],
        "ssl.truststore.location": secure.certs["ca"],
        "inter.broker.listener.name": listener,
        "sasl.mechanism.inter.broker.protocol": mechanism,
        "inter.broker.sasl.username": USER,
        "inter.broker.sasl.password": password,
        **extra,
    }
    return parse_settings(settings, BrokerConfig())


def _metadata(rt, config, port):
    def run():
        d = peer.connect(rt.reactor, config, "127.0.0.1", port, "replica-9", 10)

        def ask(conn):
            body = {"topics": [], "allow_auto_topic_creation": False}
            answer = conn.request(api_keys.METADATA, 4, body)
            return answer.addBoth(lambda result: (conn.close(), result)[1])

        return d.addCallback(ask)

    return rt.call(run)


@pytest.mark.parametrize(
    "listener,mechanism",
    [
        ("SASL_PLAINTEXT", "PLAIN"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("SASL_SSL", "SCRAM-SHA-512"),
    ],
)
def test_logs_in_on_the_inter_broker_listener(rt, secure, listener, mechanism):
    config = _config(secure, listener, mechanism)
    answer = _metadata(rt, config, secure.ports[listener])
    # An unauthenticated request would have closed the connection instead.
    assert answer["brokers"] and answer["brokers"][0]["port"] == secure.ports[listener]


def test_wrong_password_is_refused(rt, secure):
    config = _config(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", password="wrong")
    with pytest.raises((KafkaError, KafkaConnectionError), match="login as 'alice' failed"):
        _metadata(rt, config, secure.ports["SASL_PLAINTEXT"])


def test_tls_needs_the_brokers_ca(rt, secure, tmp_path):
    from tests.tls_certs import make_certs

    other = make_certs(tmp_path / "other")  # a CA that did not sign the broker's cert
    config = _config(secure, "SASL_SSL", "PLAIN", **{"ssl.truststore.location": other["ca"]})
    with pytest.raises(KafkaConnectionError, match="certificate verify failed"):
        _metadata(rt, config, secure.ports["SASL_SSL"])


def test_refusals_at_start(secure):
    with pytest.raises(ConfigError, match="are both set"):
        interbroker.check(
            _config(secure, "SASL_PLAINTEXT", "PLAIN", **{"security.inter.broker.protocol": "SSL"})
        )
    with pytest.raises(ConfigError, match="inter.broker.listener.name=NOPE: no such listener"):
        interbroker.check(_config(secure, "NOPE", "PLAIN"))
    with pytest.raises(ConfigError, match="set inter.broker.sasl.username"):
        interbroker.check(
            _config(secure, "SASL_PLAINTEXT", "PLAIN", **{"inter.broker.sasl.username": ""})
        )
    plain = parse_settings({"security.inter.broker.protocol": "SSL"}, BrokerConfig())
    with pytest.raises(ConfigError, match="security.inter.broker.protocol=SSL: no such listener"):
        interbroker.check(plain)
    assert interbroker.check(BrokerConfig()) == ("PLAINTEXT", "PLAINTEXT")
