"""DescribeConfigs: Kafka's config sources, synonyms, listeners, types and
documentation, for brokers and topics, through the codec in every advertised
version."""

import pytest
from twisted.internet.task import Clock

from pluglog import config_docs
from pluglog import protocol as codec
from pluglog.broker.core import Broker
from pluglog.config import BROKER_KEYS, TOPIC_KEYS, parse_settings
from pluglog.plugins import make_plugin_manager
from pluglog.registry import Registry
from pluglog.server.handlers.config_sources import strport_address
from tests.unit.test_cluster_handlers import call
from tests.unit.test_group_coordinator import result_of

STATIC, DEFAULT, TOPIC = 4, 5, 1


@pytest.fixture
def broker(tmp_path):
    config = parse_settings(
        {
            "log.retention.ms": "1000",
            "broker.rack": "r1",
            "replica.lag.time.max.ms": "30000",  # Kafka's default, but set: still static
            "group.initial.rebalance.delay.ms": "0",
        }
    ).replace(
        data_dir=str(tmp_path / "data"),
        storage="memory",
        listen="tcp:9092:interface=127.0.0.1",
        advertised_host="kafka-1.example",
        advertised_port=19092,
    )
    # As twistd pluglog records --listen, --advertised-listener and --data-dir.
    config = config.replace(
        explicit_keys=config.explicit_keys | {"listeners", "advertised.listeners", "log.dirs"}
    )
    clock = Clock()
    clock.advance(1000)
    b = Broker(config, Registry(make_plugin_manager(autoload=False)), clock)
    result_of(b.start())
    result_of(b.create_topic("t", 1, 1, {"segment.bytes": "1048576"}))
    return b


def describe(broker, version, rtype, name, keys=None, synonyms=False, docs=False):
    body = {
        "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": synonyms,
        "include_documentation": docs,
    }
    (result,) = call(broker, codec.DESCRIBE_CONFIGS, version, body)["results"]
    assert result["error_code"] == 0, result
    return {c["name"]: c for c in result["configs"]}


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_broker_sources_listeners_and_cluster_keys(broker, version):
    configs = describe(broker, version, 4, str(broker.node_id))
    source = {k: c["config_source"] for k, c in configs.items()}
    value = {k: c["value"] for k, c in configs.items()}
    assert value["listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert value["advertised.listeners"] == "PLAINTEXT://kafka-1.example:19092"
    assert source["listeners"] == STATIC  # --listen given
    assert source["advertised.listeners"] == STATIC
    assert (value["log.retention.ms"], source["log.retention.ms"]) == ("1000", STATIC)
    assert source["replica.lag.time.max.ms"] == STATIC
    assert (value["num.partitions"], source["num.partitions"]) == ("1", DEFAULT)
    assert (value["broker.rack"], source["broker.rack"]) == ("r1", STATIC)
    assert (value["zookeeper.connect"], source["zookeeper.connect"]) == (None, DEFAULT)
    for key in ("replica.fetch.max.bytes", "zookeeper.session.timeout.ms", "log.segment.bytes"):
        assert source[key] == DEFAULT, key
    assert value["log.dirs"] == broker.config.data_dir and source["log.dirs"] == STATIC
    # Kafka's dynamic broker configs (pluglog.broker.dynamic_config) are not read-only.
    from pluglog.broker.dynamic_config import DYNAMIC_KEYS

    assert all(c["read_only"] == (name not in DYNAMIC_KEYS) for name, c in configs.items())


def test_broker_v0_is_default_and_key_filter(broker):
    configs = describe(broker, 0, 4, "", keys=["log.retention.ms", "num.partitions"])
    assert sorted(configs) == ["log.retention.ms", "num.partitions"]
    assert configs["log.retention.ms"]["is_default"] is False
    assert configs["num.partitions"]["is_default"] is True


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_topic_sources_inherit_the_broker(broker, version):
    configs = describe(broker, version, 2, "t")
    assert (configs["segment.bytes"]["value"], configs["segment.bytes"]["config_source"]) == (
        "1048576",
        TOPIC,
    )
    # No override: the broker's static log.retention.ms shows through.
    assert (configs["retention.ms"]["value"], configs["retention.ms"]["config_source"]) == (
        "1000",
        STATIC,
    )
    assert configs["cleanup.policy"]["config_source"] == DEFAULT
    assert all(c["synonyms"] == [] for c in configs.values())


def test_topic_synonyms(broker):
    configs = describe(broker, 1, 2, "t", synonyms=True)
    assert [
        (s["name"], s["value"], s["source"]) for s in configs["segment.bytes"]["synonyms"]
    ] == [
        ("segment.bytes", "1048576", TOPIC),
        ("log.segment.bytes", "1073741824", DEFAULT),
    ]
    assert [(s["name"], s["value"], s["source"]) for s in configs["retention.ms"]["synonyms"]] == [
        ("log.retention.ms", "1000", STATIC),
        ("log.retention.ms", "604800000", DEFAULT),
    ]


@pytest.mark.parametrize(
    "strport,address",
    [
        ("tcp:9092", ("0.0.0.0", 9092)),
        ("tcp:port=9093:interface=10.0.0.1", ("10.0.0.1", 9093)),
        (r"tcp:9094:interface=\:\:1", ("::1", 9094)),
    ],
)
def test_strport_address(strport, address):
    assert strport_address(strport) == address


def test_ipv6_listener_in_kafka_form(broker):
    broker.config = broker.config.replace(listen=r"tcp:0:interface=\:\:1")
    broker.bound_port = 40001
    configs = describe(broker, 2, 4, "", keys=["listeners"])
    assert configs["listeners"]["value"] == "PLAINTEXT://[::1]:40001"
    assert configs["listeners"]["config_source"] == STATIC


def test_default_listener_is_default_config(broker):
    broker.config = broker.config.replace(listen="tcp:9092", explicit_keys=frozenset())
    configs = describe(broker, 2, 4, "", keys=["listeners"])
    assert configs["listeners"]["value"] == "PLAINTEXT://0.0.0.0:9092"
    assert configs["listeners"]["config_source"] == DEFAULT


@pytest.mark.parametrize("version", [2, 4])
def test_derived_values_are_defaults_not_static(broker, version):
    # A broker given no --advertised-listener advertises the address it
    # derived (service.py fills advertised_host/port in): Kafka reports an
    # unset advertised.listeners as DEFAULT_CONFIG, and so does pluglog.
    broker.config = broker.config.replace(
        explicit_keys=broker.config.explicit_keys - {"advertised.listeners", "log.dirs"},
        cluster_id="generated-at-start",
    )
    configs = describe(broker, version, 4, "", keys=["advertised.listeners", "log.dirs"])
    assert configs["advertised.listeners"]["value"] == "PLAINTEXT://kafka-1.example:19092"
    assert configs["advertised.listeners"]["config_source"] == DEFAULT
    assert configs["log.dirs"]["config_source"] == DEFAULT
    configs = describe(broker, version, 4, "", keys=["cluster.id", "log.retention.ms"])
    assert configs["cluster.id"]["config_source"] == DEFAULT
    assert configs["log.retention.ms"]["config_source"] == STATIC


def test_v3_types_and_documentation_when_asked(broker):
    types = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "LONG": 5, "DOUBLE": 6, "LIST": 7, "PASSWORD": 9}
    plain = describe(broker, 3, 2, "t")
    documented = describe(broker, 4, 2, "t", docs=True)
    for configs in (plain, documented):
        kinds = {k: c["config_type"] for k, c in configs.items()}
        assert kinds["segment.bytes"] == types["INT"]
        assert kinds["retention.ms"] == types["LONG"]
        assert kinds["cleanup.policy"] == types["LIST"]
        assert kinds["min.cleanable.dirty.ratio"] == types["DOUBLE"]
        assert kinds["unclean.leader.election.enable"] == types["BOOLEAN"]
        assert kinds["compression.type"] == types["STRING"]
    assert all(c["documentation"] is None for c in plain.values())
    assert documented["segment.bytes"]["documentation"] == "Roll a segment at this size."
    broker_configs = describe(broker, 4, 4, "", docs=True)
    assert broker_configs["inter.broker.sasl.password"]["config_type"] == types["PASSWORD"]
    assert broker_configs["log.roll.ms"]["documentation"].startswith(
        "Default of the topic config segment.ms"
    )
    # Every key DescribeConfigs reports has a type and a documentation.
    assert all(c["config_type"] != 0 and c["documentation"] for c in broker_configs.values())


def test_every_config_key_is_typed_and_documented():
    keys = {*BROKER_KEYS, *TOPIC_KEYS, *(spec[3] for spec in TOPIC_KEYS.values())}
    keys |= {"listeners", "advertised.listeners", "log.dirs"}
    assert sorted(keys - set(config_docs.CONFIG_DOCS)) == []
    assert sorted(set(config_docs.CONFIG_DOCS) - keys) == []
    for key, (kind, text) in config_docs.CONFIG_DOCS.items():
        assert config_docs.BOOLEAN <= kind <= config_docs.PASSWORD, key
        assert text and text[0].isupper() and text.endswith("."), key
