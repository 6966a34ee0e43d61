"""Deterministic unit tests: option parsing, offset arithmetic, the sink
plugin's settings and the supervisor's restart policy (under task.Clock)."""

import json
import signal

import confluent_kafka as ck
import pytest
from pluglog_spark import offsets
from pluglog_spark.options import OptionError, SinkOptions, SourceOptions
from pluglog_spark.plugin import SparkSink, sink_command
from pluglog_spark.supervisor import SupervisedProcess
from pluglog_spark.transactional import _only_fatal
from twisted.internet import error
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from zope.interface.verify import verifyObject

from pluglog.config import BrokerConfig
from pluglog.errors import ConfigError
from pluglog.interfaces import ISink
from pluglog.plugins import make_plugin_manager
from pluglog.protocol.records import Record
from pluglog.registry import Registry

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_source_options_follow_spark_kafka_names():
    opts = SourceOptions.parse(
        {
            **BOOT,
            "subscribe": "a, b",
            "startingOffsets": '{"a": {"0": 5, "1": -2}}',
            "maxOffsetsPerTrigger": "100",
            "minPartitions": "4",
            "failOnDataLoss": "false",
            "kafka.fetch.max.bytes": "1000",
        },
        streaming=True,
    )
    assert opts.subscribe == ("a", "b")
    assert opts.starting == {"a": {0: 5, 1: -2}}
    assert (opts.max_offsets_per_trigger, opts.min_partitions) == (100, 4)
    assert opts.fail_on_data_loss is False
    assert opts.kafka == {"fetch.max.bytes": "1000"}
    assert SourceOptions.parse(
        {"bootstrap.servers": "h:1", "assign": '{"t": [1, 0]}'}, False
    ).assign == {"t": [0, 1]}


@pytest.mark.parametrize(
    "options, streaming, message",
    [
        ({"subscribe": "a"}, False, "bootstrap.servers"),
        ({**BOOT}, False, "exactly one of subscribe"),
        ({**BOOT, "subscribe": "a", "assign": '{"a": [0]}'}, False, "exactly one"),
        ({**BOOT, "subscribe": "a", "startingOffsets": "latest"}, False, "not allowed"),
        ({**BOOT, "subscribe": "a", "endingOffsets": "latest"}, True, "batch queries"),
        ({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, ">= 1"),
        ({**BOOT, "subscribe": "a", "failOnDataLoss": "maybe"}, True, "true or false"),
        ({**BOOT, "assign": "[1]"}, True, "JSON object"),
        ({**BOOT, "subscribePattern": "("}, True, "subscribePattern"),
    ],
)
def test_bad_source_options_are_named(options, streaming, message):
    with pytest.raises(OptionError, match=message):
        SourceOptions.parse(options, streaming)


def test_isolation_level_option_and_its_spark_alias():
    parse = SourceOptions.parse
    assert parse({**BOOT, "subscribe": "a"}, False).isolation_level == "read_uncommitted"
    assert (
        parse(
            {**BOOT, "subscribe": "a", "isolationLevel": "READ_COMMITTED"}, False
        ).isolation_level
        == "read_committed"
    )
    spark_style = {**BOOT, "subscribe": "a", "kafka.isolation.level": "read_committed"}
    assert parse(spark_style, True).isolation_level == "read_committed"
    with pytest.raises(OptionError, match="isolationLevel: expected read_uncommitted or"):
        parse({**BOOT, "subscribe": "a", "isolationLevel": "committed"}, False)
    with pytest.raises(OptionError, match="disagree"):
        parse({**spark_style, "isolationLevel": "read_uncommitted"}, False)


def test_exactly_once_options():
    opts = SinkOptions.parse({**BOOT, "topic": "t"})
    assert (opts.exactly_once, opts.transactional_id_prefix) == (True, "pluglog-spark")
    opts = SinkOptions.parse({**BOOT, "exactlyOnce": "false", "transactionalIdPrefix": "etl.a"})
    assert (opts.exactly_once, opts.transactional_id_prefix) == (False, "etl.a")
    with pytest.raises(OptionError, match="exactlyOnce: expected true or false, got 'yes'"):
        SinkOptions.parse({**BOOT, "exactlyOnce": "yes"})
    with pytest.raises(OptionError, match="transactionalIdPrefix: .*got 'a b'"):
        SinkOptions.parse({**BOOT, "transactionalIdPrefix": "a b"})
    with pytest.raises(OptionError, match="kafka.transactional.id: the writer derives one"):
        SinkOptions.parse({**BOOT, "kafka.transactional.id": "mine"})


def test_sink_options_default_commit_log_under_checkpoint():
    opts = SinkOptions.parse({**BOOT, "checkpointLocation": "/tmp/ck/", "topic": "t"})
    assert opts.commit_log == "/tmp/ck/pluglog-commits"
    assert SinkOptions.parse({**BOOT, "commitLog": "/x"}).commit_log == "/x"


def test_offsets_json_round_trip():
    obj = {"t": {"0": 5, "1": 7}, "u": {"3": 0}}
    assert offsets.to_json(offsets.from_json(obj)) == obj
    assert offsets.from_json(json.loads(json.dumps(obj)))[("t", 1)] == 7
    assert offsets.from_json(None) == {}


def test_rate_limit_shares_budget_by_backlog():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 90}
    latest = {("t", 0): 1000, ("t", 1): 500, ("t", 2): 100}
    end = offsets.rate_limit(start, latest, 151)
    assert end == {("t", 0): 100, ("t", 1): 50, ("t", 2): 91}
    assert offsets.rate_limit(start, latest, 10**6) == latest
    # A tiny share still admits one record, so every partition drains.
    assert offsets.rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1}, 10) == {
        ("t", 0): 9,
        ("t", 1): 1,
    }


def test_split_ranges_for_min_partitions():
    ranges = [offsets.OffsetRange("t", 0, 0, 300), offsets.OffsetRange("t", 1, 0, 100)]
    assert offsets.split_ranges(ranges, None) == ranges
    assert offsets.split_ranges(ranges, 2) == ranges
    split = offsets.split_ranges(ranges, 4)
    assert [(r.partition, r.start, r.end) for r in split] == [
        (0, 0, 100),
        (0, 100, 200),
        (0, 200, 300),
        (1, 0, 100),
    ]
    assert offsets.split_ranges([offsets.OffsetRange("t", 0, 5, 5)], 3) == []


def test_sink_plugin_is_registered_and_validates_settings(tmp_path):
    registry = Registry(make_plugin_manager())
    config = BrokerConfig().replace(data_dir=str(tmp_path), advertised_host="h", advertised_port=1)
    sink = registry.build("sink", "spark", config, Clock())
    assert isinstance(sink, SparkSink) and verifyObject(ISink, sink)
    argv, env = sink_command(config, "s1", {"topics": "a,b", "trigger.interval": "2"})
    assert argv[1:3] == ["-m", "pluglog_spark.sink_runner"]
    assert argv[argv.index("--bootstrap") + 1] == "h:1"
    assert argv[argv.index("--path") + 1] == str(tmp_path / "spark-sink" / "s1" / "table")
    assert env["SPARK_LOCAL_IP"] and env["PYSPARK_PYTHON"]
    for settings, message in [
        ({}, "topics"),
        ({"topics": "a", "format": "csv"}, "format"),
        ({"topics": "a", "trigger.interval": "soon"}, "trigger.interval"),
        ({"topics": "a", "colour": "red"}, "colour"),
    ]:
        with pytest.raises(ConfigError, match=message):
            sink_command(config, "s1", settings)


class FakeProcess:
    def __init__(self, pid):
        self.pid = pid
        self.signals = []

    def signalProcess(self, signum):
        self.signals.append(signum)


class ProcessClock(Clock):
    """task.Clock plus a spawnProcess that records children."""

    def __init__(self):
        super().__init__()
        self.spawned = []

    def spawnProcess(self, proto, executable, args, env=None, **kwargs):
        transport = FakeProcess(1000 + len(self.spawned))
        self.spawned.append((proto, transport, args))
        proto.makeConnection(transport)
        return transport


def end(proto, code=1):
    proto.processEnded(Failure(error.ProcessTerminated(exitCode=code)))


def test_supervisor_restarts_with_backoff_and_stops_cleanly():
    clock = ProcessClock()
    service = SupervisedProcess(
        clock,
        "sink x",
        ["python", "-m", "x"],
        {},
        min_delay=1,
        max_delay=4,
        stop_timeout=5,
        stable_after=60,
    )
    service.startService()
    assert len(clock.spawned) == 1 and service.pid == 1000

    proto = clock.spawned[-1][0]
    proto.childDataReceived(1, b'{"batchId": 3, "numInputRows": 10, "endOffsets": {"t"')
    proto.childDataReceived(1, b': {"0": 10}}}\nplain line\n')
    assert service.last_progress == {
        "batchId": 3,
        "numInputRows": 10,
        "endOffsets": {"t": {"0": 10}},
    }

    delays = []
    for _ in range(4):  # quick deaths: 1, 2, 4, 4 seconds
        end(clock.spawned[-1][0])
        delays.append(service.restart_call.getTime() - clock.seconds())
        clock.advance(delays[-1])
    assert delays == [1, 2, 4, 4] and len(clock.spawned) == 5

    clock.advance(61)  # a long run resets the backoff
    end(clock.spawned[-1][0])
    assert service.restart_call.getTime() - clock.seconds() == 1
    clock.advance(1)

    proto, transport, _args = clock.spawned[-1]
    stopped = service.stopService()
    assert transport.signals == [signal.SIGTERM] and not stopped.called
    clock.advance(5)
    assert transport.signals == [signal.SIGTERM, signal.SIGKILL]
    end(proto, code=None)
    assert stopped.called and len(clock.spawned) == 6
    clock.advance(100)
    assert len(clock.spawned) == 6  # no restart once stopped


def test_remote_tier_options_use_the_brokers_key_names():
    opts = SourceOptions.parse(
        {
            **BOOT,
            "subscribe": "a",
            "rsm.config.s3.bucket": "tier",
            "rsm.config.s3.endpoint.url": "http://s3:9000",
            "rsm.config.s3.prefix": "c/",
        },
        streaming=False,
    )
    assert opts.remote == {"bucket": "tier", "endpoint_url": "http://s3:9000", "prefix": "c/"}
    assert SourceOptions.parse({**BOOT, "subscribe": "a"}, False).remote is None
    with pytest.raises(OptionError, match="rsm.config.s3.bucket and rsm.config.filesystem.root"):
        SourceOptions.parse(
            {
                **BOOT,
                "subscribe": "a",
                "rsm.config.s3.bucket": "b",
                "rsm.config.filesystem.root": "/x",
            },
            False,
        )
    with pytest.raises(OptionError, match="rsm.config.s3.secret: unknown"):
        SourceOptions.parse({**BOOT, "subscribe": "a", "rsm.config.s3.secret": "x"}, False)


def test_remote_segment_split_decodes_only_its_range(tmp_path):
    """An executor's remote split: the segment object under the filesystem
    provider's root, decoded with pluglog's codec; offsets outside the split
    and control batches are left out."""
    from pluglog_spark.remote import RemotePartition, read_segment

    from pluglog.protocol.records import Record, build_batch
    from pluglog.storage.remote.metadata import RemoteSegment

    data = build_batch(
        [
            Record(b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)] if i % 2 else (), 1000 + i)
            for i in range(5)
        ],
        base_offset=10,
        base_timestamp=1000,
    )
    data += build_batch(
        [Record(b"\x00\x00\x00\x00", b"marker", (), 2000)], base_offset=15, is_control=True
    )
    data += build_batch([Record(None, b"v16", (), 3000)], base_offset=16, base_timestamp=3000)
    segment = RemoteSegment.new("t", 0, 10, 16, 3000, len(data), [(0, 10)])
    path = tmp_path / segment.object_key("log")
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    split = RemotePartition("t", 0, 11, 17, segment.to_json())
    rows = [r for batch in read_segment({"root": str(tmp_path)}, split) for r in batch.to_pylist()]
    assert [r["offset"] for r in rows] == [11, 12, 13, 14, 16]
    assert rows[0]["key"] == b"k1" and rows[0]["headers"] == [{"key": "h", "value": b"1"}]
    assert rows[1]["headers"] is None
    assert rows[-1]["key"] is None and rows[-1]["value"] == b"v16"
    assert {r["topic"] for r in rows} == {"t"} and {r["timestampType"] for r in rows} == {0}


class _MetadataCluster:
    """The two ClusterView calls the planner's remote split makes, answered
    from fixed ``__remote_log_metadata`` records (a driver-side stub: the
    end-to-end read is tests/test_spark_remote.py, on a real broker)."""

    def __init__(self, segments, local_start):
        self.records = [Record(s.key_bytes(), s.to_json()) for s in segments]
        self.local_start = local_start

    def earliest_local(self, tps):
        return dict.fromkeys(tps, self.local_start)

    def partitions(self, topics):
        return {topics[0]: [0]}

    def read_partition(self, topic, partition):
        return self.records


def test_remote_split_reads_each_offset_once_and_reports_gaps():
    from pluglog_spark import executor, remote
    from pluglog_spark.offsets import OffsetRange

    from pluglog.storage.remote.metadata import COPY_SEGMENT_FINISHED, RemoteSegment

    def seg(base, end, state=COPY_SEGMENT_FINISHED):
        return RemoteSegment.new("t", 0, base, end, 0, 1, [(0, base)]).with_state(state, 0, 0)

    segments = [seg(0, 99), seg(50, 149), seg(150, 199, "COPY_SEGMENT_STARTED"), seg(200, 299)]
    cluster = _MetadataCluster(segments, 300)
    ranges = [OffsetRange("t", 0, 0, 350)]
    splits, local = remote.split(cluster, ranges, False, fail_on_data_loss=False)
    assert [(s.start, s.end) for s in splits] == [(0, 100), (100, 150), (200, 300)]
    assert [(r.start, r.end) for r in local] == [(300, 350)]
    with pytest.raises(executor.DataLossError, match=r"offsets \[150, 200\)"):
        remote.split(cluster, ranges, False)
    with pytest.raises(OptionError, match="read_uncommitted only"):
        remote.split(cluster, ranges, True)
    # Nothing below the local start: no metadata read, ranges unchanged.
    assert remote.split(_MetadataCluster([], 0), ranges, True) == ([], ranges)


def test_a_bare_fatal_error_is_told_apart_from_its_cause():
    # librdkafka's produce() after a fatal error raises a bare _FATAL; the
    # writer then raises the abort's error instead, which names the cause.
    assert _only_fatal(ck, ck.KafkaException(ck.KafkaError(ck.KafkaError._FATAL)))
    assert not _only_fatal(ck, ck.KafkaException(ck.KafkaError(ck.KafkaError._FENCED)))
    assert not _only_fatal(ck, RuntimeError("not librdkafka's"))
