"""The cluster operator's APIs and CLI on three brokers and a real ZooKeeper:
kafka-python's admin client moves a partition to other brokers and elects
its preferred leader, and the data follows; only the controller answers the
controller's APIs; the CLI shows brokers, racks and under-replicated
partitions."""

import subprocess
import sys

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from pluglog.client.blocking import BlockingClient
from pluglog.protocol import api_keys
from tests.broker_process import ROOT
from tests.cluster import Cluster
from tests.zookeeper import new_chroot

RACKS = {1: "r1", 2: "r2", 3: "r3"}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory, zookeeper_process):
    """One cluster for the module; the tests run in file order and the last
    one kills a broker. Automatic preferred-leader rebalancing is off: the
    election test elects by hand."""
    if not zookeeper_process.alive():
        zookeeper_process.start()
    made = Cluster(
        tmp_path_factory.mktemp("operator"),
        zookeeper_process.connect_string(new_chroot()),
        settings={"auto.leader.rebalance.enable": "false"},
        racks=RACKS,
    ).start()
    yield made
    made.stop()


@pytest.fixture
def admin(nodes):
    client = KafkaAdminClient(bootstrap_servers=nodes.bootstrap, request_timeout_ms=30000)
    yield client
    client.close()


def _values(bootstrap, topic, count):
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=20000,
    )
    consumer.assign([KpTopicPartition(topic, 0)])
    got = []
    for message in consumer:
        got.append(message.value)
        if len(got) == count:
            break
    consumer.close()
    return got


def _log_dir_sizes(node_port):
    with BlockingClient("127.0.0.1", node_port, timeout=10) as client:
        out = client.request(api_keys.DESCRIBE_LOG_DIRS, 4, {"topics": None})
    return {
        (t["name"], p["partition_index"]): p["partition_size"]
        for r in out["results"]
        for t in r["topics"]
        for p in t["partitions"]
    }


def test_describe_cluster_names_every_broker_and_rack(nodes, admin):
    described = admin.describe_cluster()
    assert described["controller_id"] == nodes.controller()
    assert {b["broker_id"]: b["rack"] for b in described["brokers"]} == RACKS
    ports = {node: b.port for node, b in nodes.brokers.items()}
    assert {b["broker_id"]: b["port"] for b in described["brokers"]} == ports


def test_reassign_then_elect_preferred_and_the_data_follows(nodes, admin):
    admin.create_topics([NewTopic("moving", 1, 1)])
    nodes.wait_for(lambda: nodes.leader("moving") in (1, 2, 3), what="a leader")
    (source,) = nodes.partition("moving", 0)["replicas"]
    targets = [n for n in (1, 2, 3) if n != source]
    producer = KafkaProducer(bootstrap_servers=nodes.bootstrap, acks="all")
    values = [b"record-%d" % i for i in range(200)]
    for value in values:
        producer.send("moving", value, partition=0)
    producer.flush(30)

    tp = KpTopicPartition("moving", 0)
    assert admin.alter_partition_reassignments({tp: targets}) == {tp: None}
    nodes.wait_for(
        lambda: (
            nodes.partition("moving", 0)["replicas"] == targets
            and sorted(nodes.partition("moving", 0)["isr"]) == sorted(targets)
        ),
        timeout=60,
        what=f"replicas {targets}",
    )
    nodes.wait_for(lambda: admin.list_partition_reassignments() == {}, what="move done")
    # The old replica's log is gone; both new ones hold the data.
    nodes.wait_for(
        lambda: ("moving", 0) not in _log_dir_sizes(nodes.brokers[source].port),
        what="old replica deleted",
    )
    sizes = [_log_dir_sizes(nodes.brokers[n].port)[("moving", 0)] for n in targets]
    assert sizes[0] == sizes[1] > 200 * 8
    assert _values(nodes.bootstrap, "moving", 200) == values

    # Leadership away from the preferred replica, then back by election.
    preferred, other = targets
    nodes.brokers[preferred].stop()
    nodes.wait_for(lambda: nodes.leader("moving") == other, what="failover")
    nodes.restart(preferred)
    nodes.wait_for_isr("moving", 1, 2, timeout=60)
    assert nodes.leader("moving") == other
    # A new admin client: kafka-python keeps the broker list it saw while
    # ``preferred`` was down, and that broker may be the controller now.
    fresh = KafkaAdminClient(bootstrap_servers=nodes.bootstrap, request_timeout_ms=30000)
    try:
        response = fresh.elect_leaders(0, {"moving": [0]})
        codes = [
            p.error_code for r in response.replica_election_results for p in r.partition_result
        ]
        assert codes == [0]
        nodes.wait_for(lambda: nodes.leader("moving") == preferred, what="preferred leads")
        again = fresh.elect_leaders(0, {"moving": [0]})
        codes = [p.error_code for r in again.replica_election_results for p in r.partition_result]
        assert codes == [84]  # ELECTION_NOT_NEEDED
    finally:
        fresh.close()
    producer.send("moving", b"after", partition=0)
    producer.flush(30)
    producer.close()
    assert _values(nodes.bootstrap, "moving", 201) == values + [b"after"]


def test_only_the_controller_answers_controller_apis(nodes):
    controller = nodes.controller()
    other = next(n for n in nodes.live() if n != controller)
    with BlockingClient("127.0.0.1", nodes.brokers[other].port, timeout=10) as client:
        body = {"election_type": 0, "topic_partitions": None, "timeout_ms": 5000}
        assert client.request(api_keys.ELECT_LEADERS, 2, body)["error_code"] == 41
        body = {"timeout_ms": 5000, "topics": None}
        out = client.request(api_keys.LIST_PARTITION_REASSIGNMENTS, 0, body)
        assert out["error_code"] == 41
    with BlockingClient("127.0.0.1", nodes.brokers[controller].port, timeout=10) as client:
        out = client.request(api_keys.LIST_PARTITION_REASSIGNMENTS, 0, body)
        assert (out["error_code"], out["topics"]) == (0, [])


def _cli(nodes, *args, node=None, expect=0):
    port = nodes.brokers[node or nodes.live()[0]].port
    result = subprocess.run(
        [sys.executable, "-m", "pluglog.cli.main", "-b", f"127.0.0.1:{port}", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == expect, result.stderr
    return result.stdout


def test_cli_talks_to_each_partitions_leader(nodes, admin):
    admin.create_topics([NewTopic("spread", 3, 1)])
    nodes.wait_for(
        lambda: sorted(nodes.leader("spread", p) for p in range(3)) == [1, 2, 3],
        what="one partition per broker",
    )
    lines = "".join(f"k{i}:v{i}\n" for i in range(90))
    result = subprocess.run(
        [sys.executable, "-m", "pluglog.cli.main", "-b", nodes.brokers[1].bootstrap]
        + ["produce", "spread", "--key-separator", ":"],
        input=lines,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = _cli(nodes, "consume", "spread", "--from-beginning", "--exit", node=1)
    assert sorted(out.splitlines()) == sorted(f"v{i}" for i in range(90))
    described = _cli(nodes, "topics", "describe", "spread", node=1).splitlines()
    ends = [int(line.rsplit("End: ", 1)[1]) for line in described if "\tPartition: " in line]
    assert len(ends) == 3 and sum(ends) == 90


def test_cli_shows_brokers_and_under_replicated_partitions(nodes, admin):
    admin.create_topics([NewTopic("wide", 3, 3)])
    nodes.wait_for_isr("wide", 3, 3)
    out = _cli(nodes, "cluster", "describe").splitlines()
    controller = nodes.controller()
    assert out[0].endswith(f"\tController: {controller}")
    racks = {int(line.split("\t")[0].split(": ")[1]): line for line in out[1:4]}
    assert sorted(racks) == [1, 2, 3]
    assert all(f"Rack: r{n}" in racks[n] for n in racks)
    assert "Controller: yes" in racks[controller]
    assert _cli(nodes, "topics", "describe", "wide", "--under-replicated") == ""

    victim = next(n for n in (1, 2, 3) if n != controller)
    nodes.kill(victim)
    nodes.wait_for(
        lambda: all(
            victim not in nodes.partition("wide", p)["isr"] and nodes.leader("wide", p) > 0
            for p in range(3)
        ),
        timeout=60,
        what="ISR shrinks",
    )
    lines = _cli(nodes, "topics", "describe", "--under-replicated").splitlines()
    wide = [line for line in lines if "\tTopic: wide\t" in line]
    assert len(wide) == 3
    assert all(f"Offline: {victim}" in line for line in wide)
    assert _cli(nodes, "topics", "describe", "wide", "--unavailable") == ""
    summary = _cli(nodes, "cluster", "describe").splitlines()
    assert len(summary) == 1 + 2 + 1  # the dead broker is not listed
    assert "UnderReplicated: 0" not in summary[-1]
