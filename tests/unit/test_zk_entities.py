"""Kafka's ZooKeeper bodies for entity configs, SCRAM credentials and ACLs
(pluglog.coordination.zkentities), and the ACL authorizer over a coordinator's
store (an in-memory twin of the ZooKeeper one, answering with Deferreds)."""

import json

from twisted.internet import defer

from pluglog.config import BrokerConfig
from pluglog.coordination import zkentities as e
from pluglog.security.acls import AclAuthorizer, AclBinding
from pluglog.security.credentials import make_credential


def test_entity_names_are_kafkas_sanitized_form():
    assert e.sanitize("alice") == "alice"
    assert e.sanitize("bob smith*") == "bob%20smith%2A"
    assert e.sanitize("CN=x,O=y~") == "CN%3Dx%2CO%3Dy%7E"
    assert e.sanitize("jörg") == "j%C3%B6rg"
    for name in ("bob smith*", "CN=x,O=y~", "jörg", "a+b/c", "<default>"):
        assert e.desanitize(e.sanitize(name)) == name
    entity = (("client-id", None), ("user", "a b"))
    assert e.entity_path(entity) == "users/a%20b/clients/<default>"
    assert e.quota_entity("users/a%20b/clients/<default>") == entity
    assert e.entity_path((("client-id", "c/1"),)) == "clients/c%2F1"
    assert e.quota_entity("clients/c%2F1") == (("client-id", "c/1"),)
    assert e.quota_entity("users/<default>") == (("user", None),)
    assert e.quota_entity("brokers/1") is None


def test_config_and_change_bodies():
    assert e.config_body({"a": "1"}) == b'{"version":1,"config":{"a":"1"}}'
    assert e.config_from_body(b"") == {} and e.config_from_body(b'{"version":1}') == {}
    assert e.change_body("users/alice") == b'{"version":2,"entity_path":"users/alice"}'
    assert e.change_entity_path(e.change_body("clients/c")) == "clients/c"
    old = b'{"version":1,"entity_type":"users","entity_name":"bob"}'
    assert e.change_entity_path(old) == "users/bob"
    assert e.sequence("config_change_0000000042") == 42


def test_scram_string_round_trip():
    cred = make_credential("SCRAM-SHA-512", "pw", iterations=8192, salt=b"salty-salt-salt")
    text = e.scram_to_string(cred)
    assert text.startswith("salt=c2FsdHktc2FsdC1zYWx0,stored_key=") and text.endswith(
        ",iterations=8192"
    )
    assert e.scram_from_string(text) == cred


def test_acl_bodies_and_changes():
    entries = {("User:bob", "*", 12, 2), ("User:alice", "10.0.0.1", 9, 3)}
    body = json.loads(e.acls_body(entries))
    assert body == {
        "version": 1,
        "acls": [
            {
                "principal": "User:alice",
                "permissionType": "Allow",
                "operation": "ClusterAction",
                "host": "10.0.0.1",
            },
            {
                "principal": "User:bob",
                "permissionType": "Deny",
                "operation": "IdempotentWrite",
                "host": "*",
            },
        ],
    }
    assert e.acls_from_body(e.acls_body(entries)) == entries
    assert e.acl_path(5, "tx", e.LITERAL) == "/kafka-acl/TransactionalId/tx"
    assert e.acl_path(3, "g-", e.PREFIXED) == "/kafka-acl-extended/prefixed/Group/g-"
    root, raw = e.acl_change(5, "tx:1", e.LITERAL)
    assert (root, raw) == ("/kafka-acl-changes/acl_changes_", b"TRANSACTIONAL_ID:tx:1")
    assert e.acl_change_resource(e.ACL_CHANGES, raw) == (5, "tx:1", e.LITERAL)
    root, raw = e.acl_change(4, "kafka-cluster", e.PREFIXED)
    assert root == "/kafka-acl-extended-changes/acl_changes_"
    assert e.acl_change_resource(e.ACL_EXTENDED_CHANGES, raw) == (4, "kafka-cluster", 4)
    # Kafka's older brokers wrote the PascalCase name; both are read.
    assert e.acl_change_resource(e.ACL_CHANGES, b"Topic:t") == (2, "t", e.LITERAL)


class MemoryAclStore:
    """The coordinator's ACL interface, in memory, answering with Deferreds."""

    def __init__(self):
        self.stored, self.version, self.calls = set(), 0, []

    def acl_bindings(self):
        return sorted(self.stored, key=repr)

    def acl_version(self):
        return self.version

    def alter_acls(self, additions=(), removals=()):
        self.calls.append((list(additions), list(removals)))
        self.stored = (self.stored | set(additions)) - set(removals)
        self.version += 1
        return defer.succeed(None)


def _results(d):
    out = []
    d.addCallback(out.append)
    return out[0]


def test_authorizer_keeps_acls_in_the_coordinators_store(tmp_path):
    store = MemoryAclStore()
    config = BrokerConfig(data_dir=str(tmp_path))
    authz = AclAuthorizer(config, store)
    read = AclBinding(2, "a", 3, "User:alice", "*", 3, 3)
    bad = AclBinding(2, "a", 9, "User:alice", "*", 3, 3)
    assert _results(authz.create_acls([read, bad, read])) == [None, "invalid pattern type 9", None]
    assert store.calls == [([read], [])]  # once, and nothing invalid
    assert authz.version == 1 and authz.bindings == [read]
    assert authz.authorize("User:alice", "h", 3, 2, "a")
    assert not authz.authorize("User:alice", "h", 4, 2, "a")
    assert not (tmp_path / "acls.json").exists()
    # Another broker's change shows through the store.
    store.stored.add(AclBinding(2, "a", 3, "User:bob", "*", 3, 3))
    store.version += 1
    assert authz.authorize("User:bob", "h", 3, 2, "a")

    class Filter:
        resource_type, resource_name, pattern_type = 2, "a", 3
        principal, host, operation, permission_type = "User:alice", None, 1, 1

    assert _results(authz.delete_acls([Filter(), Filter()])) == [[read], []]
    assert store.calls[-1] == ([], [read])
    assert not authz.authorize("User:alice", "h", 3, 2, "a")
