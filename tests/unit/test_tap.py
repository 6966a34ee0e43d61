"""twistd Options: every bad value is a UsageError naming it."""

import pytest
from twisted.python import usage

from pluglog.addresses import listen_address
from pluglog.tap import Options, parse_host_port


def parse(*argv):
    options = Options()
    options.parseOptions(list(argv))
    return options


def test_defaults(tmp_path):
    config = parse("--data-dir", str(tmp_path)).broker_config
    assert config.listen == "tcp:9092"
    assert config.advertised_port == 9092
    assert config.data_dir == str(tmp_path)
    assert config.storage == "segments"
    assert config.fsync == "interval"


def test_http_listener_is_off_unless_given(tmp_path):
    assert parse("-d", str(tmp_path)).broker_config.http == ""
    config = parse("-d", str(tmp_path), "--http", "tcp:8081:interface=127.0.0.1").broker_config
    assert config.http == "tcp:8081:interface=127.0.0.1"


def test_explicit_interface_is_advertised(tmp_path):
    config = parse("--listen", "tcp:19092:interface=127.0.0.1", "-d", str(tmp_path)).broker_config
    assert (config.advertised_host, config.advertised_port) == ("127.0.0.1", 19092)


def test_advertised_listener(tmp_path):
    config = parse(
        "-d", str(tmp_path), "--advertised-listener", "kafka.example:9999"
    ).broker_config
    assert (config.advertised_host, config.advertised_port) == ("kafka.example", 9999)
    assert parse_host_port("[::1]:9092") == ("::1", 9092)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--listen", "tcp:notaport"], "notaport"),
        (["--listen", "bogus:1"], "bogus:1"),
        (["--listen", "unix:/tmp/x.sock"], "unix:/tmp/x.sock"),
        (["--advertised-listener", "nohost"], "nohost"),
        (["--advertised-listener", "h:99999"], "h:99999"),
        (["--advertised-listener", "h:abc"], "h:abc"),
        (["--fsync", "sometimes"], "sometimes"),
        (["--storage", "floppy"], "floppy"),
        (["--coordinator", "etcd-of-dreams"], "etcd-of-dreams"),
        (["--broker-id", "one"], "one"),
        (["--broker-id", "-3"], "-3"),
        (["--set", "num.partitions"], "num.partitions"),
        (["--set", "num.partitions=zero"], "zero"),
        (["--set", "num.partitions=0"], "num.partitions"),
        (["--set", "no.such.key=1"], "no.such.key"),
        (["--set", "log.cleanup.policy=shred"], "shred"),
        (["--set", "auto.create.topics.enable=perhaps"], "perhaps"),
        (["--config", "/nonexistent/broker.ini"], "/nonexistent/broker.ini"),
        (["--http", "tcp:notaport"], "tcp:notaport"),
        (["--http", "bogus:8081"], "bogus:8081"),
    ],
)
def test_bad_values_name_the_value(argv, needle, tmp_path):
    with pytest.raises(usage.UsageError) as info:
        parse("-d", str(tmp_path), *argv)
    assert needle in str(info.value)


def test_config_file(tmp_path):
    ini = tmp_path / "broker.ini"
    ini.write_text(
        "num.partitions = 3\n"
        "log.segment.bytes = 1048576\n"
        "log.retention.ms = 60000\n"
        "auto.create.topics.enable = false\n"
        "\n[metrics]\nport = 9100\n"
    )
    config = parse(
        "-d", str(tmp_path), "--config", str(ini), "--set", "num.partitions=5"
    ).broker_config
    assert config.num_partitions == 5  # --set wins over the file
    assert config.topic_defaults.segment_bytes == 1048576
    assert config.topic_defaults.retention_ms == 60000
    assert config.auto_create_topics_enable is False
    assert config.plugin_sections["metrics"]["port"] == "9100"


def test_bad_config_file_value(tmp_path):
    ini = tmp_path / "broker.ini"
    ini.write_text("[broker]\nlog.segment.bytes = huge\n")
    with pytest.raises(usage.UsageError, match="log.segment.bytes.*huge"):
        parse("-d", str(tmp_path), "--config", str(ini))


def test_listen_address():
    assert listen_address("tcp:9092") == (None, 9092)
    assert listen_address(r"tcp:port=9093:interface=\:\:1") == ("::1", 9093)


def test_sink_section_with_unknown_plugin(tmp_path):
    ini = tmp_path / "broker.ini"
    ini.write_text("[broker]\nnum.partitions = 1\n[sink:archive]\nplugin = warp-drive\n")
    with pytest.raises(usage.UsageError, match="warp-drive"):
        parse("-d", str(tmp_path), "--config", str(ini))
