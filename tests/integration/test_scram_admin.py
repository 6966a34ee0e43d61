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

from pluglog.cli.login import LoginError, connect
from tests.broker_process import free_port
from tests.integration.secure_broker import acl_broker
from tests.integration.secure_broker import sasl_props as props

ADMIN = ("admin", "admin-pw")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = acl_broker(tmp_path_factory.mktemp("scram") / "data", ADMIN)
    yield proc
    proc.stop()


def sasl_conf(broker, user, password, mechanism="SCRAM-SHA-256"):
    return {"bootstrap.servers": broker.sasl, **props(user, password, mechanism)}


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


def users_cli(*args, password=None):
    import os
    import subprocess
    import sys

    from tests.broker_process import ROOT

    return subprocess.run(
        [sys.executable, "-m", "pluglog.cli.main", "users", *args],
        input=(password + "\n") if password is not None else "",
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
        timeout=60,
    )


def test_users_cli_through_the_broker(broker, tmp_path):
    admin_config = tmp_path / "admin.properties"
    admin_config.write_text(
        "# the admin login, as for kafka-configs --command-config\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="admin" password="admin-pw";\n'
    )
    user = f"dana-{uuid.uuid4().hex[:6]}"
    remote = ("--bootstrap-server", broker.sasl, "--command-config", str(admin_config))
    done = users_cli(
        "add",
        user,
        "--mechanism",
        "SCRAM-SHA-512",
        "--password-stdin",
        *remote,
        password="dana-pw",
    )
    assert done.returncode == 0, done.stderr
    assert can_login(broker, user, "dana-pw", "SCRAM-SHA-512")
    assert not can_login(broker, user, "dana-pw", "SCRAM-SHA-256")  # only the one asked for
    listed = users_cli("list", *remote)
    assert listed.returncode == 0, listed.stderr
    assert f"{user}  SCRAM-SHA-512 (iterations 4096)" in listed.stdout.splitlines()

    # A non-admin login is refused with Kafka's error, on one line.
    dana_config = tmp_path / "dana.properties"
    dana_config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.username={user}\nsasl.password=dana-pw\n"
    )
    refused = users_cli(
        "list", "--bootstrap-server", broker.sasl, "--command-config", str(dana_config)
    )
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    bad_login = tmp_path / "bad.properties"
    bad_login.write_text(admin_config.read_text().replace("admin-pw", "nope"))
    refused = users_cli(
        "list", "--bootstrap-server", broker.sasl, "--command-config", str(bad_login)
    )
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "Authentication failed" in refused.stderr
    assert "nope" not in refused.stderr
    bad_iterations = users_cli(
        "add", user, "--iterations", "99999", "--password-stdin", *remote, password="x"
    )
    assert bad_iterations.returncode == 1 and "UNACCEPTABLE_CREDENTIAL" in bad_iterations.stderr

    done = users_cli("delete", user, *remote)
    assert done.returncode == 0, done.stderr
    assert not can_login(broker, user, "dana-pw", "SCRAM-SHA-512")
    again = users_cli("delete", user, *remote)
    assert again.returncode == 1 and "RESOURCE_NOT_FOUND" in again.stderr
    assert again.stderr.count("\n") == 1


def test_users_cli_errors_are_one_line(tmp_path):

    unreachable = users_cli("list", "--bootstrap-server", f"127.0.0.1:{free_port()}")
    assert unreachable.returncode == 1
    assert unreachable.stderr.count("\n") == 1 and "cannot reach" in unreachable.stderr
    missing = users_cli(
        "list",
        "--bootstrap-server",
        "127.0.0.1:1",
        "--command-config",
        str(tmp_path / "none.properties"),
    )
    assert missing.returncode == 1 and "none.properties" in missing.stderr
    # Offline, on a data dir: add, list, delete.
    data = str(tmp_path / "data")
    assert (
        users_cli("add", "ivy", "--password-stdin", "--data-dir", data, password="p").returncode
        == 0
    )
    listed = users_cli("list", "--data-dir", data).stdout
    assert listed == "ivy  SCRAM-SHA-256 (iterations 4096), SCRAM-SHA-512 (iterations 4096)\n"
    assert (
        users_cli("delete", "ivy", "--mechanism", "SCRAM-SHA-256", "--data-dir", data).returncode
        == 0
    )
    assert users_cli("list", "--data-dir", data).stdout == "ivy  SCRAM-SHA-512 (iterations 4096)\n"
    gone = users_cli("delete", "ivy", "--mechanism", "SCRAM-SHA-256", "--data-dir", data)
    assert gone.returncode == 1 and "RESOURCE_NOT_FOUND" in gone.stderr
