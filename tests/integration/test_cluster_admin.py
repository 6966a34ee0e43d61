"""The cluster operator's APIs through kafka-python's KafkaAdminClient and
confluent-kafka's AdminClient against one real broker process."""

import glob
import os

import confluent_kafka
import pytest
from confluent_kafka import ElectionType
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kafka import TopicPartition as KpTopicPartition
from kafka import errors as kp_errors
from kafka.admin import KafkaAdminClient

from tests.broker_process import BrokerProcess
from tests.integration.clients import make_records, produce_confluent

TOPIC = "ops"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("ops") / "data",
        settings={"broker.rack": "rack-a", "log.retention.ms": "3600000"},
    ).start()
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(timeout=30)
    produce_confluent(proc.bootstrap, TOPIC, make_records(300, partitions=1))
    yield proc
    proc.stop()


@pytest.fixture
def kp_admin(node):
    client = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    yield client
    client.close()


@pytest.fixture
def admin(node):
    return AdminClient({"bootstrap.servers": node.bootstrap})


def _on_disk(data_dir, topic, partition):
    files = glob.glob(os.path.join(data_dir, f"{topic}-{partition}", "*"))
    return sum(os.path.getsize(f) for f in files if f.endswith(".log"))


def test_kafka_python_describe_cluster(node, kp_admin):
    cluster = kp_admin.describe_cluster()
    assert cluster["controller_id"] == 0
    assert len(cluster["cluster_id"]) == 22
    assert [(b["broker_id"], b["host"], b["port"], b["rack"]) for b in cluster["brokers"]] == [
        (0, "127.0.0.1", node.port, "rack-a")
    ]


def test_kafka_python_describe_log_dirs_sizes(node, kp_admin):
    (answer,) = kp_admin.describe_log_dirs()
    assert answer["broker"] == 0
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == os.path.abspath(node.data_dir)
    sizes = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for t in log_dir["topics"]
        for p in t["partitions"]
    }
    assert sizes[(TOPIC, 0)] == _on_disk(node.data_dir, TOPIC, 0) > 0
    assert sizes[(TOPIC, 1)] == 0
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0


def test_kafka_python_elect_preferred_leader_not_needed(kp_admin):
    # kafka-python ignores ELECTION_NOT_NEEDED; the response still says it.
    response = kp_admin.elect_leaders(0, {TOPIC: [0, 1]})
    assert response.error_code == 0
    codes = {
        (r.topic, p.partition_id): p.error_code
        for r in response.replica_election_results
        for p in r.partition_result
    }
    assert codes == {(TOPIC, 0): 84, (TOPIC, 1): 84}


def test_kafka_python_reassignments_on_one_broker(kp_admin):
    assert kp_admin.list_partition_reassignments() == {}
    result = kp_admin.alter_partition_reassignments(
        {KpTopicPartition(TOPIC, 0): [0, 5], KpTopicPartition(TOPIC, 1): [0]}
    )
    assert result == {
        KpTopicPartition(TOPIC, 0): kp_errors.InvalidReplicationAssignmentError,
        KpTopicPartition(TOPIC, 1): None,
    }
    cancelled = kp_admin.alter_partition_reassignments({KpTopicPartition(TOPIC, 0): None})
    assert cancelled == {KpTopicPartition(TOPIC, 0): kp_errors.NoReassignmentInProgressError}
    assert kp_admin.list_partition_reassignments({TOPIC: [0, 1]}) == {}


def test_confluent_describe_cluster(node, admin):
    cluster = admin.describe_cluster(request_timeout=30).result(timeout=30)
    assert cluster.controller.id == 0
    assert [(n.id, n.host, n.port, n.rack) for n in cluster.nodes] == [
        (0, "127.0.0.1", node.port, "rack-a")
    ]


def test_confluent_elect_leaders_not_needed(admin):
    partitions = [
        confluent_kafka.TopicPartition(TOPIC, 0),
        confluent_kafka.TopicPartition(TOPIC, 1),
    ]
    results = admin.elect_leaders(ElectionType.PREFERRED, partitions).result(timeout=30)
    assert {(tp.topic, tp.partition): err.code() for tp, err in results.items()} == {
        (TOPIC, 0): confluent_kafka.KafkaError.ELECTION_NOT_NEEDED,
        (TOPIC, 1): confluent_kafka.KafkaError.ELECTION_NOT_NEEDED,
    }
    unclean = admin.elect_leaders(ElectionType.UNCLEAN, partitions[:1]).result(timeout=30)
    (err,) = unclean.values()
    assert err.code() == confluent_kafka.KafkaError.ELECTION_NOT_NEEDED


def test_confluent_describe_configs_sources_and_listeners(node, admin):
    broker = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([broker])[broker].result(timeout=30)
    assert configs["listeners"].value == f"PLAINTEXT://127.0.0.1:{node.port}"
    assert configs["advertised.listeners"].value == f"PLAINTEXT://127.0.0.1:{node.port}"
    static = ConfigSource.STATIC_BROKER_CONFIG.value
    default = ConfigSource.DEFAULT_CONFIG.value
    assert configs["listeners"].source == static
    assert (configs["broker.rack"].value, configs["broker.rack"].source) == ("rack-a", static)
    assert (configs["log.retention.ms"].value, configs["log.retention.ms"].source) == (
        "3600000",
        static,
    )
    assert configs["num.partitions"].source == default
    assert configs["zookeeper.connect"].source == default
    assert configs["replica.lag.time.max.ms"].value == "30000"
    topic = ConfigResource(ConfigResource.Type.TOPIC, TOPIC)
    configs = admin.describe_configs([topic])[topic].result(timeout=30)
    # The topic inherits the broker's static retention, and says so.
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == ("3600000", static)
    assert configs["segment.bytes"].source == default
