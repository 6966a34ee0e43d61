"""Describe/AlterUserScramCredentials (KIP-554) against the broker process.

confluent-kafka's AdminClient (librdkafka salts the password client-side)
alters a user; the new password logs in over SASL/SCRAM, describe shows the
mechanism and iterations, deletion makes the login fail; Kafka's error codes
for bad requests; only principals with ALTER/DESCRIBE on the cluster may.
Raw requests through pluglog's blocking client check the cases no client
library sends (duplicates, unknown mechanism, empty salt).
"""

import uuid

import pytest

from pluglog.security.client_login import LoginError, connect
from tests.broker_process import BrokerProcess, free_port
from tests.integration.secure_broker import add_user

ADMIN = ("admin", "admin-pw")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("scram") / "data"
    assert add_user(data, *ADMIN).returncode == 0
    sasl, plain = free_port(), free_port()
    proc = BrokerProcess(
        data,
        port=plain,
        settings={
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{sasl},PLAINTEXT://127.0.0.1:{plain}",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
        },
    ).start()
    proc.sasl = f"127.0.0.1:{sasl}"
    yield proc
    proc.stop()


def sasl_conf(broker, user, password, mechanism="SCRAM-SHA-256"):
    return {
        "bootstrap.servers": broker.sasl,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def props(user, password, mechanism="SCRAM-SHA-256"):
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def can_login(broker, user, password, mechanism="SCRAM-SHA-256"):
    try:
        connect(broker.sasl, props(user, password, mechanism)).close()
    except LoginError:
        return False
    return True


def test_alter_describe_delete_with_confluent_admin(broker):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    user = f"carol-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(sasl_conf(broker, *ADMIN))
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"carol-pw"
    )
    admin.alter_user_scram_credentials([upsert])[user].result(15)
    assert can_login(broker, user, "carol-pw")
    assert not can_login(broker, user, "wrong-pw")
    # A real client logs in with it too (librdkafka's SCRAM).
    from confluent_kafka.admin import AdminClient as Client

    topics = Client(sasl_conf(broker, user, "carol-pw")).list_topics(timeout=10)
    assert list(topics.brokers) == [0]

    described = admin.describe_user_scram_credentials([user])[user].result(15)
    infos = [(i.mechanism, i.iterations) for i in described.scram_credential_infos]
    assert infos == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    everyone = admin.describe_user_scram_credentials().result(15)
    assert {user, ADMIN[0]} <= set(everyone)

    # Kafka's errors: unknown user, iterations out of range.
    with pytest.raises(KafkaException) as info:
        admin.describe_user_scram_credentials(["nobody-here"])["nobody-here"].result(15)
    assert info.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    too_few = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 100), b"x"
    )
    with pytest.raises(KafkaException) as info:
        admin.alter_user_scram_credentials([too_few])[user].result(15)
    assert info.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    assert not can_login(broker, user, "x", "SCRAM-SHA-512")

    # A principal without ALTER on the cluster is refused.
    other = Client(sasl_conf(broker, user, "carol-pw"))
    with pytest.raises(KafkaException) as info:
        other.alter_user_scram_credentials([upsert])[user].result(15)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as info:
        other.describe_user_scram_credentials([user])[user].result(15)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)
    admin.alter_user_scram_credentials([deletion])[user].result(15)
    assert not can_login(broker, user, "carol-pw")
    with pytest.raises(KafkaException) as info:
        admin.alter_user_scram_credentials([deletion])[user].result(15)
    assert info.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def test_raw_requests_get_kafkas_codes(broker):
    from pluglog.security.credentials import make_credential

    cred = make_credential("SCRAM-SHA-512", "pw")
    good = {
        "name": "dave",
        "mechanism": 2,
        "iterations": 4096,
        "salt": cred.salt,
        "salted_password": b"\1" * 64,
    }
    with connect(broker.sasl, props(*ADMIN)) as admin:
        advertised = {k["api_key"]: k for k in admin.request(18, 3, {})["api_keys"]}
        assert advertised[50]["max_version"] == 0 and advertised[51]["max_version"] == 0
        body = {
            "deletions": [{"name": "erin", "mechanism": 9}, {"name": "", "mechanism": 1}],
            "upsertions": [
                good,
                dict(good, name="frank", iterations=20000),
                dict(good, name="gina", salt=b""),
                dict(good, name="hal"),
                dict(good, name="hal"),
            ],
        }
        results = {r["user"]: r["error_code"] for r in admin.request(51, 0, body)["results"]}
        assert results == {
            "erin": 33,  # UNSUPPORTED_SASL_MECHANISM
            "": 93,  # UNACCEPTABLE_CREDENTIAL: empty user name
            "dave": 0,
            "frank": 93,  # too many iterations
            "gina": 93,  # empty salt
            "hal": 92,  # DUPLICATE_RESOURCE
        }
        body = {"users": [{"name": "dave"}, {"name": "hal"}, {"name": "x"}, {"name": "x"}]}
        results = {r["user"]: r for r in admin.request(50, 0, body)["results"]}
        assert results["dave"]["credential_infos"] == [{"mechanism": 2, "iterations": 4096}]
        assert results["hal"]["error_code"] == 91  # RESOURCE_NOT_FOUND: nothing was written
        assert results["x"]["error_code"] == 92
