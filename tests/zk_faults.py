"""ZooKeeper faults against a local cluster (tests.cluster.Cluster): the pieces the
ZooKeeper-fault tests (tests/replication/test_zookeeper_faults.py) and
bench/chaos.py share.

ZooKeeper is the truth: :func:`disagreements` compares every live broker's
Metadata answer (controller, brokers, each partition's leader, leader epoch
and ISR) with the znodes (``/controller``, ``/brokers/ids``,
``/brokers/topics/<t>/partitions/<p>/state``) and requires every leader to
be a live broker. :func:`produce_once` sends one acks=all Produce and times
the broker's answer. (``tests.chaos.check_read_back`` reads everything
acknowledged back and counts the records lost and duplicated.)
"""

import json
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from pluglog.coordination.zkserver import four_letter
from pluglog.protocol.records import Record, build_batch


class ZooKeeperView:
    """A kazoo client on the cluster's chroot reading the znodes brokers write."""

    def __init__(self, connect_string):
        self.client = KazooClient(hosts=connect_string, timeout=10)
        self.client.start(timeout=30)

    def close(self):
        self.client.stop()
        self.client.close()

    def brokers(self):
        return sorted(int(b) for b in self.client.retry(self.client.get_children, "/brokers/ids"))

    def controller(self):
        """The controller's id, or -1 between two controllers (the dead
        one's ephemeral ``/controller`` is gone, no one has won yet)."""
        try:
            raw, _ = self.client.retry(self.client.get, "/controller")
        except NoNodeError:
            return -1
        return json.loads(raw)["brokerid"]

    def state(self, topic, partition):
        """``{leader, leader_epoch, isr}`` of one partition state znode."""
        path = f"/brokers/topics/{topic}/partitions/{partition}/state"
        raw, _ = self.client.retry(self.client.get, path)
        data = json.loads(raw)
        return {"leader": data["leader"], "leader_epoch": data["leader_epoch"], "isr": data["isr"]}


def disagreements(cluster, view, topic, partitions):
    """What keeps the live brokers' Metadata from agreeing with ZooKeeper
    (an empty list once they agree and every leader is a live broker)."""
    live = set(cluster.live())
    problems = []
    registered = view.brokers()
    if set(registered) != live:
        problems.append(f"registered {registered}, live {sorted(live)}")
    controller = view.controller()
    if controller not in live:
        problems.append(f"controller {controller} is not live")
    truth = {p: view.state(topic, p) for p in range(partitions)}
    for p, state in truth.items():
        if state["leader"] not in live:
            problems.append(f"{topic}-{p}: ZooKeeper names leader {state['leader']}")
    for node in sorted(live):
        meta = cluster.metadata([topic], node)
        brokers = sorted(b["node_id"] for b in meta["brokers"])
        if brokers != registered:
            problems.append(f"broker {node}: brokers {brokers} != {registered}")
        if meta["controller_id"] != controller:
            problems.append(f"broker {node}: controller {meta['controller_id']} != {controller}")
        for entry in meta["topics"]:
            for part in entry["partitions"]:
                state = truth[part["partition_index"]]
                seen = (part["leader_id"], part["leader_epoch"], sorted(part["isr_nodes"]))
                want = (state["leader"], state["leader_epoch"], sorted(state["isr"]))
                if seen != want:
                    problems.append(
                        f"broker {node}: {topic}-{part['partition_index']} "
                        f"(leader, epoch, isr) {seen} != ZooKeeper's {want}"
                    )
    return problems


def wait_agreement(cluster, view, topic, partitions, since, within):
    """Wait until :func:`disagreements` is empty; return the seconds from
    ``since`` (a monotonic time). AssertionError, naming what still
    disagrees, once ``within`` seconds from ``since`` have passed."""
    problems = ["not checked"]
    while True:
        try:
            problems = disagreements(cluster, view, topic, partitions)
        except (OSError, RuntimeError, KeyError) as exc:
            problems = [repr(exc)]
        elapsed = time.monotonic() - since
        if not problems:
            return elapsed
        if elapsed > within:
            raise AssertionError(
                f"Metadata disagrees with ZooKeeper {elapsed:.1f}s after the fault: {problems}"
            )
        time.sleep(0.1)


def wait_reconnected(zk_port, clients, timeout=15.0):
    """Wait until ZooKeeper at ``zk_port`` has ``clients`` connections (``mntr``)."""
    deadline = time.monotonic() + timeout
    count = 0
    while time.monotonic() < deadline:
        for line in four_letter(zk_port, b"mntr").splitlines():
            if line.startswith("zk_num_alive_connections"):
                count = int(line.split()[1])
        if count >= clients:
            return count
        time.sleep(0.1)
    raise AssertionError(f"only {count} of {clients} clients reconnected to ZooKeeper")


def wait_writes_resume(producer, partitions, timeout=10.0):
    """Wait until every partition has had an acknowledgement after now."""
    before = list(producer.acked_per_partition)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(producer.acked_per_partition[p] > before[p] for p in range(partitions)):
            return
        time.sleep(0.1)
    stuck = [p for p in range(partitions) if producer.acked_per_partition[p] == before[p]]
    raise AssertionError(f"acks=all writes did not resume on {stuck} ({producer.errors})")


def produce_once(port, topic, partition, timeout_ms, value=b"probe"):
    """One acks=all Produce (v8) to the broker on ``port``: ``(error code, seconds)``."""
    batch = build_batch([Record(None, value)])
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": timeout_ms,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": partition, "records": batch}],
            }
        ],
    }
    started = time.monotonic()
    with BlockingClient("127.0.0.1", port, timeout=timeout_ms / 1000.0 + 30) as client:
        response = client.request(codec.PRODUCE, 8, body)
    code = response["responses"][0]["partition_responses"][0]["error_code"]
    return code, time.monotonic() - started
