"""Kafka's ACL model and the ``acl`` IAuthorizer provider (AclAuthorizer).

A binding is (resource type, resource name, pattern type LITERAL/PREFIXED,
principal ``User:name`` or ``User:*``, host or ``*``, operation, ALLOW/DENY).
Rules as Kafka's AclAuthorizer: super users pass; any matching DENY wins;
DESCRIBE is implied by READ, WRITE, DELETE and ALTER, DESCRIBE_CONFIGS by
ALTER_CONFIGS, and ALL covers every operation; a resource with no ACL at all
is allowed only with ``allow.everyone.if.no.acl.found``. Bindings persist in
``<data dir>/acls.json`` (atomic writes), or in the coordinator when it
offers ``acl_bindings()`` / ``acl_version()`` / ``alter_acls(additions,
removals)`` (the ZooKeeper coordinator keeps them under ``/kafka-acl`` as
Kafka does); then create_acls / delete_acls answer Deferreds.
"""

import dataclasses
import json
import os

from zope.interface import implementer

from pluglog.fileutil import atomic_write
from pluglog.interfaces import IAuthorizer

# Kafka's wire codes.
RESOURCE_TYPES = {
    "ANY": 1,
    "TOPIC": 2,
    "GROUP": 3,
    "CLUSTER": 4,
    "TRANSACTIONAL_ID": 5,
    "DELEGATION_TOKEN": 6,
    "USER": 7,
}
PATTERN_TYPES = {"ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
OPERATIONS = {
    "ANY": 1,
    "ALL": 2,
    "READ": 3,
    "WRITE": 4,
    "CREATE": 5,
    "DELETE": 6,
    "ALTER": 7,
    "DESCRIBE": 8,
    "CLUSTER_ACTION": 9,
    "DESCRIBE_CONFIGS": 10,
    "ALTER_CONFIGS": 11,
    "IDEMPOTENT_WRITE": 12,
}
PERMISSIONS = {"ANY": 1, "DENY": 2, "ALLOW": 3}
TOPIC, GROUP, CLUSTER = 2, 3, 4
LITERAL, PREFIXED = 3, 4
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
DESCRIBE_CONFIGS, ALTER_CONFIGS = 10, 11
DENY, ALLOW = 2, 3
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
#: operations that imply another (Kafka's AclAuthorizer)
_IMPLIED = {DESCRIBE: (READ, WRITE, DELETE, ALTER), DESCRIBE_CONFIGS: (ALTER_CONFIGS,)}
#: operations each resource type has (KIP-430 authorized operations)
RESOURCE_OPERATIONS = {
    TOPIC: (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    GROUP: (READ, DELETE, DESCRIBE),
    CLUSTER: (CREATE, ALTER, DESCRIBE, 9, DESCRIBE_CONFIGS, ALTER_CONFIGS, 12),
}
FILE_NAME = "acls.json"


@dataclasses.dataclass(frozen=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


def _valid(binding):
    """An error message for a binding CreateAcls must refuse, else None."""
    if binding.resource_type not in (2, 3, 4, 5, 6, 7):
        return f"invalid resource type {binding.resource_type}"
    if binding.pattern_type not in (LITERAL, PREFIXED):
        return f"invalid pattern type {binding.pattern_type}"
    if binding.operation not in range(2, 13):
        return f"invalid operation {binding.operation}"
    if binding.permission_type not in (DENY, ALLOW):
        return f"invalid permission type {binding.permission_type}"
    if not binding.principal.startswith("User:"):
        return f"principal {binding.principal!r} is not User:<name>"
    if not binding.resource_name:
        return "empty resource name"
    return None


def matches_filter(binding, flt):
    """Kafka's AclBindingFilter semantics (ANY, MATCH, null = any)."""
    if flt.resource_type != 1 and flt.resource_type != binding.resource_type:
        return False
    if flt.operation != 1 and flt.operation != binding.operation:
        return False
    if flt.permission_type != 1 and flt.permission_type != binding.permission_type:
        return False
    if flt.principal is not None and flt.principal != binding.principal:
        return False
    if flt.host is not None and flt.host != binding.host:
        return False
    name = flt.resource_name
    if flt.pattern_type == 2:  # MATCH: bindings that would apply to this name
        return name is None or _applies(binding, name)
    if flt.pattern_type not in (1, binding.pattern_type):
        return False
    return name is None or name == binding.resource_name


def _applies(binding, name):
    if binding.pattern_type == PREFIXED:
        return name.startswith(binding.resource_name)
    return binding.resource_name in (name, WILDCARD)


@implementer(IAuthorizer)
class AclAuthorizer:
    """The built-in authorizer (see the module docstring)."""

    def __init__(self, config, store=None):
        from pluglog.security import parse_super_users

        self.super_users = parse_super_users(config.super_users)
        self.allow_if_no_acl = config.allow_everyone_if_no_acl_found
        self.path = os.path.join(config.data_dir, FILE_NAME)
        #: the coordinator's ACL store, or None for the data dir's file
        self.store = store if _is_store(store) else None
        self._bindings = [] if self.store is not None else self._load()
        self._version = 0
        self._cached = (None, [])

    def use_store(self, store):
        """Keep the ACLs in ``store`` (a coordinator offering ``acl_bindings``,
        ``acl_version`` and ``alter_acls``) instead of ``acls.json``."""
        if _is_store(store):
            self.store = store
            self._bindings = []
            self._cached = (None, [])

    @property
    def version(self):
        """Bumped on every change: connections drop their cached decisions."""
        return self.store.acl_version() if self.store is not None else self._version

    @property
    def bindings(self):
        if self.store is None:
            return self._bindings
        version = self.store.acl_version()
        if self._cached[0] != version:
            self._cached = (version, self.store.acl_bindings())
        return self._cached[1]

    def _load(self):
        try:
            with open(self.path, encoding="utf-8") as handle:
                return [AclBinding(**item) for item in json.load(handle)]
        except FileNotFoundError:
            return []

    def _save(self):
        self._version += 1
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        data = [dataclasses.asdict(b) for b in self._bindings]
        atomic_write(self.path, json.dumps(data, indent=1).encode())

    def authorize(self, principal, host, operation, resource_type, resource_name):
        if principal in self.super_users:
            return True
        relevant = [
            b
            for b in self.bindings
            if b.resource_type == resource_type and _applies(b, resource_name)
        ]
        if not relevant:
            return self.allow_if_no_acl
        mine = [
            b
            for b in relevant
            if b.principal in (principal, "User:*") and b.host in (host, WILDCARD)
        ]
        ops = (operation, ALL)
        if any(b.permission_type == DENY and b.operation in ops for b in mine):
            return False
        allowing = ops + _IMPLIED.get(operation, ())
        return any(b.permission_type == ALLOW and b.operation in allowing for b in mine)

    def authorize_by_resource_type(self, principal, host, operation, resource_type):
        """True if ``operation`` is allowed on at least one resource of the
        type (Kafka's ``Authorizer.authorizeByResourceType``): an ALLOW whose
        pattern no DENY covers (a DENY on ``*`` covers everything)."""
        if principal in self.super_users:
            return True
        typed = [b for b in self.bindings if b.resource_type == resource_type]
        if not typed:
            return self.allow_if_no_acl
        mine = [
            b
            for b in typed
            if b.principal in (principal, "User:*")
            and b.host in (host, WILDCARD)
            and b.operation in (operation, ALL)
        ]
        denies = [b for b in mine if b.permission_type == DENY]

        def covered(allow):
            for deny in denies:
                if deny.pattern_type == LITERAL and deny.resource_name == WILDCARD:
                    return True
                if deny.pattern_type == PREFIXED and allow.resource_name.startswith(
                    deny.resource_name
                ):
                    return True
                if deny.pattern_type == allow.pattern_type == LITERAL and (
                    deny.resource_name == allow.resource_name
                ):
                    return True
            return False

        return any(b.permission_type == ALLOW and not covered(b) for b in mine)

    def create_acls(self, bindings):
        """A list of error messages (None: created), or a Deferred of it."""
        results, added = [], []
        current = set(self.bindings)
        for binding in bindings:
            error = _valid(binding)
            if error is None and binding not in current:
                current.add(binding)
                added.append(binding)
            results.append(error)
        if self.store is not None:
            return self.store.alter_acls(added, ()).addCallback(lambda _: results)
        self._bindings.extend(added)
        self._save()
        return results

    def describe_acls(self, binding_filter):
        return [b for b in self.bindings if matches_filter(b, binding_filter)]

    def delete_acls(self, filters):
        """The bindings each filter deleted, or a Deferred of them."""
        out, gone_all = [], set()
        for flt in filters:
            gone = [b for b in self.bindings if matches_filter(b, flt) and b not in gone_all]
            gone_all.update(gone)
            out.append(gone)
        if self.store is not None:
            return self.store.alter_acls((), sorted(gone_all, key=repr)).addCallback(lambda _: out)
        self._bindings = [b for b in self._bindings if b not in gone_all]
        self._save()
        return out


def _is_store(store):
    return all(hasattr(store, name) for name in ("acl_bindings", "acl_version", "alter_acls"))


def make_acl_authorizer(config, reactor):
    return AclAuthorizer(config)
