"""The partition-health filters of ``pluglog topics describe`` and the CLI's
leader routing, on a Metadata answer from a three-broker cluster with
broker 2 down."""

import pytest

from pluglog.cli.cluster import partition_line, unhealthy_partitions
from pluglog.cli.common import CliError
from pluglog.cli.routing import Router


def _part(index, leader, replicas, isr, offline=()):
    return {
        "error_code": 0,
        "partition_index": index,
        "leader_id": leader,
        "leader_epoch": 4,
        "replica_nodes": list(replicas),
        "isr_nodes": list(isr),
        "offline_replicas": list(offline),
    }


META = {
    "brokers": [{"node_id": 0}, {"node_id": 1}],
    "controller_id": 0,
    "topics": [
        {
            "error_code": 0,
            "name": "orders",
            "partitions": [
                _part(1, 2, [2, 1], [2], offline=[2]),  # leader on the dead broker
                _part(0, 0, [0, 1, 2], [0, 1], offline=[2]),
                _part(2, 1, [1, 0], [1, 0]),
                _part(3, -1, [2], [], offline=[2]),
            ],
        },
        {"error_code": 0, "name": "audit", "partitions": [_part(0, 0, [0, 1], [0, 1])]},
    ],
}


def _which(under, unavailable):
    return [(t, p["partition_index"]) for t, p in unhealthy_partitions(META, under, unavailable)]


def test_under_replicated_is_isr_smaller_than_replicas():
    assert _which(True, False) == [("orders", 0), ("orders", 1), ("orders", 3)]


def test_unavailable_is_no_live_leader():
    assert _which(False, True) == [("orders", 1), ("orders", 3)]
    assert _which(True, True) == [("orders", 0), ("orders", 1), ("orders", 3)]


def test_lines_in_kafka_topics_form():
    found = dict(((t, p["partition_index"]), p) for t, p in unhealthy_partitions(META, True, True))
    assert partition_line("orders", found[("orders", 0)]) == (
        "\tTopic: orders\tPartition: 0\tLeader: 0\tReplicas: 0,1,2\tIsr: 0,1\tOffline: 2"
    )
    assert partition_line("orders", found[("orders", 3)]) == (
        "\tTopic: orders\tPartition: 3\tLeader: none\tReplicas: 2\tIsr: \tOffline: 2"
    )


class _Bootstrap:
    """Stands in for the bootstrap BlockingClient: answers Metadata only."""

    client_id = "t"
    address = ("127.0.0.1", 9001)

    def __init__(self, meta):
        self.meta = meta
        self.asked = 0

    def request(self, api_key, version, body):
        self.asked += 1
        return self.meta


def test_router_groups_partitions_by_live_leader():
    meta = {
        "brokers": [
            {"node_id": 0, "host": "127.0.0.1", "port": 9000},
            {"node_id": 1, "host": "127.0.0.1", "port": 9001},
        ],
        "topics": [META["topics"][0]],
    }
    client = _Bootstrap(meta)
    route = Router(client)
    route.client_for = lambda node: client if node == 1 else f"peer-{node}"
    assert route.by_leader("orders", [0, 2]) == [("peer-0", [0]), (client, [2])]
    assert client.asked == 1  # leaders are cached for the command
    assert route.by_leader("orders", [1, 2, 3], skip_leaderless=True) == [(client, [2])]
    with pytest.raises(CliError, match="orders-3: LEADER_NOT_AVAILABLE"):
        route.by_leader("orders", [3])


def test_router_uses_the_bootstrap_connection_for_its_own_broker():
    client = _Bootstrap({})
    route = Router(client)
    route.brokers = {1: ("127.0.0.1", 9001)}
    assert route.client_for(1) is client
