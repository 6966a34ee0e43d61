"""Topic ids (KIP-516) through the real codec, handlers and Broker.

Each call encodes a request at a version pluglog advertises, decodes it as
the server does, runs the handler and round-trips the answer. The broker is
the real one, with segment storage, so ``partition.metadata`` files and
restarts are the ones a user gets.
"""

import json
import os
import uuid

import pytest
from twisted.internet.task import Clock

from pluglog import errors, topicids
from pluglog import protocol as codec
from pluglog.broker.topic_ids import TopicIds
from pluglog.coordination.local import METADATA_FILE
from pluglog.coordination.state import TopicMetadata
from pluglog.protocol.records import Record, build_batch
from pluglog.server.handlers import RequestContext
from pluglog.server.handlers.table import HANDLERS
from tests.unit.test_group_coordinator import make_broker, result_of

pytestmark = pytest.mark.unit


def call(broker, key, version, body):
    frame = codec.encode_request(key, version, 7, "ids", body)[4:]
    header = codec.parse_request_header(frame)
    request = codec.decode_request(header, memoryview(frame))
    out = HANDLERS[key](RequestContext(broker, header, "127.0.0.1:5555"), request)
    if not isinstance(out, dict):
        out = result_of(out)
    parts = codec.encode_response(key, version, 7, out)
    # Record data may be a file range (sendfile); read it as the socket would.
    payload = b"".join(p.read() if hasattr(p, "read") else bytes(p) for p in parts)
    correlation_id, decoded = codec.decode_response(key, version, payload)
    assert correlation_id == 7
    return decoded


def start(path):
    clock = Clock()
    clock.advance(1000)
    return make_broker(path, clock, storage="segments")


@pytest.fixture
def broker(tmp_path):
    b = start(tmp_path / "data")
    result_of(b.create_topic("t", 2, 1))
    yield b
    result_of(b.stop())


def topic_id(broker, name):
    return uuid.UUID(broker.coordinator.topics()[name].topic_id)


def partition_dir(broker, name, index):
    return broker.partitions[(name, index)].log.directory


def produce(broker, name, index, count):
    part = broker.partition(name, index)
    part.append(build_batch([Record(value=b"v%d" % i) for i in range(count)]), broker.now_ms())


def metadata(broker, version, topics):
    body = {"topics": topics, "allow_auto_topic_creation": False}
    body["include_topic_authorized_operations"] = False
    return call(broker, codec.METADATA, version, body)["topics"]


# -- ids, files, restarts ---------------------------------------------------------


def test_kafka_spelling_and_reserved_ids():
    hex_id = "0123456789abcdef0123456789abcdef"
    assert topicids.to_base64(hex_id) == "ASNFZ4mrze8BI0VniavN7w"
    assert topicids.from_base64("ASNFZ4mrze8BI0VniavN7w") == hex_id
    with pytest.raises(ValueError, match="'abc'"):
        topicids.from_base64("abc")
    for _ in range(200):
        fresh = topicids.new_topic_id()
        assert int(fresh, 16) > 1 and not topicids.to_base64(fresh).startswith("-")


def test_partition_metadata_is_kafkas_file_with_the_topics_id(broker):
    tid = topic_id(broker, "t")
    for index in (0, 1):
        with open(os.path.join(partition_dir(broker, "t", index), "partition.metadata")) as f:
            assert f.read() == f"version: 0\ntopic_id: {topicids.to_base64(tid.hex)}"
    # Internal topics get ids too.
    result_of(broker.create_topic("__consumer_offsets", 1, 1, internal=True))
    assert len(broker.coordinator.topics()["__consumer_offsets"].topic_id) == 32
    assert os.path.exists(
        os.path.join(partition_dir(broker, "__consumer_offsets", 0), "partition.metadata")
    )


def test_restart_keeps_ids_and_a_data_dir_from_before_ids_gets_them(tmp_path):
    data = tmp_path / "data"
    b = start(data)
    result_of(b.create_topic("old", 2, 1))
    produce(b, "old", 0, 3)
    first = topic_id(b, "old")
    result_of(b.stop())
    b = start(data)
    assert topic_id(b, "old") == first
    result_of(b.stop())
    # A data dir as pluglog wrote it before topic ids: no id in the metadata
    # file and no partition.metadata in the partition dirs.
    path = data / METADATA_FILE
    state = json.loads(path.read_text())
    state["topics"]["old"].pop("topic_id")
    path.write_text(json.dumps(state))
    for index in (0, 1):
        os.unlink(data / f"old-{index}" / "partition.metadata")
    b = start(data)
    given = topic_id(b, "old")
    assert given.int and given != first
    assert topicids.read_partition_metadata(str(data / "old-0")) == given.hex
    assert b.partition("old", 0).log.log_end_offset == 3  # the data stayed
    result_of(b.stop())
    b = start(data)
    assert topic_id(b, "old") == given
    result_of(b.stop())


def test_a_partition_dir_of_an_earlier_topic_is_not_served_as_the_new_one(tmp_path):
    data = tmp_path / "data"
    b = start(data)
    result_of(b.create_topic("re", 2, 1))
    produce(b, "re", 0, 5)
    produce(b, "re", 1, 5)
    result_of(b.stop())
    # Partition 0's dir says it belongs to another topic called "re" (deleted
    # and created again while this broker was down).
    topicids.write_partition_metadata(str(data / "re-0"), topicids.new_topic_id())
    b = start(data)
    assert b.partition("re", 0).log.log_end_offset == 0
    assert b.partition("re", 1).log.log_end_offset == 5
    tid = topic_id(b, "re")
    assert topicids.read_partition_metadata(partition_dir(b, "re", 0)) == tid.hex
    result_of(b.stop())


def test_topic_id_index_follows_create_delete_and_adoption():
    index = TopicIds()
    index.update(TopicMetadata("a", 1, topic_id="11" * 16))
    assert index.name_of(uuid.UUID("11" * 16)) == "a" and index.id_of("a") == "11" * 16
    index.update(TopicMetadata("a", 1, topic_id="22" * 16))
    assert index.name_of("11" * 16) is None and index.name_of("22" * 16) == "a"
    index.forget("a")
    assert index.name_of("22" * 16) is None and index.id_of("a") == ""
    index.update(TopicMetadata("b", 1))  # no id yet (an upgraded cluster)
    assert index.id_of("b") == ""


# -- Metadata, CreateTopics, DeleteTopics -------------------------------------------


def test_metadata_answers_ids_from_v10_and_by_id_from_v12(broker):
    tid = topic_id(broker, "t")
    (entry,) = metadata(broker, 12, [{"name": "t", "topic_id": uuid.UUID(int=0)}])
    assert (entry["error_code"], entry["name"], entry["topic_id"]) == (0, "t", tid)
    (entry,) = metadata(broker, 10, [{"name": "t"}])
    assert entry["topic_id"] == tid
    assert metadata(broker, 9, [{"name": "t"}])[0]["topic_id"] == uuid.UUID(int=0)  # not sent
    (entry,) = metadata(broker, 12, [{"name": None, "topic_id": tid}])
    assert (entry["error_code"], entry["name"], entry["topic_id"]) == (0, "t", tid)
    assert len(entry["partitions"]) == 2
    unknown = uuid.uuid4()
    (entry,) = metadata(broker, 13, [{"name": None, "topic_id": unknown}])
    assert (entry["error_code"], entry["name"]) == (errors.UNKNOWN_TOPIC_ID, None)
    assert entry["topic_id"] == unknown
    # v10-11 may not name a topic by id (Kafka: INVALID_REQUEST).
    (entry,) = metadata(broker, 11, [{"name": None, "topic_id": tid}])
    assert entry["error_code"] == errors.INVALID_REQUEST
    # All topics: every one with its id.
    every = metadata(broker, 12, None)
    assert {e["name"]: e["topic_id"] for e in every} == {"t": tid}


def test_create_topics_v7_answers_the_id_and_v5_the_configs(broker):
    body = {
        "topics": [
            {
                "name": "c",
                "num_partitions": 3,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": "retention.ms", "value": "1000"}],
            }
        ],
        "timeout_ms": 1000,
        "validate_only": False,
    }
    (created,) = call(broker, codec.CREATE_TOPICS, 7, body)["topics"]
    assert created["error_code"] == 0 and created["topic_id"] == topic_id(broker, "c")
    assert created["num_partitions"] == 3 and created["replication_factor"] == 1
    configs = {c["name"]: c["value"] for c in created["configs"]}
    assert configs["retention.ms"] == "1000"
    body["topics"][0]["name"] = "c"
    (again,) = call(broker, codec.CREATE_TOPICS, 7, body)["topics"]
    assert again["error_code"] == errors.TOPIC_ALREADY_EXISTS
    assert again["topic_id"] == uuid.UUID(int=0)


def test_delete_topics_v6_by_id_and_by_name(broker):
    result_of(broker.create_topic("d", 1, 1))
    tid = topic_id(broker, "d")
    unknown = uuid.uuid4()
    body = {
        "topics": [
            {"name": None, "topic_id": tid},
            {"name": None, "topic_id": unknown},
        ],
        "timeout_ms": 1000,
    }
    gone, missing = call(broker, codec.DELETE_TOPICS, 6, body)["responses"]
    assert (gone["name"], gone["topic_id"], gone["error_code"]) == ("d", tid, 0)
    assert "d" not in broker.coordinator.topics()
    assert (missing["name"], missing["error_code"]) == (None, errors.UNKNOWN_TOPIC_ID)
    assert missing["error_message"] == f"no topic has the id {topicids.to_base64(unknown.hex)}"
    tid = topic_id(broker, "t")
    body = {"topics": [{"name": "t", "topic_id": uuid.UUID(int=0)}], "timeout_ms": 1000}
    (by_name,) = call(broker, codec.DELETE_TOPICS, 6, body)["responses"]
    assert (by_name["name"], by_name["topic_id"], by_name["error_code"]) == ("t", tid, 0)


# -- Fetch ----------------------------------------------------------------------------


def fetch_body(topics, session_id=0, epoch=-1, forgotten=(), version=13):
    key = "topic_id" if version >= 13 else "topic"
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                key: name,
                "partitions": [
                    {
                        "partition": index,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": last_epoch,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                    for index, offset, last_epoch in parts
                ],
            }
            for name, parts in topics
        ],
        "forgotten_topics_data": [{key: n, "partitions": list(p)} for n, p in forgotten],
        "rack_id": "",
    }


def fetch(broker, version, body):
    return call(broker, codec.FETCH, version, body)


def test_fetch_v13_reads_by_id_and_answers_unknown_ids(broker):
    produce(broker, "t", 0, 2)
    tid = topic_id(broker, "t")
    unknown = uuid.uuid4()
    out = fetch(broker, 13, fetch_body([(tid, [(0, 0, -1)]), (unknown, [(0, 0, -1), (1, 0, -1)])]))
    known, missing = out["responses"]
    assert known["topic_id"] == tid and known["partitions"][0]["error_code"] == 0
    assert known["partitions"][0]["records"]
    assert missing["topic_id"] == unknown
    assert [p["error_code"] for p in missing["partitions"]] == [errors.UNKNOWN_TOPIC_ID] * 2


@pytest.mark.parametrize("version", [13, 16, 17])
def test_fetch_sessions_by_id_do_not_read_a_recreated_topic(broker, version):
    produce(broker, "t", 0, 2)
    tid = topic_id(broker, "t")
    full = fetch(broker, version, fetch_body([(tid, [(0, 0, -1), (1, 0, -1)])], epoch=0))
    sid = full["session_id"]
    assert sid and full["responses"][0]["partitions"][0]["records"]
    # Deleted and created again under the same name: another topic.
    result_of(broker.delete_topic("t"))
    result_of(broker.create_topic("t", 2, 1))
    produce(broker, "t", 0, 4)
    assert topic_id(broker, "t") != tid
    out = fetch(broker, version, fetch_body([], session_id=sid, epoch=1))
    (topic,) = out["responses"]
    assert topic["topic_id"] == tid
    assert {p["error_code"] for p in topic["partitions"]} == {errors.UNKNOWN_TOPIC_ID}
    assert not any(p["records"] for p in topic["partitions"])
    # The client forgets the old id's partitions and adds the new id's.
    new = topic_id(broker, "t")
    body = fetch_body([(new, [(0, 0, -1)])], session_id=sid, epoch=2, forgotten=[(tid, (0, 1))])
    (topic,) = fetch(broker, version, body)["responses"]
    assert topic["topic_id"] == new and topic["partitions"][0]["records"]
    # A session opened by id may not continue by name.
    out = fetch(broker, 12, fetch_body([], session_id=sid, epoch=3, version=12))
    assert out["error_code"] == errors.FETCH_SESSION_TOPIC_ID_ERROR


def test_fetch_v12_answers_the_diverging_epoch_from_the_epoch_cache(broker):
    part = broker.partition("t", 0)
    produce(broker, "t", 0, 3)  # epoch 0: offsets 0-2
    # The leader moved to epoch 2 at offset 3 (epoch 1 never wrote).
    part.epochs.assign(2, 3)
    part.leader_epoch = 2
    produce(broker, "t", 0, 2)  # epoch 2: offsets 3-4

    def ask(offset, last_epoch):
        out = fetch(broker, 12, fetch_body([("t", [(0, offset, last_epoch)])], version=12))
        return out["responses"][0]["partitions"][0]

    # A fetcher that read epoch 1 up to offset 4 diverged: epoch 0 ended at 3.
    entry = ask(4, 1)
    assert entry["diverging_epoch"] == {"epoch": 0, "end_offset": 3}
    assert not entry["records"] and entry["error_code"] == 0
    # Epoch 0 up to offset 5 is past epoch 0's end (3): diverged too.
    assert ask(5, 0)["diverging_epoch"] == {"epoch": 0, "end_offset": 3}
    # Consistent positions read on.
    entry = ask(3, 0)
    assert entry["diverging_epoch"] is None and entry["records"]
    entry = ask(4, 2)
    assert entry["diverging_epoch"] is None and entry["records"]
    # No last fetched epoch (-1): no check.
    assert ask(4, -1)["diverging_epoch"] is None


def test_fetch_v12_names_the_current_leader_when_not_leading(broker):
    part = broker.partition("t", 1)
    part.leader_epoch = 4
    body = fetch_body([("t", [(1, 0, -1)])], version=12)
    body["topics"][0]["partitions"][0]["current_leader_epoch"] = 3
    entry = fetch(broker, 12, body)["responses"][0]["partitions"][0]
    assert entry["error_code"] == errors.FENCED_LEADER_EPOCH
    state = broker.coordinator.partition_state("t", 1)
    assert entry["current_leader"] == {
        "leader_id": state.leader,
        "leader_epoch": state.leader_epoch,
    }
    out = fetch(broker, 16, dict(body, topics=[]))
    assert out["node_endpoints"] is None  # nothing to point at


@pytest.mark.parametrize("version", [9, 10, 11, 12, 13])
def test_librdkafkas_all_topics_metadata_request_reads_as_sent(version):
    # librdkafka (through 2.16) leaves the reserved int32 0 as the topic
    # count of an all-topics request in flexible versions; Kafka reads past
    # it. The flags it sent must come out, and well-formed bodies are unchanged.
    body = {"topics": None, "allow_auto_topic_creation": True}
    body["include_topic_authorized_operations"] = True
    frame = codec.encode_request(codec.METADATA, version, 1, "rdkafka", body)[4:]
    header = codec.parse_request_header(frame)
    sent = codec.decode_request(header, memoryview(frame))
    assert sent["topics"] is None and sent["allow_auto_topic_creation"]
    quirk = frame[: header.body_offset] + b"\0\0\0" + frame[header.body_offset :]
    assert codec.decode_request(codec.parse_request_header(quirk), memoryview(quirk)) == sent
    with pytest.raises(ValueError, match="trailing bytes"):
        extra = frame + b"\0\0\0"
        codec.decode_request(codec.parse_request_header(extra), memoryview(extra))
