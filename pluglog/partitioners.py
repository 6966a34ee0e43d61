"""Built-in partitioners: Kafka's murmur2 default and round-robin.

``murmur2`` reproduces Kafka's default partitioner for keyed records
(``toPositive(murmur2(key)) % numPartitions``, seed 0x9747b28c) so keys land
on the same partition whichever client or pluglog tool produced them.
Unkeyed records go round-robin per topic.
"""

import itertools

from zope.interface import implementer

from pluglog.interfaces import IPartitioner

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data):
    """Return Kafka's 32-bit signed murmur2 hash of ``data`` (bytes)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    tail = length & ~3
    for i in range(0, tail, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number):
    """Kafka's ``Utils.toPositive``: clear the sign bit (not abs())."""
    return number & 0x7FFFFFFF


class _RoundRobin:
    def __init__(self):
        self._counters = {}

    def next(self, topic, num_partitions):
        counter = self._counters.get(topic)
        if counter is None:
            counter = self._counters[topic] = itertools.count()
        return next(counter) % num_partitions


@implementer(IPartitioner)
class Murmur2Partitioner:
    """Keyed records by murmur2 like Kafka; unkeyed round-robin."""

    def __init__(self):
        self._round_robin = _RoundRobin()

    def partition(self, topic, key, num_partitions):
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be positive, got {num_partitions}")
        if key is None:
            return self._round_robin.next(topic, num_partitions)
        return to_positive(murmur2(bytes(key))) % num_partitions


@implementer(IPartitioner)
class RoundRobinPartitioner:
    """Every record to the next partition, keys ignored."""

    def __init__(self):
        self._round_robin = _RoundRobin()

    def partition(self, topic, key, num_partitions):
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be positive, got {num_partitions}")
        return self._round_robin.next(topic, num_partitions)


def make_murmur2(config, reactor):
    return Murmur2Partitioner()


def make_round_robin(config, reactor):
    return RoundRobinPartitioner()
