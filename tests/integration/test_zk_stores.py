"""Users, ACLs, client quotas and dynamic broker configs in ZooKeeper, shared by brokers.

Real ZooKeeper, two or three in-process ZooKeeperCoordinators (each its own
kazoo session): what one writes lands in Kafka's layout, byte for byte, and
the others see it through the change notifications.
"""

import json
import threading

from pluglog.coordination import zkentities as e
from pluglog.security.acls import AclAuthorizer, AclBinding
from pluglog.security.credentials import make_credential
from tests.integration.test_zk_coordinator import cluster, expire, rt  # noqa: F401

CRED = make_credential("SCRAM-SHA-256", "alice-secret", salt=b"0123456789abcdef")


def _zjson(client, path):
    return json.loads(client.get(path)[0])


def _changes(client, root):
    return [client.get(f"{root}/{c}")[0] for c in sorted(client.get_children(root))]


def test_scram_credentials_shared_in_kafkas_layout(rt, cluster, zk):  # noqa: F811
    one, two = cluster(1, 2)
    one.call("alter_scram_credentials", [("alice", "SCRAM-SHA-256", CRED)])
    body = _zjson(zk, "/config/users/alice")
    assert body == {
        "version": 1,
        "config": {"SCRAM-SHA-256": e.scram_to_string(CRED)},
    }
    text = body["config"]["SCRAM-SHA-256"]
    assert text.startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,stored_key=")
    assert text.endswith(",iterations=4096") and ",server_key=" in text
    assert json.loads(_changes(zk, e.CONFIG_CHANGES)[-1]) == {
        "version": 2,
        "entity_path": "users/alice",
    }
    rt.wait(lambda: two.co.scram_credentials().get("alice", {}).get("SCRAM-SHA-256") == CRED)
    # A name Kafka sanitizes, and a deletion.
    one.call("alter_scram_credentials", [("bob smith", "SCRAM-SHA-512", CRED)])
    assert zk.exists("/config/users/bob%20smith")
    rt.wait(lambda: "bob smith" in two.co.scram_credentials())
    two.call("alter_scram_credentials", (), [("alice", "SCRAM-SHA-256")])
    rt.wait(lambda: "alice" not in one.co.scram_credentials())
    assert _zjson(zk, "/config/users/alice")["config"] == {}


def test_credentials_written_by_kafka_tooling_are_read(rt, cluster, zk):  # noqa: F811
    """What ``kafka-configs --zookeeper --add-config SCRAM-SHA-256=...`` writes."""
    (one,) = cluster(1)
    zk.create(
        "/config/users/carol",
        e.config_body({"SCRAM-SHA-256": e.scram_to_string(CRED), "producer_byte_rate": "1024"}),
    )
    zk.create("/config/changes/config_change_", e.change_body("users/carol"), sequence=True)
    rt.wait(lambda: one.co.scram_credentials().get("carol", {}).get("SCRAM-SHA-256") == CRED)
    assert one.co.client_quotas()[(("user", "carol"),)] == {"producer_byte_rate": 1024.0}


def test_client_quotas_and_broker_configs_shared(rt, cluster, zk):  # noqa: F811
    one, two = cluster(1, 2)
    one.call("alter_scram_credentials", [("alice", "SCRAM-SHA-256", CRED)])
    changes = {
        (("user", "alice"),): {"producer_byte_rate": 2048.0},
        (("client-id", "app"), ("user", "alice")): {"consumer_byte_rate": 4096.0},
        (("client-id", None),): {"request_percentage": 12.5},
    }
    one.call("alter_client_quotas", changes)
    user = _zjson(zk, "/config/users/alice")["config"]
    # The user's quotas share the znode with its credential, as in Kafka.
    assert user == {"SCRAM-SHA-256": e.scram_to_string(CRED), "producer_byte_rate": "2048"}
    assert _zjson(zk, "/config/users/alice/clients/app") == {
        "version": 1,
        "config": {"consumer_byte_rate": "4096"},
    }
    assert _zjson(zk, "/config/clients/<default>")["config"] == {"request_percentage": "12.5"}
    rt.wait(lambda: two.co.client_quotas() == changes)
    assert two.events_of("client_quotas")[-1] == changes
    # Removing the user's quota keeps its credential.
    one.call("alter_client_quotas", {(("user", "alice"),): {}})
    rt.wait(lambda: (("user", "alice"),) not in two.co.client_quotas())
    assert "alice" in two.co.scram_credentials()

    one.call("alter_broker_configs", {"log.retention.ms": "1000"}, "")
    two.call("alter_broker_configs", {"log.segment.bytes": "2000000"})
    assert _zjson(zk, "/config/brokers/<default>")["config"] == {"log.retention.ms": "1000"}
    assert _zjson(zk, "/config/brokers/2")["config"] == {"log.segment.bytes": "2000000"}
    rt.wait(lambda: one.co.broker_configs() == {"log.retention.ms": "1000"})
    rt.wait(lambda: len(two.co.broker_configs()) == 2)
    assert one.events_of("broker_configs")[-1] == {"log.retention.ms": "1000"}
    assert [json.loads(c)["entity_path"] for c in _changes(zk, e.CONFIG_CHANGES)][-2:] == [
        "brokers/<default>",
        "brokers/2",
    ]


def test_acls_shared_in_kafkas_layout(rt, cluster, zk, tmp_path):  # noqa: F811
    one, two = cluster(1, 2)
    read_a = AclBinding(2, "a", 3, "User:alice", "*", 3, 3)
    deny_b = AclBinding(2, "b-", 4, "User:*", "*", 2, 2)
    group = AclBinding(3, "g", 3, "User:alice", "10.0.0.1", 8, 3)
    one.call("alter_acls", [read_a, deny_b, group])
    assert _zjson(zk, "/kafka-acl/Topic/a") == {
        "version": 1,
        "acls": [
            {
                "principal": "User:alice",
                "permissionType": "Allow",
                "operation": "Read",
                "host": "*",
            }
        ],
    }
    assert _zjson(zk, "/kafka-acl-extended/prefixed/Topic/b-")["acls"] == [
        {"principal": "User:*", "permissionType": "Deny", "operation": "All", "host": "*"}
    ]
    assert _zjson(zk, "/kafka-acl/Group/g")["acls"][0]["operation"] == "Describe"
    assert sorted(_changes(zk, e.ACL_CHANGES)) == [b"GROUP:g", b"TOPIC:a"]
    assert json.loads(_changes(zk, e.ACL_EXTENDED_CHANGES)[0]) == {
        "version": 1,
        "resourceType": "TOPIC",
        "name": "b-",
        "patternType": "PREFIXED",
    }
    rt.wait(lambda: set(two.co.acl_bindings()) == {read_a, deny_b, group})

    # The authorizer on broker 2 decides from broker 1's ACLs.
    config = two.config.replace(super_users="", allow_everyone_if_no_acl_found=False)
    authz = AclAuthorizer(config, two.co)
    assert rt.call(authz.authorize, "User:alice", "1.2.3.4", 3, 2, "a")
    assert not rt.call(authz.authorize, "User:alice", "1.2.3.4", 4, 2, "a")
    assert not rt.call(authz.authorize, "User:alice", "1.2.3.4", 3, 2, "b-1")
    # Deleting the last ACL of a resource deletes its znode, as Kafka does.
    one.call("alter_acls", (), [read_a])
    assert not zk.exists("/kafka-acl/Topic/a")
    rt.wait(lambda: read_a not in two.co.acl_bindings())
    assert not rt.call(authz.authorize, "User:alice", "1.2.3.4", 3, 2, "a")


def test_concurrent_acl_updates_both_land(rt, cluster, zk):  # noqa: F811
    """Versioned conditional updates: brokers adding to one resource at once lose nothing."""
    one, two = cluster(1, 2)
    mine = [AclBinding(2, "t", 3, f"User:u{i}", "*", 3, 3) for i in range(8)]
    theirs = [AclBinding(2, "t", 3, f"User:v{i}", "*", 4, 3) for i in range(8)]
    errors = []

    def add(node, bindings):
        try:
            for b in bindings:
                node.call("alter_acls", [b])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=a) for a in ((one, mine), (two, theirs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    stored = e.acls_from_body(zk.get("/kafka-acl/Topic/t")[0])
    assert len(stored) == 16
    assert zk.get("/kafka-acl/Topic/t")[1].version == 15
    rt.wait(lambda: set(one.co.acl_bindings()) == set(two.co.acl_bindings()) == set(mine + theirs))


def test_credentials_from_the_data_dir_are_imported_once(rt, cluster, zk, tmp_path):  # noqa: F811
    """``pluglog users add --data-dir`` before the first start reaches every broker."""
    from pluglog.security.credentials import FileCredentialStore

    store = FileCredentialStore(str(tmp_path / "broker-1"))
    store.alter_scram_credentials([("dave", "SCRAM-SHA-512", CRED)])
    one, two = cluster(1, 2)
    assert "SCRAM-SHA-512" in _zjson(zk, "/config/users/dave")["config"]
    rt.wait(lambda: two.co.scram_credentials().get("dave", {}).get("SCRAM-SHA-512") == CRED)
    # Renamed: deleting the user through the cluster is not undone by a restart.
    assert not (tmp_path / "broker-1" / "scram-credentials.json").exists()
    assert (tmp_path / "broker-1" / "scram-credentials.json.imported").exists()
    two.call("alter_scram_credentials", (), [("dave", "SCRAM-SHA-512")])
    one.stop()
    (again,) = cluster(1, data_dir=str(tmp_path / "broker-1"))
    assert "dave" not in again.co.scram_credentials() and again.co.scram_credentials() == {}


def test_changes_made_while_a_session_was_lost_are_seen(rt, cluster, zk, zk_connect):  # noqa: F811
    """A broker whose session expired re-reads everything on restore: what changed
    meanwhile (and whose notification it never saw) is not missed."""
    one, two = cluster(1, 2)
    # Hold broker 2's ZooKeeper worker, so its session restore runs only after
    # the writes below: their notifications are then older than its new
    # watches, and only the full read on restore can bring them.
    gate = threading.Event()
    two.co.io.post(gate.wait, 30)
    expire(zk_connect, two)
    rt.wait(lambda: ("session", "lost") in two.events)
    one.call("alter_scram_credentials", [("late", "SCRAM-SHA-256", CRED)])
    one.call("alter_acls", [AclBinding(2, "late", 3, "User:late", "*", 3, 3)])
    one.call("alter_client_quotas", {(("user", "late"),): {"producer_byte_rate": 10.0}})
    assert "late" not in two.co.scram_credentials()
    gate.set()
    rt.wait(lambda: ("session", "restored") in two.events)
    rt.wait(lambda: "late" in two.co.scram_credentials())
    assert [b.resource_name for b in two.co.acl_bindings()] == ["late"]
    assert two.co.client_quotas() == {(("user", "late"),): {"producer_byte_rate": 10.0}}
    # And it follows new notifications again afterwards.
    one.call("alter_scram_credentials", (), [("late", "SCRAM-SHA-256")])
    rt.wait(lambda: "late" not in two.co.scram_credentials())
