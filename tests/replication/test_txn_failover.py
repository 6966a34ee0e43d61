"""Transactions on a 3-broker cluster: exactly once through broker SIGKILLs.

ZooKeeper and three broker processes, input and output topics with
replication factor 3 and min.insync.replicas=2, and bench/txn_crash.py's
consume-transform-produce loop (confluent-kafka, read_committed, offsets sent
to each transaction). In one round the leader of the transactional id's
``__transaction_state`` partition (its coordinator) is SIGKILLed between the
records and the commit; in another the leader of an output partition is. The
new coordinator loads the open transaction and finishes or aborts it; markers
follow the output partition to its new leader. At the end every input record
is in the output exactly once at read_committed, and no transaction is left
open.
"""

import time

import pytest

from bench.txn_crash import fill_input, read_output, transform_round
from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from pluglog.group.store import partition_for
from tests.chaos import create_topic

pytestmark = pytest.mark.cluster

TXN_PARTITIONS = 3
TXN_TIMEOUT_S = 10  # bench/txn_crash.py's transaction.timeout.ms
SETTINGS = {
    "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "offsets.topic.replication.factor": "3",
}


class NodeKiller:
    """Kills, when asked, the broker leading ``topic``-``index`` then."""

    def __init__(self, cluster, topic, index):
        self.cluster, self.topic, self.index = cluster, topic, index
        self.killed = None

    def kill(self):
        self.killed = self.cluster.leader(self.topic, self.index)
        self.killed_at = time.monotonic()
        self.cluster.kill(self.killed)


def describe(cluster, coordinator):
    """``ctp-0``'s state on its coordinator now, or None while there is none."""
    try:
        node = cluster.leader(*coordinator)
        host, port = cluster.brokers[node].bootstrap.split(":")
        with BlockingClient(host, int(port), timeout=5) as client:
            out = client.request(codec.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["ctp-0"]})
    except Exception:  # no leader yet, a broker going down: ask again
        return None
    (state,) = out["transaction_states"]
    return state["transaction_state"] if state["error_code"] == 0 else None


def wait_until_ended(cluster, coordinator, timeout=60):
    """When ``ctp-0`` has no transaction open or prepared (time.monotonic())."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if describe(cluster, coordinator) in ("Empty", "CompleteCommit", "CompleteAbort"):
            return time.monotonic()
        time.sleep(0.2)
    raise AssertionError(f"ctp-0 still {describe(cluster, coordinator)} after {timeout} s")


def test_exactly_once_through_coordinator_and_leader_kills(cluster):
    c = cluster(3, settings=SETTINGS)
    create_topic(c.bootstrap, "in", 3)
    create_topic(c.bootstrap, "out", 3)
    records = 6000
    fill_input(c.bootstrap, records)
    deadline = time.monotonic() + 240
    coordinator = ("__transaction_state", partition_for("ctp-0", TXN_PARTITIONS))
    for topic, index in (coordinator, ("out", 0)):
        killer = NodeKiller(c, topic, index)
        commits, _drained = transform_round(c.bootstrap, deadline, (2, "mid", killer))
        assert killer.killed is not None, f"the round ended after {commits} commit(s)"
        # The transaction the kill hit ends (committed by the client against
        # the new leaders, or aborted on its timeout) within
        # transaction.timeout.ms of the failure, plus the coordinator's
        # failover (two ZooKeeper sessions) and one timeout check.
        ended = wait_until_ended(c, coordinator)
        took = ended - killer.killed_at
        print(f"\n{topic}-{index} leader killed: the transaction ended {took:.1f} s later")
        assert took < TXN_TIMEOUT_S + 8 + 0.5, took
        c.restart(killer.killed)
        c.wait_for_isr("out", 3, 3, timeout=60)
    drained = False
    while not drained and time.monotonic() < deadline:
        _commits, drained = transform_round(c.bootstrap, deadline)
    assert drained, "the input was not drained before the deadline"
    committed = read_output(c.bootstrap, "read_committed")
    expected = {f"out-{i}" for i in range(records)}
    assert set(committed) == expected, f"missing {len(expected - set(committed))}"
    assert max(committed.values()) == 1, "a record is visible twice at read_committed"
    # Every transaction ended: the coordinator lists none open.
    node = c.leader(*coordinator)
    host, port = c.brokers[node].bootstrap.split(":")
    with BlockingClient(host, int(port)) as client:
        listed = client.request(
            codec.LIST_TRANSACTIONS, 0, {"state_filters": [], "producer_id_filters": []}
        )
    states = {s["transactional_id"]: s["transaction_state"] for s in listed["transaction_states"]}
    assert states.get("ctp-0") in ("CompleteCommit", "CompleteAbort", "Empty"), states
