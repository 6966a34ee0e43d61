"""A third-party IAuthorizer, pip-installed as a plugin package and chosen with
``authorizer.class.name``, decides for a broker process (confluent-kafka clients)."""

import subprocess
import sys
import textwrap
import uuid

import pytest

from tests.broker_process import BrokerProcess, free_port
from tests.integration.secure_broker import add_user

PLUGIN = '''
"""Everyone may read and describe; only User:writer may write or create."""
import pluggy
from zope.interface import implementer
from pluglog.interfaces import IAuthorizer

hookimpl = pluggy.HookimplMarker("pluglog")
READ, WRITE, CREATE, DESCRIBE = 3, 4, 5, 8


@implementer(IAuthorizer)
class WriterOnly:
    def __init__(self, config):
        self.config = config

    def authorize(self, principal, host, operation, resource_type, resource_name):
        if operation in (READ, DESCRIBE):
            return True
        return principal == "User:writer"

    def create_acls(self, bindings):
        return ["ACLs are fixed by the writer-only plugin" for _ in bindings]

    def describe_acls(self, binding_filter):
        return []

    def delete_acls(self, filters):
        return [[] for _ in filters]


@hookimpl
def pluglog_register_authorizers():
    return {"writer-only": lambda config, reactor: WriterOnly(config)}
'''

PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "pluglog-writer-only"
version = "1.0"

[project.entry-points.pluglog]
writer-only = "pluglog_writer_only"

[tool.setuptools]
py-modules = ["pluglog_writer_only"]
"""


@pytest.fixture(scope="module")
def plugin_broker(tmp_path_factory, request):
    base = tmp_path_factory.mktemp("authz-plugin")
    source = base / "src"
    source.mkdir()
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / "pluglog_writer_only.py").write_text(textwrap.dedent(PLUGIN))
    site = base / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
        + ["--target", str(site), str(source)],
        check=True,
        timeout=300,
    )
    data = base / "data"
    for user in ("writer", "reader"):
        assert add_user(data, user, user + "-pw").returncode == 0
    sasl, plain = free_port(), free_port()
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("PYTHONPATH", str(site))  # the broker process finds the plugin
    request.addfinalizer(monkeypatch.undo)
    proc = BrokerProcess(
        data,
        port=plain,
        settings={
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{sasl},PLAINTEXT://127.0.0.1:{plain}",
            "authorizer.class.name": "writer-only",
        },
    ).start()
    proc.sasl = f"127.0.0.1:{sasl}"
    yield proc
    proc.stop()


def conf(broker, user):
    return {
        "bootstrap.servers": broker.sasl,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": user + "-pw",
    }


def produce(broker, user, topic):
    from confluent_kafka import Producer

    errors = []
    producer = Producer({**conf(broker, user), "message.timeout.ms": 5000})
    producer.produce(topic, b"v", on_delivery=lambda e, _m: errors.append(e))
    producer.flush(15)
    return errors


def test_third_party_authorizer_decides(plugin_broker):
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    topic = f"plug-{uuid.uuid4().hex[:6]}"
    assert produce(plugin_broker, "writer", topic) == [None]
    refused = produce(plugin_broker, "reader", topic)
    assert refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    consumer = Consumer(
        {**conf(plugin_broker, "reader"), "group.id": topic, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    try:
        values = []
        for _ in range(40):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                values.append(msg.value())
                break
    finally:
        consumer.close()
    assert values == [b"v"]
    # CreateAcls goes to the plugin, which refuses with its own message.
    binding = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:reader",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    admin = AdminClient(conf(plugin_broker, "writer"))
    futures = admin.create_acls([binding])
    with pytest.raises(Exception, match="fixed by the writer-only plugin"):
        futures[binding].result(10)
