"""Kafka's ZooKeeper layout for entity configs and ACLs: paths and znode bodies.

Pure functions (no kazoo, no reactor), so tests can check them byte for byte
against what Kafka writes:

* entity configs (``kafka.zk.ConfigEntityZNode``): ``/config/<type>/<name>``
  with ``{"version":1,"config":{...}}`` for ``users``, ``clients``,
  ``users/<u>/clients/<c>`` and ``brokers``; names are Kafka's
  ``Sanitizer.sanitize`` (URL encoding, ``*`` as ``%2A``, space as
  ``%20``) and the default entity is ``<default>``. A change is announced by
  a sequential ``/config/changes/config_change_<seq>`` holding
  ``{"version":2,"entity_path":"users/alice"}``;
* SCRAM credentials (``ScramCredentialUtils``) live in the user's config map
  under the mechanism name: ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=N``;
* ACLs (``kafka.zk.ZkAclStore``): ``/kafka-acl/<Type>/<name>`` for LITERAL,
  ``/kafka-acl-extended/prefixed/<Type>/<name>`` for PREFIXED, each
  ``{"version":1,"acls":[{"principal","permissionType","operation","host"}]}``
  with Kafka's PascalCase names; a change is a sequential
  ``acl_changes_<seq>`` under ``/kafka-acl-changes`` (``TOPIC:name``) or
  ``/kafka-acl-extended-changes`` (JSON ``ExtendedAclChangeEvent``).
"""

import base64
import json

from pluglog.security.credentials import ScramCredential

CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DEFAULT = "<default>"
ENTITY_TYPES = ("users", "clients", "brokers")

ACL_ROOT = "/kafka-acl"
ACL_PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
ACL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"

#: Paths every broker makes sure exist (Kafka's ConfigType.all and ACL roots).
PATHS = (
    "/config/users",
    "/config/clients",
    "/config/brokers",
    ACL_ROOT,
    ACL_PREFIXED_ROOT,
    ACL_CHANGES,
    ACL_EXTENDED_CHANGES,
)

#: Kafka's notification purge age (ZkNodeChangeNotificationListener).
CHANGE_EXPIRATION_MS = 15 * 60 * 1000

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def sanitize(name):
    """Kafka's ``Sanitizer.sanitize``: Java URLEncoder, then ``*``/space as %2A/%20."""
    out = []
    for ch in name:
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def desanitize(name):
    from urllib.parse import unquote_plus

    return unquote_plus(name)


def entity_name(name):
    """A quota entity name (None = the default entity) as it appears in a path."""
    return DEFAULT if name is None else sanitize(name)


def entity_path(entity):
    """A pluglog quota entity (sorted ``((type, name), ...)``) -> ``users/a/clients/b``."""
    names = dict(entity)
    if "user" in names and "client-id" in names:
        return f"users/{entity_name(names['user'])}/clients/{entity_name(names['client-id'])}"
    if "user" in names:
        return f"users/{entity_name(names['user'])}"
    return f"clients/{entity_name(names['client-id'])}"


def quota_entity(path):
    """``users/a/clients/b`` -> a pluglog quota entity; None for other paths."""

    def name(part):
        return None if part == DEFAULT else desanitize(part)

    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "users":
        return (("user", name(parts[1])),)
    if len(parts) == 2 and parts[0] == "clients":
        return (("client-id", name(parts[1])),)
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return tuple(sorted((("user", name(parts[1])), ("client-id", name(parts[3])))))
    return None


def config_body(config):
    return json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()


def config_from_body(raw):
    """A config znode's map ({} for an empty or config-less znode)."""
    if not raw:
        return {}
    data = json.loads(raw.decode())
    return {k: str(v) for k, v in ((data or {}).get("config") or {}).items()}


def change_body(path):
    return json.dumps({"version": 2, "entity_path": path}, separators=(",", ":")).encode()


def change_entity_path(raw):
    """The entity path a config change notification names (versions 1 and 2)."""
    data = json.loads(raw.decode())
    if data.get("version") == 1:
        return f"{data['entity_type']}/{data['entity_name']}"
    return data["entity_path"]


def sequence(child):
    """The sequence number of a sequential znode's name."""
    return int(child[-10:])


# -- SCRAM -------------------------------------------------------------------


def scram_to_string(credential):
    enc = base64.b64encode
    return (
        f"salt={enc(credential.salt).decode()},stored_key={enc(credential.stored_key).decode()},"
        f"server_key={enc(credential.server_key).decode()},iterations={credential.iterations}"
    )


def scram_from_string(text):
    fields = dict(item.split("=", 1) for item in text.split(","))
    dec = base64.b64decode
    return ScramCredential(
        dec(fields["salt"]),
        dec(fields["stored_key"]),
        dec(fields["server_key"]),
        int(fields["iterations"]),
    )


# -- ACLs --------------------------------------------------------------------

RESOURCE_TYPE_NAMES = {
    2: "Topic",
    3: "Group",
    4: "Cluster",
    5: "TransactionalId",
    6: "DelegationToken",
    7: "User",
}
RESOURCE_TYPE_CODES = {v: k for k, v in RESOURCE_TYPE_NAMES.items()}
OPERATION_NAMES = {
    2: "All",
    3: "Read",
    4: "Write",
    5: "Create",
    6: "Delete",
    7: "Alter",
    8: "Describe",
    9: "ClusterAction",
    10: "DescribeConfigs",
    11: "AlterConfigs",
    12: "IdempotentWrite",
}
OPERATION_CODES = {v: k for k, v in OPERATION_NAMES.items()}
PERMISSION_NAMES = {2: "Deny", 3: "Allow"}
PERMISSION_CODES = {v: k for k, v in PERMISSION_NAMES.items()}
LITERAL, PREFIXED = 3, 4


def acl_root(pattern_type):
    return ACL_ROOT if pattern_type == LITERAL else ACL_PREFIXED_ROOT


def acl_path(resource_type, name, pattern_type):
    return f"{acl_root(pattern_type)}/{RESOURCE_TYPE_NAMES[resource_type]}/{name}"


def acls_body(entries):
    """``[(principal, host, operation, permission)]`` -> Kafka's ResourceZNode JSON."""
    acls = [
        {
            "principal": principal,
            "permissionType": PERMISSION_NAMES[permission],
            "operation": OPERATION_NAMES[operation],
            "host": host,
        }
        for principal, host, operation, permission in sorted(entries)
    ]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def acls_from_body(raw):
    """Kafka's ResourceZNode JSON -> ``{(principal, host, operation, permission)}``."""
    if not raw:
        return set()
    data = json.loads(raw.decode()) or {}
    return {
        (
            a["principal"],
            a["host"],
            OPERATION_CODES[a["operation"]],
            PERMISSION_CODES[a["permissionType"]],
        )
        for a in data.get("acls") or ()
    }


def acl_change(resource_type, name, pattern_type):
    """``(change path prefix, body)`` announcing a change of one resource's ACLs."""
    kafka_type = RESOURCE_TYPE_NAMES[resource_type]
    if pattern_type == LITERAL:
        # ResourceType.toString: the enum constant (TOPIC), then ':' and the name.
        body = f"{_enum(kafka_type)}:{name}".encode()
        return f"{ACL_CHANGES}/{ACL_CHANGE_PREFIX}", body
    event = {
        "version": 1,
        "resourceType": _enum(kafka_type),
        "name": name,
        "patternType": "PREFIXED",
    }
    return f"{ACL_EXTENDED_CHANGES}/{ACL_CHANGE_PREFIX}", json.dumps(
        event, separators=(",", ":")
    ).encode()


def acl_change_resource(root, raw):
    """A change notification -> ``(resource type, name, pattern type)``."""
    if root == ACL_CHANGES:
        kind, _, name = raw.decode().partition(":")
        return _code(kind), name, LITERAL
    event = json.loads(raw.decode())
    pattern = LITERAL if event["patternType"].upper() == "LITERAL" else PREFIXED
    return _code(event["resourceType"]), event["name"], pattern


def _enum(pascal):
    """``TransactionalId`` -> ``TRANSACTIONAL_ID`` (Kafka's enum constant)."""
    out = []
    for i, ch in enumerate(pascal):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.upper())
    return "".join(out)


def _code(kind):
    """A resource type name in either spelling (``TOPIC`` / ``Topic``) -> its code."""
    flat = kind.replace("_", "").lower()
    for code, name in RESOURCE_TYPE_NAMES.items():
        if name.lower() == flat:
            return code
    raise ValueError(f"unknown resource type {kind!r}")
