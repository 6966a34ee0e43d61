"""A secured 3-broker ZooKeeper cluster: users, ACLs, quotas and configs shared.

One cluster for the module (real ZooKeeper, three ``twistd pluglog``
processes), each broker with a PLAINTEXT listener (trusted: its anonymous
principal is a super user, as an internal listener often is) and a
SASL_PLAINTEXT one. Replica fetchers use the SASL listener
(``inter.broker.listener.name``) as the ``admin`` user, whose credential was
written offline into broker 1's data dir and imported into ZooKeeper. Clients
are confluent-kafka on the SASL listener.
"""

import json
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kazoo.client import KazooClient

from pluglog.client.blocking import BlockingClient
from pluglog.coordination import zkentities as e
from pluglog.protocol import api_keys
from pluglog.security.credentials import make_credential
from tests.broker_process import free_port
from tests.cluster import Cluster
from tests.integration.secure_broker import add_user
from tests.zookeeper import new_chroot

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"


class SecureCluster(Cluster):
    """Cluster whose brokers also listen on SASL_PLAINTEXT."""

    def _process(self, node, port):
        sasl = self.sasl_ports.setdefault(node, free_port())
        proc = super()._process(node, port)
        proc.settings = {
            **proc.settings,
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{sasl},PLAINTEXT://127.0.0.1:{port}",
        }
        return proc


@pytest.fixture(scope="module")
def secured(zookeeper_process, tmp_path_factory):
    root = tmp_path_factory.mktemp("zksecure")
    done = add_user(root / "broker-1", ADMIN, ADMIN_PASSWORD)
    assert done.returncode == 0, done.stderr
    chroot = new_chroot()
    SecureCluster.sasl_ports = {}
    cluster = SecureCluster(
        root,
        zookeeper_process.connect_string(chroot),
        settings={
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
            "inter.broker.sasl.username": ADMIN,
            "inter.broker.sasl.password": ADMIN_PASSWORD,
            # KIP-368: every SASL session here must be renewed every 4 s.
            "connections.max.reauth.ms": "4000",
        },
    )
    cluster.zk = KazooClient(hosts=zookeeper_process.connect_string(chroot))
    try:
        cluster.start()
        cluster.zk.start(10)
        yield cluster
    finally:
        cluster.zk.stop()
        cluster.stop()


def sasl_conf(cluster, node, user=ADMIN, password=ADMIN_PASSWORD, mechanism="PLAIN"):
    return {
        "bootstrap.servers": f"127.0.0.1:{cluster.sasl_ports[node]}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def test_registration_lists_every_listener(secured):
    body = json.loads(secured.zk.get("/brokers/ids/2")[0])
    port, sasl = secured.brokers[2].port, secured.sasl_ports[2]
    assert body["endpoints"] == [
        f"SASL_PLAINTEXT://127.0.0.1:{sasl}",
        f"PLAINTEXT://127.0.0.1:{port}",
    ]
    assert body["listener_security_protocol_map"] == {
        "SASL_PLAINTEXT": "SASL_PLAINTEXT",
        "PLAINTEXT": "PLAINTEXT",
    }
    assert (body["host"], body["port"], body["version"]) == ("127.0.0.1", port, 5)
    # The admin credential written offline into broker 1's data dir is shared.
    assert "SCRAM-SHA-256" in e.config_from_body(secured.zk.get("/config/users/admin")[0])


def replicated_topic(cluster):
    """Topic "replicated" (RF 3, min ISR 2), made once per module, with its
    followers fetching over SASL as admin (so the ISR fills up)."""
    if cluster.partition("replicated", 0) is None:
        admin = AdminClient(sasl_conf(cluster, 1))
        topic = NewTopic("replicated", 1, 3, config={"min.insync.replicas": "2"})
        admin.create_topics([topic])["replicated"].result(30)
    cluster.wait_for_isr("replicated", 1, 3)


def test_sasl_clients_get_sasl_endpoints_and_replicate_acks_all(secured):
    admin = AdminClient(sasl_conf(secured, 1))
    meta = admin.list_topics(timeout=20)
    assert {b.id: b.port for b in meta.brokers.values()} == secured.sasl_ports
    plain = secured.metadata([])
    assert {b["node_id"]: b["port"] for b in plain["brokers"]} == {
        n: b.port for n, b in secured.brokers.items()
    }
    replicated_topic(secured)
    producer = Producer({**sasl_conf(secured, 2), "acks": "all", "linger.ms": 5})
    errors = []
    for i in range(200):
        producer.produce(
            "replicated", f"v{i}".encode(), on_delivery=lambda err, _m: errors.append(err)
        )
    assert producer.flush(30) == 0
    assert errors == [None] * 200
    consumer = Consumer(
        {**sasl_conf(secured, 3), "group.id": "g-replicated", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["replicated"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 200 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value().decode())
    consumer.close()
    assert got == [f"v{i}" for i in range(200)]
    assert sorted(secured.partition("replicated", 0)["isr"]) == [1, 2, 3]
    # FindCoordinator: the coordinator's endpoint on the listener asked on.
    (described,) = admin.describe_consumer_groups(["g-replicated"]).values()
    coordinator = described.result(30).coordinator
    assert coordinator.port == secured.sasl_ports[coordinator.id]
    for node in secured.brokers:
        with BlockingClient("127.0.0.1", secured.brokers[node].port, timeout=10) as client:
            found = client.request(
                api_keys.FIND_COORDINATOR, 1, {"key": "g-replicated", "key_type": 0}
            )
        assert (found["node_id"], found["port"]) == (
            coordinator.id,
            secured.brokers[coordinator.id].port,
        )
    # The clients here log in with PLAIN; SCRAM-SHA-256 logins are the followers'.
    leader = secured.brokers[secured.leader("replicated")]
    assert "authenticated as User:admin (SCRAM-SHA-256) on SASL_PLAINTEXT" in leader.log()


def test_replica_fetchers_reauthenticate_within_the_session_lifetime(secured):
    # The followers of "replicated" keep fetching over SASL past several 4 s
    # lifetimes: they log in again on the same connection
    # (pluglog.replication.peer) and none is closed for an expired session.
    # Each re-login is 3 exchanges, each of which may queue behind a parked
    # Fetch (replica.fetch.wait.max.ms), so one comes every 4-5 s: wait for
    # two per follower rather than sleeping a fixed time.
    replicated_topic(secured)
    leader = secured.brokers[secured.leader("replicated")]
    secured.wait_for(
        lambda: leader.log().count("re-authenticated as User:admin (SCRAM-SHA-256)") >= 4,
        timeout=30,
        what="two re-authentications by each of the 2 followers",
    )
    for node in secured.brokers.values():
        assert "SASL session expired" not in node.log()
    assert sorted(secured.partition("replicated", 0)["isr"]) == [1, 2, 3]


def test_user_and_acls_apply_on_every_broker(secured):
    # A user written as Kafka's kafka-configs --zookeeper writes it.
    cred = make_credential("SCRAM-SHA-512", "carol-secret")
    secured.zk.create(
        "/config/users/carol", e.config_body({"SCRAM-SHA-512": e.scram_to_string(cred)})
    )
    secured.zk.create(
        "/config/changes/config_change_", e.change_body("users/carol"), sequence=True
    )
    admin = AdminClient(sasl_conf(secured, 1))
    for name in ("acl-a", "acl-b"):
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    producer = Producer(sasl_conf(secured, 1))
    producer.produce("acl-a", b"hello")
    assert producer.flush(30) == 0
    # CreateAcls through broker 1 ...
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            "acl-a",
            ResourcePatternType.LITERAL,
            "User:carol",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        ),
        AclBinding(
            ResourceType.GROUP,
            "carol-",
            ResourcePatternType.PREFIXED,
            "User:carol",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        ),
    ]
    for future in admin.create_acls(bindings).values():
        future.result(30)
    assert json.loads(secured.zk.get("/kafka-acl/Topic/acl-a")[0])["acls"] == [
        {"principal": "User:carol", "permissionType": "Allow", "operation": "Read", "host": "*"}
    ]
    assert secured.zk.exists("/kafka-acl-extended/prefixed/Group/carol-")
    # ... apply on broker 3: carol logs in there, reads acl-a, may not write it
    # and does not see acl-b.
    carol = sasl_conf(secured, 3, "carol", "carol-secret", "SCRAM-SHA-512")
    meta = AdminClient(carol).list_topics(timeout=20)
    assert "acl-a" in meta.topics and "acl-b" not in meta.topics
    consumer = Consumer({**carol, "group.id": "carol-g", "auto.offset.reset": "earliest"})
    consumer.subscribe(["acl-a"])
    got = None
    deadline = time.monotonic() + 60
    while got is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got = msg.value()
    consumer.close()
    assert got == b"hello"
    refused = []
    producer = Producer({**carol, "message.timeout.ms": 5000})
    producer.produce("acl-a", b"x", on_delivery=lambda err, _m: refused.append(err))
    producer.flush(30)
    assert refused and refused[0] is not None
    assert "Authorization" in refused[0].name() or refused[0].code() == 29
    # A wrong password is refused on broker 2 too.
    bad = AdminClient(sasl_conf(secured, 2, "carol", "wrong", "SCRAM-SHA-512"))
    with pytest.raises(KafkaException):
        bad.list_topics(timeout=5)


def test_quotas_and_broker_configs_apply_on_every_broker(secured):
    entity = [{"entity_type": "client-id", "entity_name": "slow"}]
    with BlockingClient("127.0.0.1", secured.brokers[1].port, timeout=10) as client:
        answer = client.request(
            api_keys.ALTER_CLIENT_QUOTAS,
            1,
            {
                "entries": [
                    {
                        "entity": entity,
                        "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}],
                    }
                ],
                "validate_only": False,
            },
        )
        assert answer["entries"][0]["error_code"] == 0
        answer = client.request(
            api_keys.INCREMENTAL_ALTER_CONFIGS,
            1,
            {
                "resources": [
                    {
                        "resource_type": 4,
                        "resource_name": "",
                        "configs": [
                            {
                                "name": "log.cleaner.backoff.ms",
                                "config_operation": 0,
                                "value": "4321",
                            }
                        ],
                    }
                ],
                "validate_only": False,
            },
        )
        assert answer["responses"][0]["error_code"] == 0
    assert e.config_from_body(secured.zk.get("/config/clients/slow")[0]) == {
        "producer_byte_rate": "1024"
    }
    assert e.config_from_body(secured.zk.get("/config/brokers/<default>")[0]) == {
        "log.cleaner.backoff.ms": "4321"
    }

    def seen_on_3():
        with BlockingClient("127.0.0.1", secured.brokers[3].port, timeout=10) as client:
            quotas = client.request(
                api_keys.DESCRIBE_CLIENT_QUOTAS,
                1,
                {
                    "components": [{"entity_type": "client-id", "match_type": 0, "match": "slow"}],
                    "strict": False,
                },
            )
            configs = client.request(
                api_keys.DESCRIBE_CONFIGS,
                1,
                {
                    "resources": [
                        {
                            "resource_type": 4,
                            "resource_name": "3",
                            "configuration_keys": ["log.cleaner.backoff.ms"],
                        }
                    ],
                    "include_synonyms": False,
                },
            )
        values = [v for entry in quotas["entries"] for v in entry["values"]]
        (config,) = configs["results"][0]["configs"]
        return values == [{"key": "producer_byte_rate", "value": 1024.0}] and (
            (config["value"], config["config_source"]) == ("4321", 3)  # DYNAMIC_DEFAULT_BROKER
        )

    secured.wait_for(seen_on_3, timeout=15, what="broker 3 to follow the quota and config")


def test_describe_configs_names_every_listener_and_hides_the_password(secured):
    port, sasl = secured.brokers[2].port, secured.sasl_ports[2]
    with BlockingClient("127.0.0.1", port, timeout=10) as client:
        answer = client.request(
            api_keys.DESCRIBE_CONFIGS,
            1,
            {
                "resources": [
                    {
                        "resource_type": 4,
                        "resource_name": "2",
                        "configuration_keys": [
                            "listeners",
                            "advertised.listeners",
                            "inter.broker.sasl.password",
                        ],
                    }
                ],
                "include_synonyms": False,
            },
        )
    configs = {c["name"]: c for c in answer["results"][0]["configs"]}
    expected = f"SASL_PLAINTEXT://127.0.0.1:{sasl},PLAINTEXT://127.0.0.1:{port}"
    assert configs["listeners"]["value"] == expected
    assert configs["advertised.listeners"]["value"] == expected
    password = configs["inter.broker.sasl.password"]
    assert password["value"] is None and password["is_sensitive"] is True


def test_user_added_through_one_broker_logs_in_on_another(secured):
    """AlterUserScramCredentials on broker 1 writes /config/users/erin; broker 3
    follows the change notification and lets erin log in."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(sasl_conf(secured, 1))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    upsertion = UserScramCredentialUpsertion("erin", info, b"erin-secret")
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(30)
    stored = e.config_from_body(secured.zk.get("/config/users/erin")[0])
    assert e.scram_from_string(stored["SCRAM-SHA-256"]).iterations == 4096

    def logs_in_on_3():
        conf = sasl_conf(secured, 3, "erin", "erin-secret", "SCRAM-SHA-256")
        try:
            return len(AdminClient(conf).list_topics(timeout=5).brokers) == 3
        except KafkaException:
            return False

    secured.wait_for(logs_in_on_3, timeout=20, what="erin to log in on broker 3")
