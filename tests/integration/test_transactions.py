"""Transactions against the broker process with confluent-kafka (librdkafka).

Commit and abort visibility at read_committed and read_uncommitted, zombie
fencing, the transaction timeout, offsets committed inside a transaction,
a restart in the middle of a transaction, and the coordinator's error codes
for bad requests.
"""

import time

import confluent_kafka
import pytest

from pluglog import errors
from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from pluglog.protocol.records import Record, build_batch
from tests.broker_process import BrokerProcess
from tests.integration.clients import create_topic

pytestmark = pytest.mark.integration

FAST_TIMEOUTS = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
}


@pytest.fixture
def txn_broker(tmp_path):
    proc = BrokerProcess(tmp_path / "data", settings=FAST_TIMEOUTS).start()
    yield proc
    proc.stop()


def producer(bootstrap, txn_id, **extra):
    config = {
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "transaction.timeout.ms": 60000,
        "linger.ms": 5,
    }
    config.update(extra)
    p = confluent_kafka.Producer(config)
    p.init_transactions(30)
    return p


def read_all(bootstrap, topic, partitions, isolation, settle=1.5, timeout=30):
    """Every value in ``topic`` as a consumer at ``isolation`` sees it once
    the stream has been quiet for ``settle`` seconds."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{topic}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
        }
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(partitions)
        ]
    )
    out = []
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline and time.monotonic() - quiet_since < settle:
            for msg in consumer.consume(1000, 0.3):
                if msg.error():
                    raise AssertionError(f"consume error: {msg.error()}")
                out.append(msg.value().decode())
                quiet_since = time.monotonic()
    finally:
        consumer.close()
    return out


def test_commit_and_abort_visibility(txn_broker):
    bs = txn_broker.bootstrap
    create_topic(bs, "vis", partitions=3)
    p = producer(bs, "vis-1")
    p.begin_transaction()
    for i in range(30):
        p.produce("vis", value=f"c1-{i}", partition=i % 3)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(30):
        p.produce("vis", value=f"a-{i}", partition=i % 3)
    p.flush(30)  # the aborted records reach the log before the abort
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(30):
        p.produce("vis", value=f"c2-{i}", partition=i % 3)
    p.commit_transaction(30)
    committed = sorted(f"c1-{i}" for i in range(30)) + sorted(f"c2-{i}" for i in range(30))
    assert sorted(read_all(bs, "vis", 3, "read_committed")) == sorted(committed)
    everything = read_all(bs, "vis", 3, "read_uncommitted")
    assert sorted(everything) == sorted(committed + [f"a-{i}" for i in range(30)])


def test_open_transaction_holds_read_committed_back(txn_broker):
    bs = txn_broker.bootstrap
    create_topic(bs, "lso", partitions=1)
    p = producer(bs, "lso-1")
    p.begin_transaction()
    p.produce("lso", value="open")
    p.flush(30)
    plain = confluent_kafka.Producer({"bootstrap.servers": bs})
    plain.produce("lso", value="after")
    plain.flush(30)
    # The open transaction's first offset is the LSO: nothing after it yet.
    assert read_all(bs, "lso", 1, "read_committed", settle=1.0) == []
    assert sorted(read_all(bs, "lso", 1, "read_uncommitted")) == ["after", "open"]
    p.commit_transaction(30)
    assert read_all(bs, "lso", 1, "read_committed") == ["open", "after"]


def test_second_producer_fences_the_first(txn_broker):
    bs = txn_broker.bootstrap
    create_topic(bs, "zombie", partitions=1)
    first = producer(bs, "zombie-1")
    first.begin_transaction()
    first.produce("zombie", value="zombie-early")
    first.flush(30)
    second = producer(bs, "zombie-1")  # fences: aborts the first's transaction
    second.begin_transaction()
    second.produce("zombie", value="new")
    second.commit_transaction(30)
    with pytest.raises(confluent_kafka.KafkaException) as caught:
        first.produce("zombie", value="zombie-late")
        first.commit_transaction(10)
    err = caught.value.args[0]
    assert err.fatal() or err.code() in (
        confluent_kafka.KafkaError._FENCED,
        confluent_kafka.KafkaError.PRODUCER_FENCED,
        confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH,
    ), err
    assert read_all(bs, "zombie", 1, "read_committed") == ["new"]


def test_transaction_left_open_is_aborted_after_its_timeout(txn_broker):
    bs = txn_broker.bootstrap
    create_topic(bs, "timeout", partitions=1)
    p = producer(bs, "timeout-1", **{"transaction.timeout.ms": 2000})
    p.begin_transaction()
    p.produce("timeout", value="abandoned")
    p.flush(30)
    plain = confluent_kafka.Producer({"bootstrap.servers": bs})
    plain.produce("timeout", value="later")
    plain.flush(30)
    started = time.monotonic()
    seen = []
    while time.monotonic() - started < 15 and not seen:
        seen = read_all(bs, "timeout", 1, "read_committed", settle=0.5, timeout=3)
    # The coordinator aborted it: the LSO moved past it, its record is hidden.
    assert seen == ["later"]
    assert time.monotonic() - started < 10


def test_offsets_sent_to_a_transaction_count_only_when_it_commits(txn_broker):
    bs = txn_broker.bootstrap
    create_topic(bs, "src", partitions=1)
    create_topic(bs, "dst", partitions=1)
    plain = confluent_kafka.Producer({"bootstrap.servers": bs})
    for i in range(10):
        plain.produce("src", value=f"in-{i}")
    plain.flush(30)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "ctp",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe(["src"])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        got.extend(m for m in consumer.consume(10, 0.5) if not m.error())
    assert len(got) == 10
    p = producer(bs, "ctp-1")
    # Aborted: the output and the offsets are discarded.
    p.begin_transaction()
    for m in got[:5]:
        p.produce("dst", value=m.value())
    p.send_offsets_to_transaction(
        [confluent_kafka.TopicPartition("src", 0, got[4].offset() + 1)],
        consumer.consumer_group_metadata(),
    )
    p.flush(30)
    p.abort_transaction(30)
    committed = consumer.committed([confluent_kafka.TopicPartition("src", 0)], 10)
    assert committed[0].offset < 0
    # Committed: both become visible together.
    p.begin_transaction()
    for m in got:
        p.produce("dst", value=m.value())
    p.send_offsets_to_transaction(
        [confluent_kafka.TopicPartition("src", 0, got[-1].offset() + 1)],
        consumer.consumer_group_metadata(),
    )
    p.commit_transaction(30)
    committed = consumer.committed([confluent_kafka.TopicPartition("src", 0)], 10)
    assert committed[0].offset == 10
    consumer.close()
    assert read_all(bs, "dst", 1, "read_committed") == [f"in-{i}" for i in range(10)]


def test_restart_keeps_committed_and_ends_the_open_transaction(tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data, settings=FAST_TIMEOUTS).start()
    bs = broker.bootstrap
    create_topic(bs, "rs", partitions=2)
    p = producer(bs, "rs-1", **{"transaction.timeout.ms": 3000})
    p.begin_transaction()
    for i in range(20):
        p.produce("rs", value=f"c-{i}", partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(20):
        p.produce("rs", value=f"open-{i}", partition=i % 2)
    p.flush(30)
    broker.kill()  # SIGKILL with a transaction open
    del p
    broker = BrokerProcess(data, port=broker.port, settings=FAST_TIMEOUTS).start()
    try:
        deadline = time.monotonic() + 20
        seen = []
        while time.monotonic() < deadline:
            seen = read_all(broker.bootstrap, "rs", 2, "read_committed", settle=0.5, timeout=3)
            if len(seen) >= 20:
                break
        # The new coordinator loaded the open transaction and aborted it on
        # its timeout; what was committed before the kill is all there.
        assert sorted(seen) == sorted(f"c-{i}" for i in range(20))
        again = producer(broker.bootstrap, "rs-1")
        again.begin_transaction()
        again.produce("rs", value="after-restart", partition=0)
        again.commit_transaction(30)
        final = read_all(broker.bootstrap, "rs", 2, "read_committed")
        assert sorted(final) == sorted([f"c-{i}" for i in range(20)] + ["after-restart"])
    finally:
        broker.stop()


def test_bad_transaction_requests_get_kafka_error_codes(txn_broker):
    bs = txn_broker.bootstrap
    create_topic(bs, "bad", partitions=1)
    host, port = bs.split(":")
    with BlockingClient(host, int(port)) as client:
        coordinator = client.request(codec.FIND_COORDINATOR, 1, {"key": "bad-1", "key_type": 1})
        assert coordinator["error_code"] == errors.NONE
        too_long = client.request(
            codec.INIT_PRODUCER_ID,
            1,
            {"transactional_id": "bad-1", "transaction_timeout_ms": 10**9},
        )
        assert too_long["error_code"] == errors.INVALID_TRANSACTION_TIMEOUT
        unknown = client.request(
            codec.END_TXN,
            1,
            {
                "transactional_id": "nobody",
                "producer_id": 1,
                "producer_epoch": 0,
                "committed": True,
            },
        )
        assert unknown["error_code"] in (
            errors.INVALID_PRODUCER_ID_MAPPING,
            errors.NOT_COORDINATOR,
        )
        init = client.request(
            codec.INIT_PRODUCER_ID,
            1,
            {"transactional_id": "bad-1", "transaction_timeout_ms": 60000},
        )
        pid, epoch = init["producer_id"], init["producer_epoch"]
        stale = client.request(
            codec.ADD_PARTITIONS_TO_TXN,
            1,
            {
                "v3_and_below_transactional_id": "bad-1",
                "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch - 1,
                "v3_and_below_topics": [{"name": "bad", "partitions": [0]}],
            },
        )
        code = stale["results_by_topic_v3_and_below"][0]["results_by_partition"][0]
        assert code["partition_error_code"] == errors.INVALID_PRODUCER_EPOCH  # v1: not FENCED
        empty_end = client.request(
            codec.END_TXN,
            1,
            {
                "transactional_id": "bad-1",
                "producer_id": pid,
                "producer_epoch": epoch,
                "committed": True,
            },
        )
        assert empty_end["error_code"] == errors.INVALID_TXN_STATE


def test_compaction_drops_aborted_records_and_keeps_the_committed_value(tmp_path):
    settings = dict(FAST_TIMEOUTS, **{"log.cleaner.backoff.ms": "300"})
    broker = BrokerProcess(tmp_path / "data", settings=settings).start()
    try:
        bs = broker.bootstrap
        create_topic(
            bs,
            "ckeys",
            partitions=1,
            config={
                "cleanup.policy": "compact",
                "segment.ms": "1500",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )
        p = producer(bs, "ckeys-1")
        p.begin_transaction()
        for i in range(50):
            p.produce("ckeys", key=f"k{i}", value="committed")
        p.commit_transaction(30)
        p.begin_transaction()
        for i in range(50):
            p.produce("ckeys", key=f"k{i}", value="aborted")
        p.flush(30)
        p.abort_transaction(30)
        time.sleep(1.7)  # segment.ms: the next append rolls the segment
        p.begin_transaction()
        p.produce("ckeys", key="end", value="committed")
        p.commit_transaction(30)

        def uncommitted():
            return sorted(read_all(bs, "ckeys", 1, "read_uncommitted", settle=0.5))

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "aborted" in uncommitted():
            time.sleep(0.5)
        # The cleaner removed the aborted records instead of letting them
        # shadow the committed value of each key.
        assert uncommitted() == ["committed"] * 51
        assert sorted(read_all(bs, "ckeys", 1, "read_committed")) == ["committed"] * 51
    finally:
        broker.stop()


def test_transactional_produce_outside_a_transaction_and_describe_producers(txn_broker):
    bs = txn_broker.bootstrap
    create_topic(bs, "outside", partitions=1)
    host, port = bs.split(":")
    with BlockingClient(host, int(port)) as client:
        assert (
            client.request(codec.FIND_COORDINATOR, 1, {"key": "out-1", "key_type": 1})[
                "error_code"
            ]
            == errors.NONE
        )
        deadline = time.monotonic() + 20
        while True:  # the coordinator loads __transaction_state first
            init = client.request(
                codec.INIT_PRODUCER_ID,
                1,
                {"transactional_id": "out-1", "transaction_timeout_ms": 60000},
            )
            if init["error_code"] == errors.NONE or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        pid, epoch = init["producer_id"], init["producer_epoch"]

        def produce(txn_id, seq):
            batch = build_batch(
                [Record(None, b"v", (), 0)],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
                is_transactional=True,
            )
            topic = {"name": "outside", "partition_data": [{"index": 0, "records": batch}]}
            body = {"transactional_id": txn_id, "acks": -1, "timeout_ms": 5000}
            out = client.request(codec.PRODUCE, 7, dict(body, topic_data=[topic]))
            return out["responses"][0]["partition_responses"][0]["error_code"]

        # The partition was never added to a transaction of this id.
        assert produce("out-1", 0) == errors.INVALID_TXN_STATE
        added = client.request(
            codec.ADD_PARTITIONS_TO_TXN,
            1,
            {
                "v3_and_below_transactional_id": "out-1",
                "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": "outside", "partitions": [0]}],
            },
        )
        assert (
            added["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
                "partition_error_code"
            ]
            == errors.NONE
        )
        assert produce("out-1", 0) == errors.NONE
        producers = client.request(
            codec.DESCRIBE_PRODUCERS,
            0,
            {"topics": [{"name": "outside", "partition_indexes": [0]}]},
        )
        (state,) = producers["topics"][0]["partitions"][0]["active_producers"]
        assert (state["producer_id"], state["producer_epoch"], state["last_sequence"]) == (
            pid,
            epoch,
            0,
        )
        assert state["current_txn_start_offset"] == 0  # the open transaction's first offset
