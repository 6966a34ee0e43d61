"""Followers replicate through incremental fetch sessions (KIP-227).

Three brokers, 60 partitions at RF=3: every follower keeps one session per
leader it fetches from (the leaders' ``/metrics`` show follower sessions over
the partitions they lead), records acknowledged with acks=all are all read
back, a leader's loss moves the followers to new sessions, and the replicas'
logs end up identical batch for batch. With ``num.replica.fetchers=2`` a
follower keeps two sessions per leader (a fetcher each, over the partitions
Kafka's fetcher id gives it), and the same holds.
"""

import time
import urllib.request

import pytest
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
    acked = dict(producer.acked)
    stored = read_all(c.bootstrap, topic, PARTITIONS, _ends(acked))
    lost = [v for v, where in acked.items() if stored.get(where) != v]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:3]}"
    # Sessions survived the failover: each broker again serves its followers
    # through sessions (restarted fetchers open new ones).
    assert all(sessions >= 1 for sessions, _ in _follower_sessions(c).values())
    assert compare_replicas(c, topic, PARTITIONS) == []
