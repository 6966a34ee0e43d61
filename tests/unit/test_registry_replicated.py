"""The registry's leader/follower logic (pluglog.serialization.replicated), in memory.

A real Broker on in-memory storage with the ``local`` coordinator and a
Clock. Roles of ``_schemas``-0 are flipped the way the replica manager flips
them (``Partition.become_leader`` / ``become_follower``); a follower's fetch
is ``Partition.update_follower`` and a replicated batch
``Partition.append_replicated``, so the HW moves exactly as in a cluster.
"""

import io
import json

import pytest
from twisted.internet import defer
from twisted.web.test.requesthelper import DummyRequest

from pluglog.addresses import advertised_url
from pluglog.coordination import zkdata
from pluglog.errors import ConfigError, TopicExistsError
from pluglog.protocol import records as batches
from pluglog.serialization.registry import config_key, schema_key
from pluglog.serialization.replicated import RegistryNode, section_settings
from pluglog.serialization.store import SCHEMAS_TOPIC, topic_configs
from pluglog.web.forward import FORWARDED_HEADER
from pluglog.web.registry import RegistryResource
from tests.unit.test_group_coordinator import make_broker, pending, result_of

OTHER = 1  # the other replica of _schemas-0 (this broker is 0)
TIMEOUT_S = 5.0


def schema(name):
    return json.dumps({"type": "record", "name": name, "fields": [{"name": "a", "type": "int"}]})


@pytest.fixture
def node(tmp_path):
    from twisted.internet.task import Clock

    clock = Clock()
    clock.advance(1000)
    broker = make_broker(tmp_path, clock)
    node = RegistryNode(broker, timeout_s=TIMEOUT_S)
    node.start()
    return node


def part_of(node):
    return node.broker.partitions[(SCHEMAS_TOPIC, 0)]


def create(node):
    """The first write creates _schemas (here: one broker, so RF 1)."""
    assert result_of(node.route()) is None
    assert node.broker.num_partitions(SCHEMAS_TOPIC) == 1
    return part_of(node)


def with_follower(node):
    """Lead in a new epoch with OTHER in the ISR: writes wait for its fetch."""
    part = part_of(node)
    part.become_leader(part.leader_epoch + 1, (0, OTHER), (0, OTHER), node.broker.now_ms())
    part.update_follower(OTHER, part.log.log_end_offset, node.broker.now_ms())
    return part


def register(node, subject, text):
    return node.write(lambda: node.registry.register_version(subject, text).schema_id)


def record_batch(node, base_offset, items, epoch):
    now = node.broker.now_ms()
    return batches.build_batch(
        [batches.Record(k, v, (), now) for k, v in items],
        base_offset=base_offset,
        base_timestamp=now,
        partition_leader_epoch=epoch,
    )


def schema_record(subject, version, schema_id, text):
    value = {"subject": subject, "version": version, "id": schema_id, "schema": text}
    return schema_key(subject, version), json.dumps(value).encode()


def test_first_write_creates_a_compacted_topic_and_answers_once_committed(node):
    part = create(node)
    assert part.config.cleanup_policy == "compact"
    assert result_of(register(node, "s", schema("A"))) == 1
    assert node.registry.subject_names() == ["s"]
    assert node.applied == part.high_watermark == 1


def test_topic_configs_follow_the_replication_factor():
    assert [topic_configs(rf)["min.insync.replicas"] for rf in (1, 2, 3, 5)] == [
        "1",
        "1",
        "2",
        "2",
    ]
    assert all(topic_configs(rf)["cleanup.policy"] == "compact" for rf in (1, 3))


def test_write_is_answered_and_seen_only_after_the_hw_passes_it(node):
    part = create(node)
    with_follower(node)
    d = pending(register(node, "s", schema("A")))
    assert part.log.log_end_offset == 1 and part.high_watermark == 0
    # Not committed: no read on this broker sees it yet.
    assert node.registry.subject_names() == [] and node.registry.ids == {}
    part.update_follower(OTHER, 1, node.broker.now_ms())
    assert result_of(d) == 1
    assert node.registry.subject_names() == ["s"]


def test_hw_timeout_is_50002_and_the_record_applies_once_committed_later(node):
    part = create(node)
    with_follower(node)
    d = register(node, "s", schema("A"))
    node.reactor.advance(TIMEOUT_S + 0.1)
    failure = []
    d.addErrback(failure.append)
    assert failure[0].value.code == 50002 and failure[0].value.status == 500
    assert node.registry.subject_names() == []
    # The follower catches up after all: the tail applies what is committed.
    part.update_follower(OTHER, 1, node.broker.now_ms())
    node.reactor.advance(0.2)
    assert node.registry.subject_names() == ["s"]


def test_losing_leadership_during_the_wait_is_50004(node):
    part = create(node)
    with_follower(node)
    d = register(node, "s", schema("A"))
    part.become_follower(OTHER, part.leader_epoch + 1, (0, OTHER), (OTHER,))
    failure = []
    d.addErrback(failure.append)
    assert failure[0].value.code == 50004


def test_follower_tails_committed_records_only(node):
    part = create(node)
    part.become_follower(OTHER, part.leader_epoch + 1, (0, OTHER), (0, OTHER))
    items = [schema_record("s", 1, 7, schema("A")), schema_record("t", 1, 8, schema("B"))]
    part.append_replicated(record_batch(node, 0, items[:1], part.leader_epoch), 0, 1)
    part.append_replicated(record_batch(node, 1, items[1:], part.leader_epoch), 1, 2)
    node.reactor.advance(0.2)
    # Offset 1 is above the leader's HW (1): not served yet.
    assert node.registry.subject_names() == ["s"] and node.registry.get_schema(7)
    part.append_replicated(b"", 2, 3)
    node.reactor.advance(0.2)
    assert node.registry.subject_names() == ["s", "t"]
    # A follower never writes: it routes writes to the leader's URL.
    node.broker.coordinator.http_urls = lambda: {OTHER: "http://leader:8081"}
    assert node.leader_id() == OTHER
    assert result_of(node.route()) == "http://leader:8081"


def test_new_leader_commits_its_log_before_allocating_ids(node):
    part = create(node)
    part.become_follower(OTHER, part.leader_epoch + 1, (0, OTHER), (0, OTHER))
    # The old leader wrote id 5 and died before we learned its HW.
    old = [
        schema_record("s", 1, 5, schema("A")),
        (config_key(None), b'{"compatibilityLevel":"NONE"}'),
    ]
    part.append_replicated(record_batch(node, 0, old, part.leader_epoch), 0, 1)
    node.reactor.advance(0.2)
    assert node.registry.ids == {}
    part.become_leader(part.leader_epoch + 1, (0, OTHER), (0, OTHER), node.broker.now_ms())
    d = pending(register(node, "t", schema("B")))
    assert part.log.log_end_offset == 2  # nothing appended before the log is committed
    part.update_follower(OTHER, 2, node.broker.now_ms())  # commits the old records
    assert part.log.log_end_offset == 3
    part.update_follower(OTHER, 3, node.broker.now_ms())
    assert result_of(d) == 6  # after the old leader's 5, never a reuse
    assert node.registry.level() == "NONE"


def test_no_leader_known_is_50004_after_the_timeout(node):
    part = create(node)
    part.become_follower(-1, part.leader_epoch + 1, (0, OTHER), ())
    d = node.route()
    node.reactor.advance(TIMEOUT_S + 0.1)
    failure = []
    d.addErrback(failure.append)
    assert failure[0].value.code == 50004
    # A leader without a registered URL is named in the error.
    part.become_follower(OTHER, part.leader_epoch + 1, (0, OTHER), (OTHER,))
    node.broker.coordinator.http_urls = lambda: {}
    d = node.route()
    node.reactor.advance(TIMEOUT_S + 0.1)
    d.addErrback(failure.append)
    assert "broker 1" in failure[1].value.message


def test_a_forwarded_write_is_not_forwarded_again(node):
    part = create(node)
    part.become_follower(OTHER, part.leader_epoch + 1, (0, OTHER), (0, OTHER))
    node.broker.coordinator.http_urls = lambda: {OTHER: "http://leader:8081"}
    request = DummyRequest([b"s", b"versions"])
    request.prepath = [b"subjects"]
    request.method = b"POST"
    request.content = io.BytesIO(json.dumps({"schema": schema("A")}).encode())
    request.requestHeaders.setRawHeaders(FORWARDED_HEADER, [b"2"])
    RegistryResource(node.registry, node).render(request)
    assert request.finished and request.responseCode == 500
    assert json.loads(b"".join(request.written))["error_code"] == 50003


def test_the_resource_registers_through_the_node_on_the_leader(node):
    create(node)
    request = DummyRequest([b"s", b"versions"])
    request.prepath = [b"subjects"]
    request.method = b"POST"
    request.content = io.BytesIO(json.dumps({"schema": schema("A")}).encode())
    RegistryResource(node.registry, node).render(request)
    assert request.finished and json.loads(b"".join(request.written)) == {"id": 1}


def test_bad_input_through_the_node_keeps_confluent_codes(node):
    create(node)
    request = DummyRequest([b"s", b"versions"])
    request.prepath = [b"subjects"]
    request.method = b"POST"
    request.content = io.BytesIO(b"not json")
    RegistryResource(node.registry, node).render(request)
    assert request.responseCode == 400
    assert json.loads(b"".join(request.written))["error_code"] == 400


def test_section_settings_and_bad_values(tmp_path):
    from pluglog.config import BrokerConfig

    config = BrokerConfig(data_dir=str(tmp_path))
    assert section_settings(config) == (3, 10.0)
    config = config.replace(
        plugin_sections={
            "schema_registry": {
                "kafkastore.topic.replication.factor": "2",
                "kafkastore.timeout.ms": "500",
            }
        }
    )
    assert section_settings(config) == (2, 0.5)
    bad = config.replace(plugin_sections={"schema_registry": {"kafkastore.timeout.ms": "soon"}})
    with pytest.raises(ConfigError, match="schema_registry"):
        section_settings(bad)


def test_http_url_in_the_broker_registration(tmp_path):
    from pluglog.config import BrokerConfig

    config = BrokerConfig(data_dir=str(tmp_path), advertised_host="b1.example")
    assert advertised_url(config) is None
    assert advertised_url(config.replace(http="tcp:8081")) == "http://b1.example:8081"
    local = config.replace(http="tcp:port=9001:interface=127.0.0.1")
    assert advertised_url(local) == "http://127.0.0.1:9001"
    assert advertised_url(config.replace(http="tcp:0")) is None
    body = zkdata.broker_json("b1.example", 9092, None, "http://b1.example:8081")
    assert body["http_url"] == "http://b1.example:8081"
    assert zkdata.broker_from_json("1", body) == (1, "b1.example", 9092, None)
    assert "http_url" not in zkdata.broker_json("b1.example", 9092)


def test_losing_the_creation_race_waits_for_the_winners_topic(node):
    broker = node.broker
    real_create = broker.create_topic
    broker.create_topic = lambda *a, **k: defer.fail(TopicExistsError("another broker won"))
    d = node.route()
    assert not d.called  # waiting for the topic and its leader to show up
    broker.create_topic = real_create
    result_of(broker.create_topic(SCHEMAS_TOPIC, 1, 1, topic_configs(1), internal=True))
    node.reactor.advance(0.1)
    assert result_of(d) is None
