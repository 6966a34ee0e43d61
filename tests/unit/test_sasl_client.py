"""pluglog.security.sasl_client, the sans-IO SASL login both pluglog clients
drive: PLAIN and SCRAM against scramp's server side, and each refusal."""

import pytest
from scramp import ScramException, ScramMechanism
from twisted.internet.task import Clock

from pluglog.security import sasl_client


class FakeBroker:
    """Answers SaslHandshake/SaslAuthenticate like a broker with one user."""

    def __init__(self, mechanisms=("PLAIN", "SCRAM-SHA-256"), password="pw", tamper=False):
        self.mechanisms, self.tamper, self.sent = list(mechanisms), tamper, []
        self.auth = {
            m: ScramMechanism(m).make_auth_info(password, iteration_count=4096)
            for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        }
        self.password, self.scram = password, None

    def __call__(self, api_key, version, body):
        self.sent.append((api_key, version, body))
        if api_key == sasl_client.SASL_HANDSHAKE:
            self.mechanism = body["mechanism"]
            code = 0 if self.mechanism in self.mechanisms else 33
            return {"error_code": code, "mechanisms": self.mechanisms}
        token = body["auth_bytes"].decode()
        if self.mechanism == "PLAIN":
            ok = token == f"\0alice\0{self.password}"
            return self._answer(b"" if ok else None, "Authentication failed")
        if self.scram is None:
            self.scram = ScramMechanism(self.mechanism).make_server(
                lambda _u: self.auth[self.mechanism]
            )
            self.scram.set_client_first(token)
            return self._answer(self.scram.get_server_first().encode())
        try:
            self.scram.set_client_final(token)
        except ScramException:
            return self._answer(None, "Authentication failed during authentication")
        final = self.scram.get_server_final()
        if self.tamper:
            final = "v=" + "A" * 44
        return self._answer(final.encode())

    @staticmethod
    def _answer(token, message=None):
        if token is None:
            return {"error_code": 58, "error_message": message, "auth_bytes": b""}
        return {"error_code": 0, "error_message": None, "auth_bytes": memoryview(token)}


def login(broker, mechanism, password="pw"):
    sasl_client.run(sasl_client.exchange(mechanism, "alice", password), broker)


def test_plain_sends_the_handshake_then_one_message():
    broker = FakeBroker()
    login(broker, "PLAIN")
    assert broker.sent == [
        (17, 1, {"mechanism": "PLAIN"}),
        (36, 1, {"auth_bytes": b"\0alice\0pw"}),
    ]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_completes_the_two_round_trips(mechanism):
    broker = FakeBroker(mechanisms=[mechanism])
    login(broker, mechanism)
    assert [api for api, _v, _b in broker.sent] == [17, 36, 36]
    # The server checked the client's proof (a bad one is answered with 58)
    # and the client checked the server's signature (or it would raise).
    assert broker.sent[1][2]["auth_bytes"].startswith(b"n,,n=alice,r=")
    assert broker.sent[2][2]["auth_bytes"].startswith(b"c=biws,r=")


def test_unoffered_mechanism_is_refused_with_the_offer():
    with pytest.raises(sasl_client.MechanismError) as info:
        login(FakeBroker(mechanisms=["PLAIN"]), "SCRAM-SHA-512")
    assert info.value.error_code == 33 and info.value.offered == ["PLAIN"]
    assert str(info.value) == "the broker does not offer SCRAM-SHA-512 (it offers PLAIN)"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_wrong_password_is_refused_with_the_brokers_message(mechanism):
    with pytest.raises(sasl_client.CredentialsError) as info:
        login(FakeBroker(), mechanism, password="wrong")
    assert info.value.error_code == 58
    assert str(info.value).startswith("Authentication failed")


def test_refusal_without_message_names_the_code():
    assert str(sasl_client.CredentialsError(58, None)) == "error 58"


def test_a_forged_server_signature_is_not_accepted():
    with pytest.raises(ScramException):
        login(FakeBroker(tamper=True), "SCRAM-SHA-256")


class FakeConnection:
    """A KafkaClientProtocol stand-in: ``request`` answers through a Deferred."""

    def __init__(self, broker):
        self.broker = broker
        self.reactor = Clock()  # KafkaClientProtocol's clock (re-login timing)

    def request(self, api_key, version, body, timeout=None):
        from twisted.internet import defer

        return defer.succeed(self.broker(api_key, version, body))


def interbroker_login(broker, mechanism, password="pw"):
    from pluglog.config import BrokerConfig, parse_settings
    from pluglog.replication import peer

    config = parse_settings(
        {
            "sasl.mechanism.inter.broker.protocol": mechanism,
            "inter.broker.sasl.username": "alice",
            "inter.broker.sasl.password": password,
        },
        BrokerConfig(),
    )
    failures = []
    d = peer._login(FakeConnection(broker), config, 5)
    d.addErrback(failures.append)
    return failures[0].value if failures else None


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_the_replica_fetchers_login_drives_the_same_exchange(mechanism):
    broker = FakeBroker(mechanisms=[mechanism])
    assert interbroker_login(broker, mechanism) is None
    assert [api for api, _v, _b in broker.sent] == [17, 36] + [36] * (mechanism != "PLAIN")


def test_the_replica_fetchers_refusals_are_kafka_errors():
    from pluglog.errors import KafkaError

    refused = interbroker_login(FakeBroker(mechanisms=["PLAIN"]), "SCRAM-SHA-256")
    assert isinstance(refused, KafkaError)
    assert str(refused) == (
        "inter-broker SASL handshake for SCRAM-SHA-256 refused (error 33; offered: ['PLAIN'])"
    )
    failed = interbroker_login(FakeBroker(), "PLAIN", password="wrong")
    assert isinstance(failed, KafkaError)
    assert str(failed) == "inter-broker SASL login as 'alice' failed: Authentication failed"
