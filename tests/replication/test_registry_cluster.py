"""Every broker of a 3-broker cluster serves the same schema registry.

One real ZooKeeper and three ``twistd pluglog --http`` brokers for the whole
module. confluent-kafka's SchemaRegistryClient registers through a follower
of ``_schemas``-0 (the write is forwarded to the leader), the other follower
serves the id and the subject's versions; the leader is SIGKILLed, a new one
is elected, a schema registered through any broker gets a fresh id, every
earlier id resolves on every live broker, and the killed broker, restarted,
serves everything. Reads go through raw HTTP (tests.integration.registry_helpers.http)
where the client's cache would hide what a broker serves.
"""

import json
import time

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from tests.cluster import Cluster
from tests.integration.registry_helpers import USER_V1, USER_V2, http
from tests.zookeeper import ZooKeeperProcess, new_chroot

TOPIC = "_schemas"


@pytest.fixture(scope="module")
def registry_cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("registry-cluster")
    zk = ZooKeeperProcess(root / "zk").start()
    cluster = None
    try:
        cluster = Cluster(root, zk.connect_string(new_chroot()), brokers=3, http=True).start()
        for node in cluster.brokers:
            cluster.wait_for(
                lambda n=node: http(cluster.url(n) + "/subjects")[0] == 200,
                what=f"broker {node}'s registry",
            )
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
        zk.stop()


def served(cluster, node, path):
    """``(status, body)`` of GET ``path`` on ``node``'s registry."""
    status, _ctype, body = http(cluster.url(node) + path)
    return status, body


def wait_served(cluster, node, path, expected, timeout=30.0):
    """Seconds until ``node`` answers ``path`` with ``(200, expected)``."""
    start = time.monotonic()
    cluster.wait_for(
        lambda: served(cluster, node, path) == (200, expected),
        timeout=timeout,
        interval=0.05,
        what=f"broker {node} to serve {path} as {expected!r}",
    )
    return time.monotonic() - start


def test_every_broker_serves_one_registry(registry_cluster):
    cluster = registry_cluster
    # Nothing is stored yet: every broker serves an empty registry, and the
    # first write (here a config PUT through broker 1) creates _schemas.
    assert all(served(cluster, n, "/subjects") == (200, []) for n in cluster.brokers)
    status, _ctype, body = http(cluster.url(1) + "/config", "PUT", {"compatibility": "BACKWARD"})
    assert (status, body) == (200, {"compatibility": "BACKWARD"})
    info = cluster.partition(TOPIC, 0)
    assert sorted(info["replicas"]) == [1, 2, 3]  # RF = min(3, brokers)
    cluster.wait_for_isr(TOPIC, 1, 3)
    leader = cluster.leader(TOPIC)
    follower, other = sorted(set(cluster.brokers) - {leader})

    # A follower takes the write (forwarded to the leader) with the real client.
    sr = SchemaRegistryClient({"url": cluster.url(follower)})
    first = sr.register_schema("users-value", Schema(USER_V1, "AVRO"))
    second = sr.register_schema("users-value", Schema(USER_V2, "AVRO"))
    assert second > first
    # The leader answered only after the HW passed the record, so the
    # leader itself serves it at once; the other follower within a fetch.
    assert served(cluster, leader, "/subjects/users-value/versions") == (200, [1, 2])
    lag = wait_served(cluster, other, "/subjects/users-value/versions", [1, 2])
    assert lag < 5.0  # ~0.1-0.5 s unloaded; generous for a loaded CI machine
    status, body = served(cluster, other, f"/schemas/ids/{first}")
    assert status == 200 and json.loads(body["schema"]) == json.loads(USER_V1)
    theirs = SchemaRegistryClient({"url": cluster.url(other)})
    latest = theirs.get_latest_version("users-value")
    assert (latest.schema_id, latest.version) == (second, 2)
    # A refused write is refused through any broker with the leader's 409 body.
    status, _ctype, body = http(
        cluster.url(other) + "/subjects/users-value/versions",
        "POST",
        {"schema": json.dumps({"type": "string"})},
    )
    assert (status, body["error_code"]) == (409, 409)

    # SIGKILL the registry leader; a new one is elected among the others.
    cluster.kill(leader)
    new_leader = cluster.wait_for(
        lambda: (lambda lead: lead if lead not in (leader, -1) else None)(cluster.leader(TOPIC)),
        what="a new leader of _schemas-0",
    )
    survivor = next(n for n in cluster.live() if n != new_leader)
    # Through the survivor when it is a follower, so the new leader is reached
    # by forwarding; the client retries while the leadership settles.
    third = register_with_retry(cluster.url(survivor), "orders-value", '"string"')
    assert third not in (first, second) and third > second
    ids = {first: USER_V1, second: USER_V2, third: '"string"'}
    for node in cluster.live():
        for schema_id, text in ids.items():
            cluster.wait_for(
                lambda n=node, i=schema_id: served(cluster, n, f"/schemas/ids/{i}")[0] == 200,
                what=f"id {schema_id} on broker {node}",
            )
            body = served(cluster, node, f"/schemas/ids/{schema_id}")[1]
            assert json.loads(body["schema"]) == json.loads(text)

    # The killed broker comes back and serves everything, new id included.
    cluster.restart(leader)
    wait_served(cluster, leader, "/subjects", ["orders-value", "users-value"])
    for schema_id, text in ids.items():
        status, body = served(cluster, leader, f"/schemas/ids/{schema_id}")
        assert status == 200 and json.loads(body["schema"]) == json.loads(text)
    assert served(cluster, leader, "/subjects/users-value/versions") == (200, [1, 2])
    # And it forwards writes again: a fourth schema through it, seen everywhere.
    fourth = register_with_retry(cluster.url(leader), "orders-value", '"bytes"', level="NONE")
    assert fourth > third
    for node in cluster.live():
        wait_served(cluster, node, "/subjects/orders-value/versions", [1, 2])


def register_with_retry(url, subject, schema, level=None, timeout=30.0):
    """Register through ``url``, retrying Confluent's 5000x answers (the
    leadership is moving) as a client's retry policy would."""
    deadline = time.monotonic() + timeout
    while True:
        if level is not None:
            status, _ctype, body = http(f"{url}/config/{subject}", "PUT", {"compatibility": level})
        else:
            status = 200
        if status == 200:
            status, _ctype, body = http(
                f"{url}/subjects/{subject}/versions", "POST", {"schema": schema}
            )
            if status == 200:
                return body["id"]
        assert status == 500 and 50001 <= body["error_code"] <= 50004, body
        assert time.monotonic() < deadline, body
        time.sleep(0.2)
