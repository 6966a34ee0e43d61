"""Which fetcher of a leader replicates a partition (``num.replica.fetchers``).

Kafka's ``AbstractFetcherManager.getFetcherId`` is ``Utils.abs(31 *
topic.hashCode + partition) % numFetchers`` in Java's 32-bit arithmetic; the
expected values here are Java's: ``"hello".hashCode()`` is 99162322 and
``"polygenelubricants".hashCode()`` is ``Integer.MIN_VALUE``.
"""

import random

from pluglog.replication.manager import fetcher_id


def java_hash(text):
    """String.hashCode as its definition reads: s[0]*31^(n-1) + ... + s[n-1]."""
    n = len(text)
    total = sum(ord(ch) * 31 ** (n - 1 - i) for i, ch in enumerate(text)) % (1 << 32)
    return total - (1 << 32) if total >= 1 << 31 else total


def test_the_java_hash_values_this_file_relies_on():
    assert java_hash("hello") == 99162322
    assert java_hash("polygenelubricants") == -(1 << 31)


def test_one_fetcher_takes_every_partition():
    assert {fetcher_id("t", p, 1) for p in range(100)} == {0}
    assert {fetcher_id("t", p, 0) for p in range(100)} == {0}


def test_fetcher_ids_follow_kafkas_formula():
    # 31 * 99162322 = 3074031982 wraps to -1220935314 in 32 bits, so
    # partition p gives abs(-1220935314 + p) = 1220935314 - p.
    assert 31 * 99162322 - (1 << 32) == -1220935314
    for count in (2, 3, 8):
        for p in range(20):
            assert fetcher_id("hello", p, count) == (1220935314 - p) % count


def test_the_most_negative_int_maps_to_fetcher_zero_as_kafkas_abs_does():
    # 31 * MIN_VALUE wraps to MIN_VALUE: partition 0 gives abs(MIN_VALUE),
    # which Kafka's Utils.abs maps to 0 (Math.abs would stay negative).
    assert fetcher_id("polygenelubricants", 0, 3) == 0
    # partition 1: MIN_VALUE + 1, abs 2**31 - 1, and 2**31 - 1 = 1 mod 3
    assert fetcher_id("polygenelubricants", 1, 3) == ((1 << 31) - 1) % 3 == 1


def test_random_topics_against_the_definition():
    rng = random.Random(24)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
    for _ in range(500):
        topic = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))
        p, count = rng.randrange(10000), rng.randint(2, 16)
        n = (31 * java_hash(topic) + p) % (1 << 32)
        n = n - (1 << 32) if n >= 1 << 31 else n
        expected = (0 if n == -(1 << 31) else abs(n)) % count
        assert fetcher_id(topic, p, count) == expected


def test_the_partitions_of_a_topic_spread_over_the_fetchers():
    ids = [fetcher_id("orders", p, 4) for p in range(40)]
    assert sorted(set(ids)) == [0, 1, 2, 3]
    assert all(ids.count(i) == 10 for i in range(4))  # consecutive partitions rotate
