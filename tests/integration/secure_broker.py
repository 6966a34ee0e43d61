"""A broker with SSL, SASL_PLAINTEXT, SASL_SSL and PLAINTEXT listeners, for tests.

Certificates come from tests/tls_certs.py; the user is written offline with
``pluglog users add --data-dir`` before the broker starts (the documented way).
"""

import os
import subprocess
import sys

import pytest

from tests.broker_process import ROOT, BrokerProcess, free_port
from tests.tls_certs import make_certs

USER, PASSWORD = "alice", "alice-secret"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def add_user(data_dir, name, password, *extra):
    env = dict(os.environ, PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "pluglog.cli.main", "users", "add", name, "--password-stdin"]
    return subprocess.run(
        [*cmd, "--data-dir", str(data_dir), *extra],
        input=password + "\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    base = tmp_path_factory.mktemp("secure")
    certs = make_certs(base / "certs")
    data = base / "data"
    done = add_user(data, USER, PASSWORD)
    assert done.returncode == 0, done.stderr
    ports = {name: free_port() for name in ("SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    plain = free_port()
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    # PLAINTEXT last: the process helper waits for it, so the others are up by then.
    listeners += f",PLAINTEXT://127.0.0.1:{plain}"
    proc = BrokerProcess(
        data,
        port=plain,
        settings={
            "listeners": listeners,
            "ssl.keystore.location": certs["server_cert"],
            "ssl.key.location": certs["server_key"],
            "ssl.truststore.location": certs["ca"],
            "ssl.client.auth": "requested",
        },
    ).start()
    proc.ports = ports
    proc.certs = certs
    yield proc
    proc.stop()


def acl_broker(data, *users):
    """A started broker with Kafka's ACL authorizer (``User:admin`` is the
    super user) on a SASL_PLAINTEXT and a PLAINTEXT listener; ``users``
    (``(name, password)`` pairs) are written to ``data`` first. ``.sasl`` is
    the SASL listener's ``host:port``."""
    for user, password in users:
        done = add_user(data, user, password)
        assert done.returncode == 0, done.stderr
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
    return proc


def sasl_props(user, password, mechanism="SCRAM-SHA-256"):
    """A Kafka client's properties to log in as ``user`` over SASL_PLAINTEXT."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def confluent_conf(secure, protocol, mechanism=None, user=USER, password=PASSWORD):
    conf = {
        "bootstrap.servers": f"127.0.0.1:{secure.ports[protocol]}",
        "security.protocol": protocol,
    }
    if "SSL" in protocol:
        conf["ssl.ca.location"] = secure.certs["ca"]
    if mechanism:
        conf.update(
            {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
        )
    return conf
