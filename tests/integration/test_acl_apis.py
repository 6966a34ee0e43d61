"""Every API checks what Kafka's KafkaApis checks, against the broker process.

One table: for each API, a principal without the ACL is refused with
Kafka's error code, and with it passes the check. Requests go through
pluglog's blocking client logged in with SASL (no client library has most
of these APIs); auto-creation is also checked with confluent-kafka's
producer, and a denied acks=0 produce must close the connection.
"""

import uuid

import pytest

from pluglog.cli.login import connect
from pluglog.client.blocking import ProtocolError
from pluglog.protocol.records import Record, build_batch
from tests.integration.acl_api_cases import (
    CASES,
    CLUSTER,
    CLUSTER_DENIED,
    GROUP,
    GROUP_DENIED,
    TOPIC,
    TOPIC_DENIED,
    TXN_DENIED,
    commit,
    first_partition,
    partitions,
)
from tests.integration.secure_broker import acl_broker, sasl_props

ADMIN, BOB = ("admin", "admin-pw"), ("bob", "bob-pw")
OPS = {
    "READ": 3,
    "WRITE": 4,
    "CREATE": 5,
    "DELETE": 6,
    "ALTER": 7,
    "DESCRIBE": 8,
    "CLUSTER_ACTION": 9,
    "DESCRIBE_CONFIGS": 10,
    "ALTER_CONFIGS": 11,
    "IDEMPOTENT_WRITE": 12,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = acl_broker(tmp_path_factory.mktemp("aclapis") / "data", ADMIN, BOB)
    yield proc
    proc.stop()


def login(broker, who, mechanism="SCRAM-SHA-256"):
    return connect(broker.sasl, sasl_props(*who, mechanism))


def acl_body(rtype, name, operation, pattern=3):
    return {
        "resource_type": rtype,
        "resource_name": name,
        "resource_pattern_type": pattern,
        "principal": "User:bob",
        "host": "*",
        "operation": OPS[operation],
        "permission_type": 3,
    }


def grant(admin, *acls):
    answer = admin.request(30, 1, {"creations": [acl_body(*a) for a in acls]})
    assert all(r["error_code"] == 0 for r in answer["results"]), answer


def revoke(admin, *acls):
    filters = [
        {
            "resource_type_filter": b["resource_type"],
            "resource_name_filter": b["resource_name"],
            "pattern_type_filter": b["resource_pattern_type"],
            "principal_filter": "User:bob",
            "host_filter": "*",
            "operation": b["operation"],
            "permission_type": 3,
        }
        for b in (acl_body(*a) for a in acls)
    ]
    answer = admin.request(31, 1, {"filters": filters})
    assert all(r["error_code"] == 0 for r in answer["filter_results"]), answer


def create_topic(admin, name):
    body = {
        "topics": [
            {
                "name": name,
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ],
        "timeout_ms": 10000,
        "validate_only": False,
    }
    assert admin.request(19, 4, body)["topics"][0]["error_code"] == 0


@pytest.mark.parametrize(
    "api_key, version, body, pre, needed, error, denied",
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_api_refused_without_the_acl_and_served_with_it(
    broker, api_key, version, body, pre, needed, error, denied
):
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"t-{suffix}", f"g-{suffix}"

    def fill(acl):
        rtype, name, operation = acl
        return rtype, name.format(t=topic, g=group), operation

    with login(broker, ADMIN) as admin, login(broker, BOB) as bob:
        create_topic(admin, topic)
        if pre:
            grant(admin, *map(fill, pre))
        assert error(bob.request(api_key, version, body(topic, group))) == denied
        grant(admin, fill(needed))
        try:
            code = error(bob.request(api_key, version, body(topic, group)))
        finally:
            revoke(admin, fill(needed))
        # Past the check: the API's own answer (0 or a non-authorization error).
        assert code not in (TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED), code


def _list_group_ids(client):
    answer = client.request(16, 2, {})
    assert answer["error_code"] == 0
    return {g["group_id"] for g in answer["groups"]}


def test_list_groups_is_filtered_without_cluster_describe(broker):
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"t-{suffix}", f"g-{suffix}"
    with login(broker, ADMIN) as admin, login(broker, BOB) as bob:
        create_topic(admin, topic)
        # A simple-consumer commit creates the group.
        assert first_partition()(admin.request(8, 2, commit(topic, group))) == 0
        assert group in _list_group_ids(admin)
        assert group not in _list_group_ids(bob)
        grant(admin, (GROUP, group, "DESCRIBE"))
        assert group in _list_group_ids(bob)
        revoke(admin, (GROUP, group, "DESCRIBE"))
        grant(admin, (CLUSTER, "kafka-cluster", "DESCRIBE"))
        try:
            assert group in _list_group_ids(bob)
        finally:
            revoke(admin, (CLUSTER, "kafka-cluster", "DESCRIBE"))


def _metadata(client, name, auto=True):
    body = {
        "topics": [{"name": name}],
        "allow_auto_topic_creation": auto,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    return client.request(3, 8, body)["topics"][0]["error_code"]


def test_metadata_auto_creation_needs_create(broker):
    suffix = uuid.uuid4().hex[:8]
    prefix = f"auto-{suffix}-"
    with login(broker, ADMIN) as admin, login(broker, BOB) as bob:
        grant(admin, (TOPIC, prefix, "DESCRIBE", 4))
        # DESCRIBE but no CREATE: not created, TOPIC_AUTHORIZATION_FAILED (Kafka's answer).
        assert _metadata(bob, prefix + "a") == TOPIC_DENIED
        assert _metadata(admin, prefix + "a", auto=False) == 3  # UNKNOWN_TOPIC_OR_PARTITION
        # Without auto-creation asked for, an unknown topic is just unknown.
        assert _metadata(bob, prefix + "a", auto=False) == 3
        # CREATE on the topic (here: its prefix) lets the request create it.
        grant(admin, (TOPIC, prefix, "CREATE", 4))
        assert _metadata(bob, prefix + "a") == 0
        assert _metadata(admin, prefix + "a", auto=False) == 0
        revoke(admin, (TOPIC, prefix, "CREATE", 4))
        assert _metadata(bob, prefix + "b") == TOPIC_DENIED
        # CREATE on the cluster covers every topic.
        grant(admin, (CLUSTER, "kafka-cluster", "CREATE"))
        try:
            assert _metadata(bob, prefix + "b") == 0
        finally:
            revoke(admin, (CLUSTER, "kafka-cluster", "CREATE"))


def test_confluent_producer_cannot_auto_create_without_create(broker):
    from confluent_kafka import KafkaError, Producer

    suffix = uuid.uuid4().hex[:8]
    topic = f"auto-cf-{suffix}"
    with login(broker, ADMIN) as admin:
        grant(admin, (TOPIC, topic, "WRITE"))
        conf = {
            "bootstrap.servers": broker.sasl,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": BOB[0],
            "sasl.password": BOB[1],
            "message.timeout.ms": 4000,
        }
        errors = []
        producer = Producer(conf)
        producer.produce(topic, b"x", on_delivery=lambda e, _m: errors.append(e))
        producer.flush(15)
        assert errors and errors[0] is not None
        assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert _metadata(admin, topic, auto=False) == 3  # not created
        grant(admin, (TOPIC, topic, "CREATE"))
        errors.clear()
        producer = Producer(conf)
        producer.produce(topic, b"y", on_delivery=lambda e, _m: errors.append(e))
        producer.flush(15)
        assert errors == [None]


def _produce_acks0(client, topic):
    body = {
        "acks": 0,
        "timeout_ms": 5000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": 0, "records": build_batch([Record(value=b"z")])}],
            }
        ],
    }
    client.request(0, 8, body, expect_response=False)


def test_denied_acks0_produce_closes_the_connection(broker):
    suffix = uuid.uuid4().hex[:8]
    topic = f"t0-{suffix}"
    list_offsets = {"replica_id": -1, "topics": partitions(topic, timestamp=-1)}
    with login(broker, ADMIN) as admin:
        create_topic(admin, topic)
        with login(broker, BOB) as bob:
            _produce_acks0(bob, topic)
            # Kafka cannot answer an acks=0 request: it closes the connection.
            with pytest.raises((ProtocolError, ConnectionError)):
                bob.request(18, 0, {})
        grant(admin, (TOPIC, topic, "WRITE"))
        with login(broker, BOB) as bob:
            _produce_acks0(bob, topic)
            assert bob.request(18, 0, {})["error_code"] == 0  # still open
        answer = admin.request(2, 1, list_offsets)
        assert answer["topics"][0]["partitions"][0]["offset"] == 1  # only the allowed record


def test_describe_cluster_is_served_but_operations_need_describe(broker):
    """As Kafka: DescribeCluster is not refused; its KIP-430 operations are 0
    for a principal that may not DESCRIBE the cluster."""
    body = {"include_cluster_authorized_operations": True}
    with login(broker, ADMIN) as admin, login(broker, BOB) as bob:
        grant(admin, (CLUSTER, "kafka-cluster", "CREATE"))
        try:
            answer = bob.request(60, 0, body)
            assert answer["error_code"] == 0 and [b["broker_id"] for b in answer["brokers"]] == [0]
            assert answer["cluster_authorized_operations"] == 0
            grant(admin, (CLUSTER, "kafka-cluster", "DESCRIBE"))
            ops = bob.request(60, 0, body)["cluster_authorized_operations"]
            assert ops == (1 << 5) | (1 << 8)  # CREATE and DESCRIBE
        finally:
            revoke(
                admin, (CLUSTER, "kafka-cluster", "CREATE"), (CLUSTER, "kafka-cluster", "DESCRIBE")
            )
