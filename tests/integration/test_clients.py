"""Unmodified Kafka clients against the real broker process.

Each client (kcat, confluent-kafka, kafka-python, aiokafka) creates a
3-partition topic and produces 10,000 records (keys, null keys and values,
headers) into it, a slice with every compression codec it supports; every
*other* client reads them back identical and in per-partition order.
"""

import pytest

from tests.broker_process import BrokerProcess
from tests.integration.clients import (
    CODECS,
    CONSUMERS,
    CREATORS,
    PRODUCERS,
    by_partition,
    make_records,
)

TOTAL = 10_000


@pytest.fixture(scope="module")
def matrix_broker(tmp_path_factory):
    # num.partitions=3: kcat has no admin API and creates its topic by auto-creation.
    proc = BrokerProcess(
        tmp_path_factory.mktemp("matrix") / "data", settings={"num.partitions": "3"}
    ).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def produced(matrix_broker):
    """A topic per client, created with its own admin API and filled by its producer
    with TOTAL records spread over all its codecs."""
    out = {}
    for client, produce in PRODUCERS.items():
        topic = f"matrix-{client}"
        CREATORS[client](matrix_broker.bootstrap, topic, partitions=3)
        codecs = CODECS[client]
        records = make_records(TOTAL, seed=0, kcat=client == "kcat")
        step = TOTAL // len(codecs)
        for i, codec_name in enumerate(codecs):
            chunk = records[i * step : TOTAL if i == len(codecs) - 1 else (i + 1) * step]
            produce(matrix_broker.bootstrap, topic, chunk, codec_name)
        out[client] = (topic, records)
    return out


@pytest.mark.parametrize(
    "producer,consumer",
    [(p, c) for p in PRODUCERS for c in CONSUMERS if p != c],
)
def test_cross_client(produced, matrix_broker, producer, consumer):
    topic, records = produced[producer]
    got = CONSUMERS[consumer](matrix_broker.bootstrap, topic, 3, len(records))
    assert len(got) == len(records)
    expected = by_partition(records)
    actual = by_partition(got)
    for partition in range(3):
        assert actual[partition] == expected[partition], f"partition {partition} differs"


def test_topics_exist_with_three_partitions(produced, matrix_broker):
    import confluent_kafka.admin

    meta = confluent_kafka.admin.AdminClient(
        {"bootstrap.servers": matrix_broker.bootstrap}
    ).list_topics(timeout=10)
    for topic, _records in produced.values():
        assert len(meta.topics[topic].partitions) == 3
