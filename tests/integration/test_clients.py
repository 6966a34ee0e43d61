"""Unmodified Kafka clients against the real broker process.

Each client produces 10,000 records (keys, null keys and values, headers)
into a 3-partition topic, a slice with every compression codec it supports;
every *other* client reads them back identical and in per-partition order.
"""

import pytest

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
def produced(shared_broker):
    """A topic per client, created with its own admin API and filled by its producer
    with TOTAL records spread over all its codecs."""
    out = {}
    for client, produce in PRODUCERS.items():
        topic = f"matrix-{client}"
        CREATORS[client](shared_broker.bootstrap, topic, partitions=3)
        codecs = CODECS[client]
        records = make_records(TOTAL, seed=0)
        step = TOTAL // len(codecs)
        for i, codec_name in enumerate(codecs):
            chunk = records[i * step : TOTAL if i == len(codecs) - 1 else (i + 1) * step]
            produce(shared_broker.bootstrap, topic, chunk, codec_name)
        out[client] = (topic, records)
    return out


@pytest.mark.parametrize(
    "producer,consumer",
    [(p, c) for p in PRODUCERS for c in CONSUMERS if p != c],
)
def test_cross_client(produced, shared_broker, producer, consumer):
    topic, records = produced[producer]
    got = CONSUMERS[consumer](shared_broker.bootstrap, topic, 3, len(records))
    assert len(got) == len(records)
    expected = by_partition(records)
    actual = by_partition(got)
    for partition in range(3):
        assert actual[partition] == expected[partition], f"partition {partition} differs"


def test_topics_exist_with_three_partitions(produced, shared_broker):
    import confluent_kafka.admin

    meta = confluent_kafka.admin.AdminClient(
        {"bootstrap.servers": shared_broker.bootstrap}
    ).list_topics(timeout=10)
    for topic, _records in produced.values():
        assert len(meta.topics[topic].partitions) == 3
