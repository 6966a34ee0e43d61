"""murmur2 must match Kafka's default partitioner byte for byte."""

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from pluglog.partitioners import Murmur2Partitioner, RoundRobinPartitioner, murmur2, to_positive

# Vectors from Kafka's UtilsTest.testMurmur2.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("key,expected", sorted(KAFKA_VECTORS.items()))
def test_kafka_vectors(key, expected):
    assert murmur2(key) == expected


def test_matches_kafka_python_on_many_keys():
    for i in range(2000):
        key = (f"key-{i}" * (i % 7 + 1)).encode()[: i % 61]
        assert to_positive(murmur2(key)) == kafka_python_murmur2(key) & 0x7FFFFFFF


def test_keyed_partition_is_stable_and_in_range():
    part = Murmur2Partitioner()
    for n in (1, 3, 6, 100):
        for i in range(200):
            key = f"user-{i}".encode()
            p = part.partition("t", key, n)
            assert 0 <= p < n
            assert p == to_positive(murmur2(key)) % n


def test_unkeyed_round_robin():
    part = Murmur2Partitioner()
    assert [part.partition("t", None, 3) for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    rr = RoundRobinPartitioner()
    assert [rr.partition("t", b"same", 2) for _ in range(4)] == [0, 1, 0, 1]


def test_bad_partition_count():
    with pytest.raises(ValueError):
        Murmur2Partitioner().partition("t", b"k", 0)
