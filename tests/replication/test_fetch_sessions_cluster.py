"""Followers replicate through incremental fetch sessions (KIP-227).

Three brokers, 60 partitions at RF=3: every follower keeps one session per
leader it fetches from (the leaders' ``/metrics`` show follower sessions over
the partitions they lead), records acknowledged with acks=all are all read
back, a leader's loss moves the followers to new sessions, and the replicas'
logs end up identical batch for batch. With ``num.replica.fetchers=2`` a
follower keeps two sessions per leader (a fetcher each, over the partitions
Kafka's fetcher id gives it), and the same holds; changing it at run time
(IncrementalAlterConfigs on each broker) moves the followers to
their new fetchers under load without losing a record.
"""

import time
import urllib.request

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from prometheus_client.parser import text_string_to_metric_families

from tests.chaos import ProducerThread, compare_replicas, create_topic, read_all

PARTITIONS = 60
CREATED = ("pluglog_fetch_sessions_created_total", ())


def _samples(url):
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def _follower_sessions(c):
    """node -> (follower sessions, partitions in sessions) from each live broker."""
    out = {}
    for node in c.live():
        found = _samples(c.url(node))
        out[node] = (
            found[("pluglog_fetch_sessions", (("kind", "follower"),))],
            found[("pluglog_fetch_session_partitions", ())],
        )
    return out


def _ends(acked):
    ends = {p: 0 for p in range(PARTITIONS)}
    for p, o in acked.values():
        ends[p] = max(ends[p], o + 1)
    return ends


def _assert_none_lost(c, topic, producer):
    """Every record acknowledged with acks=all is read back where it was acked."""
    acked = dict(producer.acked)
    stored = read_all(c.bootstrap, topic, PARTITIONS, _ends(acked))
    lost = [v for v, where in acked.items() if stored.get(where) != v]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}"


@pytest.mark.parametrize("fetchers", [1, 2])
def test_followers_replicate_many_partitions_through_sessions(cluster, fetchers):
    c = cluster(3, http=True, settings={"num.replica.fetchers": str(fetchers)})
    topic = "sessions"
    create_topic(c.bootstrap, topic, partitions=PARTITIONS)
    c.wait_for_isr(topic, PARTITIONS, 3)
    leaders = {}
    for p in range(PARTITIONS):
        leaders.setdefault(c.leader(topic, p), []).append(p)
    # Each leader holds one session per follower (two) and fetcher, over the
    # partitions it leads (the coordinator's own topics may add more). Every
    # leader leads partitions of both fetcher ids (consecutive partitions
    # alternate), so two fetchers make four sessions.
    c.wait_for(
        lambda: all(
            sessions == 2 * fetchers and parts >= 2 * len(leaders.get(node, ()))
            for node, (sessions, parts) in _follower_sessions(c).items()
        ),
        what=f"{2 * fetchers} follower sessions on every leader",
    )
    # Sessions are kept, not reopened per fetch: with idle partitions the
    # followers fetch every replica.fetch.wait.max.ms, yet open nothing new.
    created = {node: _samples(c.url(node))[CREATED] for node in c.live()}
    time.sleep(2.0)
    assert {node: _samples(c.url(node))[CREATED] for node in c.live()} == created
    producer = ProducerThread(c.bootstrap, topic, partitions=PARTITIONS, rate=1500)
    producer.start()
    try:
        c.wait_for(lambda: len(producer.acked) > 1000, what="first acks")
        victim = c.leader(topic, 0)
        c.kill(victim)
        c.wait_for(lambda: c.leader(topic, 0) not in (victim, -1), what="a new leader")
        acked_then = len(producer.acked)
        c.wait_for(lambda: len(producer.acked) > acked_then + 1000, what="acks after failover")
        c.restart(victim)
        c.wait_for_isr(topic, PARTITIONS, 3, timeout=60)
    finally:
        producer.stop()
    _assert_none_lost(c, topic, producer)
    # Sessions survived the failover: each broker again serves its followers
    # through sessions (restarted fetchers open new ones).
    assert all(sessions >= 1 for sessions, _ in _follower_sessions(c).values())
    assert compare_replicas(c, topic, PARTITIONS) == []


def _set_fetchers(c, count):
    """Each broker's own override, one call each (confluent-kafka refuses the
    cluster-wide resource name "" and more than one BROKER resource a call)."""
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    entry = ConfigEntry(
        "num.replica.fetchers", str(count), incremental_operation=AlterConfigOpType.SET
    )
    for node in c.live():
        resource = ConfigResource(ResourceType.BROKER, str(node), incremental_configs=[entry])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(timeout=30)


def test_the_fetcher_count_changes_at_run_time_under_load(cluster):
    c = cluster(3, http=True)
    topic = "resize"
    create_topic(c.bootstrap, topic, partitions=PARTITIONS)
    c.wait_for_isr(topic, PARTITIONS, 3)

    def sessions_everywhere(count):
        return lambda: all(s == count for s, _ in _follower_sessions(c).values())

    c.wait_for(sessions_everywhere(2), what="one session per follower on every leader")
    producer = ProducerThread(c.bootstrap, topic, partitions=PARTITIONS, rate=1500)
    producer.start()
    try:
        c.wait_for(lambda: len(producer.acked) > 500, what="first acks")
        # Each follower opens a second session per leader.
        _set_fetchers(c, 2)
        c.wait_for(sessions_everywhere(4), what="two sessions per follower on every leader")
        acked_then = len(producer.acked)
        c.wait_for(lambda: len(producer.acked) > acked_then + 1000, what="acks with two fetchers")
        # Back to one: the second fetchers' partitions move to the first.
        _set_fetchers(c, 1)
        acked_then = len(producer.acked)
        c.wait_for(lambda: len(producer.acked) > acked_then + 1000, what="acks with one again")
    finally:
        producer.stop()
    _assert_none_lost(c, topic, producer)
    c.wait_for_isr(topic, PARTITIONS, 3, timeout=60)
    assert compare_replicas(c, topic, PARTITIONS) == []
