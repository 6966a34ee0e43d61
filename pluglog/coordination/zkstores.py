"""Users, ACLs, client quotas and dynamic broker configs of the ``zookeeper`` coordinator.

Every broker of a ZooKeeper cluster shares them, kept where Kafka keeps them
(layout and bodies in :mod:`pluglog.coordination.zkentities`):

* entity configs under ``/config/{users,clients,brokers}``: SCRAM
  credentials and user quotas share the user's znode, as in Kafka;
* ACLs under ``/kafka-acl`` and ``/kafka-acl-extended/prefixed``.

A write is a versioned read-modify-write of the one znode (Kafka's
``updateResourceAcls`` / ``changeEntityConfig``), committed in one ZooKeeper
transaction with its sequential change notification, and retried when another
broker changed the znode in between. Every broker watches the notification
directories and re-reads only the entities a new notification names; a full
read happens at start and after a session or connection comes back, so a
missed notification never leaves a broker behind. Notifications older than
Kafka's 15 minutes are purged. The cache lives on the reactor thread;
listeners get ``client_quotas`` and ``broker_configs`` events.
"""

import time

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from twisted.internet import defer
from twisted.logger import Logger

from pluglog.coordination import zkentities as e
from pluglog.coordination.state import QUOTA_KEYS
from pluglog.security.acls import AclBinding
from pluglog.security.credentials import SCRAM_MECHANISMS

log = Logger()

_ATTEMPTS = 50


class StoresMixin:
    """Methods of :class:`pluglog.coordination.zookeeper.ZooKeeperCoordinator`."""

    def _init_stores(self):
        #: reactor side: {entity path: {key: str}} and {(type, name, pattern): set}
        self._entities = {}
        self._acls = {}
        self._acl_version = 0
        #: scram_credentials() parsed once per change (it runs on every login)
        self._scram_cache = None
        # io side: the last notification handled per change directory
        self._last_change = {}

    # -- reading (io thread) -----------------------------------------------------

    def refresh_stores(self):
        """Read every entity config and ACL (start, session restore, reconnect)."""
        self.client.ensure_path(e.CONFIG_CHANGES)
        for path in e.PATHS:
            self.client.ensure_path(path)
        # Mark the notifications seen so far first: a change landing during the
        # full read is then handled again (re-reading an entity is idempotent).
        for root in (e.CONFIG_CHANGES, e.ACL_CHANGES, e.ACL_EXTENDED_CHANGES):
            children = self.client.get_children(root)
            self._last_change[root] = max((e.sequence(c) for c in children), default=-1)
        entities = {}
        for etype in e.ENTITY_TYPES:
            for name in self.client.get_children(f"{e.CONFIG}/{etype}"):
                path = f"{etype}/{name}"
                entities[path] = self._read_entity(path)
                if etype == "users":
                    for client in self._children(f"{e.CONFIG}/{path}/clients"):
                        sub = f"{path}/clients/{client}"
                        entities[sub] = self._read_entity(sub)
        acls = {}
        for pattern in (e.LITERAL, e.PREFIXED):
            root = e.acl_root(pattern)
            for kind in self.client.get_children(root):
                rtype = e.RESOURCE_TYPE_CODES.get(kind)
                if rtype is None:
                    continue
                for name in self.client.get_children(f"{root}/{kind}"):
                    acls[(rtype, name, pattern)] = self._read_acls(rtype, name, pattern)[0]
        self.io.deliver(self._stores_loaded, entities, acls)
        for root in (e.CONFIG_CHANGES, e.ACL_CHANGES, e.ACL_EXTENDED_CHANGES):
            self._changes(root)

    def _children(self, path):
        try:
            return self.client.get_children(path)
        except NoNodeError:
            return []

    def _read_entity(self, path):
        try:
            raw, _ = self.client.get(f"{e.CONFIG}/{path}")
        except NoNodeError:
            return None
        return e.config_from_body(raw)

    def _read_acls(self, rtype, name, pattern):
        try:
            raw, stat = self.client.get(e.acl_path(rtype, name, pattern))
        except NoNodeError:
            return set(), None
        return e.acls_from_body(raw), stat.version

    def _changes(self, root):
        """Handle the notifications of ``root`` not seen yet; watch for more."""
        watch = self._watcher(("changes", root), self._changes, root)
        children = sorted(self.client.get_children(root, watch=watch), key=e.sequence)
        last = self._last_change.get(root, -1)
        entities, acls = {}, {}
        now_ms = time.time() * 1000
        for child in children:
            path = f"{root}/{child}"
            try:
                raw, stat = self.client.get(path)
            except NoNodeError:
                continue
            if e.sequence(child) > last:
                last = e.sequence(child)
                try:
                    if root == e.CONFIG_CHANGES:
                        entity = e.change_entity_path(raw)
                        if entity.split("/", 1)[0] in e.ENTITY_TYPES:
                            entities[entity] = self._read_entity(entity)
                    else:
                        key = e.acl_change_resource(root, raw)
                        acls[key] = self._read_acls(*key)[0]
                except (ValueError, KeyError) as exc:
                    self.io.deliver(log.warn, "ignored {path}: {exc}", path=path, exc=exc)
            if now_ms - stat.ctime > e.CHANGE_EXPIRATION_MS:
                try:
                    self.client.delete(path)
                except NoNodeError:
                    pass
        self._last_change[root] = last
        if entities or acls:
            self.io.deliver(self._stores_changed, entities, acls)

    # -- the cache (reactor thread) ----------------------------------------------

    def _stores_loaded(self, entities, acls):
        self._scram_cache = None
        self._entities = {p: c for p, c in entities.items() if c is not None}
        self._acls = {k: v for k, v in acls.items() if v}
        self._acl_version += 1
        self._notify("client_quotas", self.client_quotas())
        self._notify("broker_configs", self.broker_configs())

    def _stores_changed(self, entities, acls):
        old_quotas, old_brokers = self.client_quotas(), self.broker_configs()
        if entities:
            self._scram_cache = None
        for path, config in entities.items():
            if config is None:
                self._entities.pop(path, None)
            else:
                self._entities[path] = config
        for key, entries in acls.items():
            if entries:
                self._acls[key] = entries
            else:
                self._acls.pop(key, None)
        if acls:
            self._acl_version += 1
        if self.client_quotas() != old_quotas:
            self._notify("client_quotas", self.client_quotas())
        if self.broker_configs() != old_brokers:
            self._notify("broker_configs", self.broker_configs())

    # -- writing -----------------------------------------------------------------

    def _commit(self, path, body, version, change_prefix, change_body):
        """Set (or create, when ``version`` is None) ``path`` and add a change
        notification in one transaction; False when another writer got there first."""
        tx = self.client.transaction()
        if version is None:
            tx.create(path, body)
        else:
            tx.set_data(path, body, version=version)
        tx.create(change_prefix, change_body, sequence=True)
        results = tx.commit()
        failed = [r for r in results if isinstance(r, Exception)]
        if any(isinstance(r, (BadVersionError, NodeExistsError, NoNodeError)) for r in failed):
            return False
        if failed:
            raise failed[0]
        return True

    def _update_entity(self, path, update):
        """io thread: ``update(config) -> config`` applied to ``/config/<path>``."""
        full = f"{e.CONFIG}/{path}"
        parent = full.rsplit("/", 1)[0]
        self.client.ensure_path(parent)
        for _ in range(_ATTEMPTS):
            try:
                raw, stat = self.client.get(full)
                current, version = e.config_from_body(raw), stat.version
            except NoNodeError:
                current, version = {}, None
            new = update(dict(current))
            change = (f"{e.CONFIG_CHANGES}/{e.CONFIG_CHANGE_PREFIX}", e.change_body(path))
            if self._commit(full, e.config_body(new), version, *change):
                return new
        raise RuntimeError(f"{full}: too many concurrent changes")

    def _alter_entities(self, updates):
        """``{entity path: update}`` written on the io worker; the cache
        follows at once (the watch brings the same values again later)."""

        def write():
            return {path: self._update_entity(path, fn) for path, fn in updates.items()}

        d = self._submit_write(write)
        d.addCallback(lambda written: self._stores_changed(written, {}))
        return d

    # -- SCRAM credentials -------------------------------------------------------

    def _import_credentials(self):
        """io thread, at start: credentials ``pluglog users add --data-dir`` wrote
        into this broker's data dir go to ZooKeeper (they win: the file is the
        newer intent), and the file is renamed ``*.imported`` so a later
        deletion through the cluster is not undone by the next start."""
        import os

        from pluglog.security.credentials import FileCredentialStore

        store = FileCredentialStore(self.config.data_dir)
        users = store.scram_credentials()
        if not os.path.exists(store.path):
            return
        for user, creds in sorted(users.items()):
            values = {m: e.scram_to_string(c) for m, c in creds.items()}
            self._update_entity(f"users/{e.sanitize(user)}", lambda cfg, v=values: {**cfg, **v})
        os.replace(store.path, store.path + ".imported")
        self.io.deliver(
            log.info,
            "imported SCRAM credentials of {users} from {path} into ZooKeeper",
            users=", ".join(sorted(users)) or "no users",
            path=store.path,
        )

    def scram_credentials(self):
        """``{user: {mechanism: ScramCredential}}`` from ``/config/users/<user>``."""
        if self._scram_cache is None:
            self._scram_cache = self._parse_credentials()
        return self._scram_cache

    def _parse_credentials(self):
        out = {}
        for path, config in self._entities.items():
            parts = path.split("/")
            if len(parts) != 2 or parts[0] != "users" or parts[1] == e.DEFAULT:
                continue
            creds = {}
            for mechanism in SCRAM_MECHANISMS:
                if mechanism in config:
                    try:
                        creds[mechanism] = e.scram_from_string(config[mechanism])
                    except (ValueError, KeyError):
                        log.warn("ignored a malformed {m} credential in {p}", m=mechanism, p=path)
            if creds:
                out[e.desanitize(parts[1])] = creds
        return out

    def alter_scram_credentials(self, upsertions=(), deletions=()):
        """Apply ``[(user, mechanism, ScramCredential)]`` and ``[(user,
        mechanism)]`` in ZooKeeper; a Deferred. Quotas in the same znode stay."""
        by_user = {}
        for user, mechanism in deletions:
            by_user.setdefault(user, []).append((mechanism, None))
        for user, mechanism, credential in upsertions:
            by_user.setdefault(user, []).append((mechanism, e.scram_to_string(credential)))

        def updater(changes):
            def update(config):
                for mechanism, value in changes:
                    if value is None:
                        config.pop(mechanism, None)
                    else:
                        config[mechanism] = value
                return config

            return update

        updates = {f"users/{e.sanitize(u)}": updater(c) for u, c in by_user.items()}
        return self._alter_entities(updates) if updates else defer.succeed(None)

    # -- client quotas -----------------------------------------------------------

    def client_quotas(self):
        """``{entity: {key: float}}`` from the users/clients znodes."""
        out = {}
        for path, config in self._entities.items():
            entity = e.quota_entity(path)
            values = {}
            for key in QUOTA_KEYS:
                if key in config:
                    try:
                        values[key] = float(config[key])
                    except ValueError:
                        log.warn("ignored {key}={v!r} in {p}", key=key, v=config[key], p=path)
            if entity is not None and values:
                out[entity] = values
        return out

    def alter_client_quotas(self, changes):
        """Replace each entity's quota values (``{}`` removes them); a Deferred.
        Other keys of the znode (SCRAM credentials) stay."""

        def updater(values):
            def update(config):
                for key in QUOTA_KEYS:
                    config.pop(key, None)
                for key, value in values.items():
                    number = float(value)
                    config[key] = str(int(number)) if number.is_integer() else str(number)
                return config

            return update

        return self._alter_entities({e.entity_path(k): updater(v) for k, v in changes.items()})

    # -- dynamic broker configs --------------------------------------------------

    def broker_configs(self, name=None):
        """The overrides in effect here: ``<default>`` overlaid with this broker's
        own; with ``name`` ("" for the default, or a broker id) that entity's only."""
        default = self._entities.get(f"brokers/{e.DEFAULT}", {})
        own = self._entities.get(f"brokers/{self.broker_id}", {})
        if name is None:
            return {**default, **own}
        return dict(default if name == "" else self._entities.get(f"brokers/{name}", {}))

    def alter_broker_configs(self, configs, name=None):
        """Replace the overrides of ``/config/brokers/<name>`` (default: this
        broker's own; "" the cluster-wide ``<default>``); a Deferred."""
        entity = e.DEFAULT if name == "" else str(self.broker_id if name is None else name)
        values = {k: str(v) for k, v in configs.items()}
        return self._alter_entities({f"brokers/{entity}": lambda _config: dict(values)})

    # -- ACLs --------------------------------------------------------------------

    def acl_bindings(self):
        """Every ACL binding (AclBinding) in ZooKeeper, from the cache."""
        return [
            AclBinding(rtype, name, pattern, principal, host, operation, permission)
            for (rtype, name, pattern), entries in sorted(self._acls.items())
            for principal, host, operation, permission in sorted(entries)
        ]

    def acl_version(self):
        """Bumped on every ACL change this broker sees (decision caches key on it)."""
        return self._acl_version

    def alter_acls(self, additions=(), removals=()):
        """Add and remove AclBindings, one versioned update per resource; a Deferred."""
        per_resource = {}
        for b in additions:
            key = (b.resource_type, b.resource_name, b.pattern_type)
            per_resource.setdefault(key, ([], []))[0].append(_entry(b))
        for b in removals:
            key = (b.resource_type, b.resource_name, b.pattern_type)
            per_resource.setdefault(key, ([], []))[1].append(_entry(b))

        def write():
            return {key: self._update_acls(key, *ops) for key, ops in per_resource.items()}

        d = self._submit_write(write)
        d.addCallback(lambda written: self._stores_changed({}, written))
        return d

    def _update_acls(self, key, add, remove):
        path = e.acl_path(*key)
        self.client.ensure_path(path.rsplit("/", 1)[0])
        for _ in range(_ATTEMPTS):
            current, version = self._read_acls(*key)
            new = (current | set(add)) - set(remove)
            if new == current and version is not None:
                return new
            change = e.acl_change(*key)
            if not new:
                # Kafka deletes a resource's znode with its last ACL.
                if version is None:
                    return new
                tx = self.client.transaction()
                tx.delete(path, version=version)
                tx.create(change[0], change[1], sequence=True)
                if not any(isinstance(r, Exception) for r in tx.commit()):
                    return new
                continue
            if self._commit(path, e.acls_body(new), version, *change):
                return new
        raise RuntimeError(f"{path}: too many concurrent changes")


def _entry(binding):
    return (binding.principal, binding.host, binding.operation, binding.permission_type)
