"""Dynamic broker configs through AlterConfigs / IncrementalAlterConfigs (Clock, temp dir)."""

from twisted.internet.task import Clock

from pluglog.broker.core import Broker
from pluglog.config import BrokerConfig
from pluglog.errors import INVALID_CONFIG
from pluglog.plugins import make_plugin_manager
from pluglog.protocol.headers import RequestHeader
from pluglog.registry import Registry
from pluglog.server.handlers import RequestContext
from pluglog.server.handlers.admin import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)

BROKER = 4


def make_broker(path):
    clock = Clock()
    clock.advance(1_700_000_000)
    config = BrokerConfig(data_dir=str(path), storage="memory", advertised_port=9092)
    broker = Broker(config, Registry(make_plugin_manager(autoload=False)), clock)
    broker.start()
    return broker


def ctx(broker, api_key, version=0):
    return RequestContext(broker, RequestHeader(api_key, version, 1, "test", 0), "peer")


def result(deferred):
    out = []
    deferred.addBoth(out.append)
    return out[0]


def describe(broker, keys):
    body = {
        "resources": [{"resource_type": BROKER, "resource_name": "0", "configuration_keys": keys}],
        "include_synonyms": False,
    }
    answer = handle_describe_configs(ctx(broker, 32, 1), body)
    return {
        c["name"]: (c["value"], c["read_only"], c["config_source"])
        for c in answer["results"][0]["configs"]
    }


def test_alter_broker_configs_at_run_time(tmp_path):
    broker = make_broker(tmp_path)
    broker.create_topic("plain", 1)
    broker.create_topic("own", 1, configs={"retention.ms": "1000"})
    body = {
        "resources": [
            {
                "resource_type": BROKER,
                "resource_name": "",
                "configs": [
                    {"name": "log.retention.ms", "value": "3600000"},
                    {"name": "log.cleaner.threads", "value": "2"},
                    {"name": "quota.producer.default", "value": "5000"},
                ],
            }
        ],
        "validate_only": False,
    }
    answer = result(handle_alter_configs(ctx(broker, 33), body))
    assert answer["responses"][0]["error_code"] == 0
    assert broker.config.log_cleaner_threads == 2
    assert broker.partition("plain", 0).config.retention_ms == 3600000  # follows the default
    assert broker.partition("own", 0).config.retention_ms == 1000  # its own override wins
    assert broker.quotas.enabled  # the static producer quota default now applies
    seen = describe(broker, ["log.retention.ms", "log.cleaner.threads", "broker.id"])
    assert seen["log.retention.ms"] == ("3600000", False, 2)  # DYNAMIC_BROKER_CONFIG
    assert seen["log.cleaner.threads"] == ("2", False, 2)
    assert seen["broker.id"] == ("0", True, 5)  # read-only, DEFAULT_CONFIG

    # Incremental: delete one key, keep the others; persisted for the next start.
    inc = {
        "resources": [
            {
                "resource_type": BROKER,
                "resource_name": "0",
                "configs": [
                    {"name": "log.cleaner.threads", "config_operation": 1, "value": None},
                    {"name": "log.cleaner.backoff.ms", "config_operation": 0, "value": "500"},
                ],
            }
        ],
        "validate_only": False,
    }
    answer = result(handle_incremental_alter_configs(ctx(broker, 44), inc))
    assert answer["responses"][0]["error_code"] == 0
    assert broker.config.log_cleaner_threads == 1 and broker.config.log_cleaner_backoff_ms == 500
    result(broker.stop())  # releases the data dir's lock
    again = make_broker(tmp_path)
    assert again.config.log_cleaner_backoff_ms == 500
    assert again.config.topic_defaults.retention_ms == 3600000


def test_read_only_and_bad_values_are_refused(tmp_path):
    broker = make_broker(tmp_path)
    for name, value in (
        ("broker.id", "7"),
        ("log.cleaner.threads", "many"),
        ("log.cleaner.enable", "false"),
    ):
        body = {
            "resources": [
                {
                    "resource_type": BROKER,
                    "resource_name": "",
                    "configs": [{"name": name, "value": value}],
                }
            ],
            "validate_only": False,
        }
        answer = result(handle_alter_configs(ctx(broker, 33), body))
        entry = answer["responses"][0]
        assert entry["error_code"] == INVALID_CONFIG, name
        assert name in entry["error_message"]
    assert broker.config.broker_id == 0 and broker.config.log_cleaner_threads == 1


def test_num_replica_fetchers_is_a_dynamic_broker_config(tmp_path):
    broker = make_broker(tmp_path)
    body = {
        "resources": [
            {
                "resource_type": BROKER,
                "resource_name": "",
                "configs": [{"name": "num.replica.fetchers", "value": "3"}],
            }
        ],
        "validate_only": False,
    }
    answer = result(handle_alter_configs(ctx(broker, 33), body))
    assert answer["responses"][0]["error_code"] == 0
    assert broker.config.num_replica_fetchers == 3
    if broker.replicas is not None:
        assert broker.replicas.config.num_replica_fetchers == 3
    assert describe(broker, ["num.replica.fetchers"])["num.replica.fetchers"] == ("3", False, 2)
    body["resources"][0]["configs"] = [{"name": "num.replica.fetchers", "value": "0"}]
    answer = result(handle_alter_configs(ctx(broker, 33), body))
    assert answer["responses"][0]["error_code"] == INVALID_CONFIG  # at least 1
    assert broker.config.num_replica_fetchers == 3
    result(broker.stop())
