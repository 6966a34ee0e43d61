"""Admin APIs through real admin clients: configs, partitions, records, errors."""

import time

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from tests.broker_process import BrokerProcess
from tests.integration.clients import make_records, produce_confluent


@pytest.fixture(scope="module")
def admin(shared_broker):
    return AdminClient({"bootstrap.servers": shared_broker.bootstrap})


def _wait(futures):
    return {k: f.result(timeout=30) for k, f in futures.items()}


def test_create_describe_alter_configs(admin):
    _wait(admin.create_topics([NewTopic("adm-cfg", 2, 1, config={"retention.ms": "123456"})]))
    resource = ConfigResource(ConfigResource.Type.TOPIC, "adm-cfg")
    configs = _wait(admin.describe_configs([resource]))[resource]
    assert configs["retention.ms"].value == "123456"
    assert (
        configs["retention.ms"].source
        == confluent_kafka.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    )
    assert configs["segment.bytes"].value == "1073741824"
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        "adm-cfg",
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    _wait(admin.incremental_alter_configs([resource]))
    resource = ConfigResource(ConfigResource.Type.TOPIC, "adm-cfg")
    configs = _wait(admin.describe_configs([resource]))[resource]
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "604800000"


def test_kafka_python_describe_configs(shared_broker, admin):
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    _wait(admin.create_topics([NewTopic("adm-kp", 1, 1, config={"max.message.bytes": "2000000"})]))
    client = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        result = client.describe_configs([KpResource(ConfigResourceType.TOPIC, "adm-kp")])
        text = repr(result)
        assert "max.message.bytes" in text and "2000000" in text
    finally:
        client.close()


def test_kafka_python_describe_configs_v4_types_and_sources(shared_broker, admin):
    # kafka-python 3 sends DescribeConfigs v4 (flexible) and names the v3+
    # config types; the broker it infers does not depend on it (no DescribeConfigs
    # probe): ListOffsets v7+ makes it Kafka 3.0.
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    _wait(admin.create_topics([NewTopic("adm-kp4", 1, 1, config={"retention.ms": "5000"})]))
    client = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        described = client.describe_configs(
            [KpResource(ConfigResourceType.TOPIC, "adm-kp4")], config_filter="all"
        )
        inferred = client.get_broker_version_data(0).broker_version
    finally:
        client.close()
    configs = described["topic"]["adm-kp4"]
    # config_type is only in v3+ answers (kafka-python keeps what it decoded).
    assert (configs["retention.ms"]["value"], configs["retention.ms"]["config_type"]) == (
        "5000",
        "LONG",
    )
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["cleanup.policy"]["config_type"] == "LIST"
    assert configs["segment.bytes"]["config_type"] == "INT"
    assert configs["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    assert inferred == (3, 9)  # Fetch v17 (see test_protocol_specs)


class _NoAdvertisedListener(BrokerProcess):
    """A broker started with --listen only: it derives its advertised address."""

    def command(self):
        cmd = super().command()
        at = cmd.index("--advertised-listener")
        return cmd[:at] + cmd[at + 2 :]


def test_unset_advertised_listeners_is_a_default(tmp_path):
    broker = _NoAdvertisedListener(tmp_path / "data").start()
    try:
        client = AdminClient({"bootstrap.servers": broker.bootstrap})
        resource = ConfigResource(ConfigResource.Type.BROKER, "0")
        configs = _wait(client.describe_configs([resource]))[resource]
    finally:
        broker.stop()
    default = confluent_kafka.admin.ConfigSource.DEFAULT_CONFIG.value
    static = confluent_kafka.admin.ConfigSource.STATIC_BROKER_CONFIG.value
    advertised = configs["advertised.listeners"]
    assert advertised.value == f"PLAINTEXT://{broker.bootstrap}"
    assert (advertised.source, advertised.is_default) == (default, True)
    assert configs["listeners"].source == static  # --listen was given
    assert configs["log.dirs"].source == static  # so was --data-dir
    assert configs["num.partitions"].source == default


def test_create_partitions_with_a_replica_assignment_on_one_broker(admin):
    """One broker: an assignment naming only itself grows the topic; one
    naming another broker is refused with INVALID_REPLICA_ASSIGNMENT."""
    _wait(admin.create_topics([NewTopic("adm-place", 1, 1)]))
    node = admin.list_topics("adm-place", timeout=10).topics["adm-place"].partitions[0].leader
    _wait(admin.create_partitions([NewPartitions("adm-place", 2, replica_assignment=[[node]])]))
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        _wait(
            admin.create_partitions(
                [NewPartitions("adm-place", 3, replica_assignment=[[node + 7]])]
            )
        )
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert len(admin.list_topics("adm-place", timeout=10).topics["adm-place"].partitions) == 2


def test_create_partitions_and_delete_records(shared_broker, admin):
    _wait(admin.create_topics([NewTopic("adm-grow", 1, 1)]))
    _wait(admin.create_partitions([NewPartitions("adm-grow", 4)]))
    meta = admin.list_topics("adm-grow", timeout=10)
    assert len(meta.topics["adm-grow"].partitions) == 4
    produce_confluent(shared_broker.bootstrap, "adm-grow", make_records(100, partitions=1))
    tp = confluent_kafka.TopicPartition("adm-grow", 0, 40)
    result = _wait(admin.delete_records([tp]))
    low = list(result.values())[0]
    assert low.low_watermark == 40
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": shared_broker.bootstrap, "group.id": "x"}
    )
    lo, hi = consumer.get_watermark_offsets(
        confluent_kafka.TopicPartition("adm-grow", 0), timeout=10
    )
    consumer.close()
    assert (lo, hi) == (40, 100)


def test_offsets_for_times(shared_broker, admin):
    _wait(admin.create_topics([NewTopic("adm-time", 1, 1)]))
    producer = confluent_kafka.Producer({"bootstrap.servers": shared_broker.bootstrap})
    for i, ts in enumerate([1000, 2000, 3000, 4000]):
        producer.produce("adm-time", value=b"v%d" % i, partition=0, timestamp=ts)
    producer.flush(10)  # one batch: the answer must point inside it
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": shared_broker.bootstrap, "group.id": "t"}
    )
    found = consumer.offsets_for_times(
        [confluent_kafka.TopicPartition("adm-time", 0, 2500)], timeout=10
    )
    consumer.close()
    assert found[0].offset == 2


@pytest.mark.parametrize(
    "topic,error",
    [
        (NewTopic("adm-dup", 1, 1), "TOPIC_ALREADY_EXISTS"),
        (NewTopic("adm-rf", 1, 3), "INVALID_REPLICATION_FACTOR"),
        (NewTopic("adm-bad-cfg", 1, 1, config={"segment.bytes": "tiny"}), "INVALID_CONFIG"),
        (NewTopic("bad/name", 1, 1), "TOPIC_EXCEPTION"),  # librdkafka's name for 17
    ],
)
def test_create_errors(admin, topic, error):
    if topic.topic == "adm-dup":
        _wait(admin.create_topics([NewTopic("adm-dup", 1, 1)]))
    with pytest.raises(confluent_kafka.KafkaException) as info:
        _wait(admin.create_topics([topic]))
    assert info.value.args[0].name() == error


def test_delete_topic(admin):
    _wait(admin.create_topics([NewTopic("adm-del", 2, 1)]))
    _wait(admin.delete_topics(["adm-del"]))
    assert "adm-del" not in admin.list_topics(timeout=10).topics


def test_retention_deletes_old_segments(tmp_path):
    broker = BrokerProcess(
        tmp_path / "data",
        settings={"log.retention.check.interval.ms": "200", "log.segment.delete.delay.ms": "0"},
    ).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        _wait(
            admin.create_topics(
                [NewTopic("ret", 1, 1, config={"segment.bytes": "16384", "retention.ms": "1000"})]
            )
        )
        old = int(time.time() * 1000) - 60_000
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": broker.bootstrap, "linger.ms": 0}
        )
        for i in range(300):
            producer.produce("ret", value=b"x" * 200, partition=0, timestamp=old)
            if i % 20 == 0:
                producer.flush(10)
        producer.flush(10)
        producer.produce("ret", value=b"fresh", partition=0)
        producer.flush(10)
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "r"}
        )
        deadline = time.monotonic() + 20
        lo = 0
        while time.monotonic() < deadline:
            lo, hi = consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition("ret", 0), timeout=10, cached=False
            )
            if lo > 0:
                break
            time.sleep(0.2)
        consumer.close()
        assert 0 < lo <= 300 and hi == 301
        assert "retention deleted" in broker.log()
        segments = [p for p in (tmp_path / "data" / "ret-0").iterdir() if p.suffix == ".log"]
        assert len(segments) >= 1
    finally:
        broker.stop()


def test_validate_only_creates_nothing(admin):
    _wait(admin.create_topics([NewTopic("adm-dry", 3, 1)], validate_only=True))
    assert "adm-dry" not in admin.list_topics(timeout=10).topics
    with pytest.raises(confluent_kafka.KafkaException) as info:
        _wait(admin.create_topics([NewTopic("adm-dry", 0, 1)], validate_only=True))
    assert info.value.args[0].name() == "INVALID_PARTITIONS"
    _wait(admin.create_topics([NewTopic("adm-dry2", 1, 1)]))
    _wait(admin.create_partitions([NewPartitions("adm-dry2", 4)], validate_only=True))
    assert len(admin.list_topics("adm-dry2", timeout=10).topics["adm-dry2"].partitions) == 1
    with pytest.raises(confluent_kafka.KafkaException) as info:
        _wait(admin.create_partitions([NewPartitions("adm-dry2", 1)], validate_only=True))
    assert info.value.args[0].name() == "INVALID_PARTITIONS"


def test_create_topics_timeout_ms_0_creates_and_answers_request_timed_out(shared_broker, admin):
    """As Kafka's ZooKeeper-mode broker: timeout_ms <= 0 waits for no
    leader, and each topic created answers REQUEST_TIMED_OUT; librdkafka
    hides that code from an application that asked for no wait."""
    from pluglog import protocol as codec
    from pluglog.client.blocking import BlockingClient

    def create(name, timeout_ms, validate_only=False):
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": 2,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": timeout_ms,
            "validate_only": validate_only,
        }
        with BlockingClient("127.0.0.1", shared_broker.port) as client:
            (topic,) = client.request(codec.CREATE_TOPICS, 5, body)["topics"]
        return topic["name"], topic["error_code"]

    assert create("adm-nowait", 0, validate_only=True) == ("adm-nowait", 0)
    assert create("adm-nowait", 0) == ("adm-nowait", 7)
    assert create("adm-nowait-neg", -1) == ("adm-nowait-neg", 7)
    assert create("adm-nowait", 5000) == ("adm-nowait", 36)  # TOPIC_ALREADY_EXISTS: made
    topics = admin.list_topics(timeout=10).topics
    assert len(topics["adm-nowait"].partitions) == len(topics["adm-nowait-neg"].partitions) == 2
    _wait(admin.create_topics([NewTopic("adm-nowait-ck", 1, 1)], operation_timeout=0))
    assert "adm-nowait-ck" in admin.list_topics(timeout=10).topics


def test_create_partitions_timeout_ms_0_grows_and_answers_request_timed_out(shared_broker, admin):
    """As CreateTopics: timeout_ms <= 0 waits for no leader, and each topic
    grown answers REQUEST_TIMED_OUT, which librdkafka hides from an
    application that asked for no wait."""
    from pluglog import protocol as codec
    from pluglog.client.blocking import BlockingClient

    def grow(name, count, timeout_ms, validate_only=False):
        body = {
            "topics": [{"name": name, "count": count, "assignments": None}],
            "timeout_ms": timeout_ms,
            "validate_only": validate_only,
        }
        with BlockingClient("127.0.0.1", shared_broker.port) as client:
            (result,) = client.request(codec.CREATE_PARTITIONS, 1, body)["results"]
        return result["name"], result["error_code"]

    _wait(admin.create_topics([NewTopic("adm-grow0", 1, 1)]))
    assert grow("adm-grow0", 2, 0, validate_only=True) == ("adm-grow0", 0)
    assert grow("adm-grow0", 2, 0) == ("adm-grow0", 7)
    assert grow("adm-grow0", 3, 5000) == ("adm-grow0", 0)
    assert len(admin.list_topics(timeout=10).topics["adm-grow0"].partitions) == 3
    _wait(admin.create_partitions([NewPartitions("adm-grow0", 4)], operation_timeout=0))
    assert len(admin.list_topics(timeout=10).topics["adm-grow0"].partitions) == 4


def test_min_insync_replicas_refuses_acks_all(shared_broker, admin):
    from pluglog import protocol as codec
    from pluglog.client.blocking import BlockingClient
    from pluglog.protocol.records import Record, build_batch

    _wait(admin.create_topics([NewTopic("adm-isr", 1, 1, config={"min.insync.replicas": "2"})]))

    def produce(acks):
        with BlockingClient("127.0.0.1", shared_broker.port) as client:
            body = {
                "acks": acks,
                "timeout_ms": 5000,
                "topic_data": [
                    {
                        "name": "adm-isr",
                        "partition_data": [
                            {"index": 0, "records": build_batch([Record(value=b"x")])}
                        ],
                    }
                ],
            }
            resp = client.request(codec.PRODUCE, 8, body)
            return resp["responses"][0]["partition_responses"][0]["error_code"]

    assert produce(-1) == 19  # NOT_ENOUGH_REPLICAS: one broker is the only in-sync replica
    assert produce(1) == 0
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": shared_broker.bootstrap, "group.id": "i"}
    )
    lo, hi = consumer.get_watermark_offsets(
        confluent_kafka.TopicPartition("adm-isr", 0), timeout=10
    )
    consumer.close()
    assert (lo, hi) == (0, 1)
