"""ACLs end to end: SASL users on a broker with an authorizer, ACLs managed
with kafka-python's admin calls, a reader checked with confluent-kafka."""

import uuid

import pytest

from tests.integration import secure_broker
from tests.integration.secure_broker import sasl_props

ADMIN, READER = ("admin", "admin-pw"), ("reader", "reader-pw")


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    proc = secure_broker.acl_broker(tmp_path_factory.mktemp("acl") / "data", ADMIN, READER)
    yield proc
    proc.stop()


def conf(broker, login):
    return {"bootstrap.servers": broker.sasl, **sasl_props(*login)}


def kp_admin(broker, login):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(
        bootstrap_servers=broker.sasl,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username=login[0],
        sasl_plain_password=login[1],
    )


def produce(broker, login, topic, n=2):
    from confluent_kafka import Producer

    errors = []
    producer = Producer({**conf(broker, login), "linger.ms": 0, "message.timeout.ms": 5000})
    for i in range(n):
        producer.produce(topic, f"m{i}".encode(), on_delivery=lambda e, _m: errors.append(e))
    producer.flush(10)
    return errors


def consume(broker, login, topic, group, n=2, polls=40):
    from confluent_kafka import Consumer

    consumer = Consumer(
        {**conf(broker, login), "group.id": group, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got, errors = [], []
    try:
        for _ in range(polls):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                errors.append(msg.error())
                break
            got.append(msg.value())
            if len(got) == n:
                break
    finally:
        consumer.close()
    return got, errors


def acl(resource_type, name, operation, permission="ALLOW", pattern="LITERAL", who="reader"):
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourceType,
    )

    return ACL(
        principal=f"User:{who}",
        host="*",
        operation=getattr(ACLOperation, operation),
        permission_type=getattr(ACLPermissionType, permission),
        resource_pattern=ResourcePattern(
            getattr(ResourceType, resource_type), name, getattr(ACLResourcePatternType, pattern)
        ),
    )


def acl_filter(resource_type, name):
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
    )

    return ACLFilter(
        principal=None,
        host=None,
        operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(
            getattr(ResourceType, resource_type), name, ACLResourcePatternType.ANY
        ),
    )


def test_read_only_principal(acl_broker):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    suffix = uuid.uuid4().hex[:6]
    a, b, group = f"a-{suffix}", f"b-{suffix}", f"ga-{suffix}"
    assert produce(acl_broker, ADMIN, a) == [None, None]
    assert produce(acl_broker, ADMIN, b) == [None, None]
    admin = kp_admin(acl_broker, ADMIN)
    result = admin.create_acls([acl("TOPIC", a, "READ"), acl("GROUP", group, "READ")])
    assert not result["failed"], result
    described, error = admin.describe_acls(acl_filter("TOPIC", a))
    assert error.errno == 0 and len(described) == 1
    assert described[0].principal == "User:reader"

    got, errors = consume(acl_broker, READER, a, group)
    assert got == [b"m0", b"m1"] and not errors
    errors = produce(acl_broker, READER, a, n=1)
    assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    got, errors = consume(acl_broker, READER, b, group, n=1)
    assert not got
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    topics = AdminClient(conf(acl_broker, READER)).list_topics(timeout=10).topics
    assert a in topics and b not in topics
    # DeleteTopics by a non-admin is refused; the topic stays.
    reader_admin = AdminClient(conf(acl_broker, READER))
    futures = reader_admin.delete_topics([a], operation_timeout=5)
    with pytest.raises(Exception) as info:
        futures[a].result(10)
    assert "TOPIC_AUTHORIZATION_FAILED" in str(info.value)
    assert a in AdminClient(conf(acl_broker, ADMIN)).list_topics(timeout=10).topics
    admin.close()


def test_prefixed_acls_and_deny_wins(acl_broker):
    suffix = uuid.uuid4().hex[:6]
    prefix = f"pre{suffix}-"
    ok, denied, group = prefix + "ok", prefix + "denied", f"gp-{suffix}"
    for topic in (ok, denied):
        assert produce(acl_broker, ADMIN, topic) == [None, None]
    admin = kp_admin(acl_broker, ADMIN)
    result = admin.create_acls(
        [
            acl("TOPIC", prefix, "READ", pattern="PREFIXED"),
            acl("GROUP", group, "READ"),
            acl("TOPIC", denied, "READ", permission="DENY"),
        ]
    )
    assert not result["failed"], result
    got, errors = consume(acl_broker, READER, ok, group)
    assert got == [b"m0", b"m1"], errors
    got, _errors = consume(acl_broker, READER, denied, group, n=1, polls=12)
    # Nothing read; the same consumer reads both records once the DENY is gone.
    assert not got
    # Deleting the DENY lets the prefixed ALLOW through.
    deleted = admin.delete_acls([acl("TOPIC", denied, "READ", permission="DENY")])
    assert len(deleted[0][1]) == 1
    got, errors = consume(acl_broker, READER, denied, group)
    assert got == [b"m0", b"m1"], errors
    admin.close()


def test_acl_apis_need_cluster_rights(acl_broker):
    from kafka.errors import ClusterAuthorizationFailedError

    reader = kp_admin(acl_broker, READER)
    with pytest.raises(ClusterAuthorizationFailedError):
        reader.describe_acls(acl_filter("TOPIC", "x"))
    reader.close()


def test_describe_configs_hides_the_data_dir_from_non_super_users(acl_broker):
    from confluent_kafka.admin import AdminClient, ConfigResource

    for login, visible in ((ADMIN, True), (READER, False)):
        admin = kp_admin(acl_broker, ADMIN)
        admin.create_acls([acl("CLUSTER", "kafka-cluster", "DESCRIBE_CONFIGS")])
        admin.close()
        client = AdminClient(conf(acl_broker, login))
        resource = ConfigResource(ConfigResource.Type.BROKER, "0")
        configs = client.describe_configs([resource])[resource].result(10)
        entry = configs["log.dirs"]
        assert (entry.value == acl_broker.data_dir) is visible
        if not visible:
            assert entry.value is None and entry.is_sensitive


def test_authorized_operations_kip_430(acl_broker):
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient

    topic = f"ops-{uuid.uuid4().hex[:6]}"
    assert produce(acl_broker, ADMIN, topic, n=1) == [None]
    admin = kp_admin(acl_broker, ADMIN)
    admin.create_acls([acl("TOPIC", topic, "READ")])
    admin.close()
    for login, expected in (
        (READER, {AclOperation.READ, AclOperation.DESCRIBE}),
        (ADMIN, {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE}),
    ):
        client = AdminClient(conf(acl_broker, login))
        futures = client.describe_topics(
            TopicCollection([topic]), request_timeout=10, include_authorized_operations=True
        )
        ops = set(futures[topic].result(10).authorized_operations)
        if login is READER:
            assert ops == expected
        else:
            assert expected <= ops
        cluster = client.describe_cluster(include_authorized_operations=True).result(10)
        cluster_ops = set(cluster.authorized_operations or ())
        assert (AclOperation.ALTER in cluster_ops) is (login is ADMIN)


def test_transactions_need_the_transactional_id_acls(acl_broker):
    from confluent_kafka import KafkaError, KafkaException, Producer

    suffix = uuid.uuid4().hex[:6]
    topic, txn_id = f"tx-{suffix}", f"txid-{suffix}"
    assert produce(acl_broker, ADMIN, topic, n=1) == [None]
    admin = kp_admin(acl_broker, ADMIN)
    assert not admin.create_acls([acl("TOPIC", topic, "WRITE")])["failed"]

    def init():
        producer = Producer({**conf(acl_broker, READER), "transactional.id": txn_id})
        producer.init_transactions(15)
        return producer

    # WRITE on the topic is not enough: the transactional id is a resource.
    with pytest.raises(KafkaException) as refused:
        init()
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    result = admin.create_acls([acl("TRANSACTIONAL_ID", txn_id, "WRITE")])
    assert not result["failed"], result
    producer = init()
    producer.begin_transaction()
    producer.produce(topic, b"in-txn")
    producer.commit_transaction(15)
