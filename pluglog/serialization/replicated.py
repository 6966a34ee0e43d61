"""One broker's part in the cluster's schema registry: tail, lead, forward.

Confluent's "leader election via Kafka" model, adapted to a registry that
lives inside the brokers:

* **One writer.** The broker leading ``_schemas``-0 is the registry leader.
  Writes run there one at a time (a DeferredLock). Before each one the leader
  waits until its high watermark covers its whole log and applies it, so a
  new leader has seen every record an earlier leader wrote before it
  allocates an id (ids are ``max + 1`` over everything ever applied: never
  reused across leader changes). The write appends one batch with acks=all
  and is answered only once the HW passes it; a timeout, a lost leadership
  or too few in-sync replicas answer Confluent's 5000x errors instead.
* **Every broker reads locally.** :meth:`RegistryNode.catch_up` applies the
  records of the local replica below its HW (every ``poll`` seconds and
  before each write), on the leader and on followers alike, so no broker
  ever serves a record that is not committed, and a follower serves a write
  about one fetch round trip after it was acknowledged. A broker that hosts
  no replica (more than three brokers) forwards reads too.
* **Writes are forwarded over HTTP** to the leader's ``--http`` URL, which
  each broker registers next to its Kafka endpoint in ZooKeeper
  (``/brokers/ids/N`` ``http_url``). HTTP because that is Confluent's own
  model (followers forward to the leader's URL), the request and its answer
  are passed on byte for byte, and no new internal Kafka API is needed.
  A forwarded request is not forwarded again (leadership moved meanwhile:
  50003), so requests never loop.
"""

from twisted.internet import defer, task
from twisted.logger import Logger

from pluglog import errors
from pluglog.errors import KafkaError
from pluglog.serialization.registry import RegistryError, SchemaRegistry
from pluglog.serialization.store import DEFAULT_REPLICATION_FACTOR, SchemaStore

log = Logger()

SECTION = "schema_registry"
#: How often the local replica is tailed (reads on followers lag by this
#: plus one replica fetch).
POLL_S = 0.1
#: Default for kafkastore.timeout.ms: how long a write may wait for the
#: leader, the topic and the HW (Confluent's default of 500 ms is too short
#: for a loaded 2-core test machine).
DEFAULT_TIMEOUT_MS = 10_000


def store_error(message):
    return RegistryError(500, 50001, f"Error in the backend data store: {message}")


def timeout_error(message):
    return RegistryError(500, 50002, f"Operation timed out: {message}")


def forwarding_error(message):
    return RegistryError(500, 50003, f"Error forwarding the request to the leader: {message}")


def unknown_leader(message):
    return RegistryError(500, 50004, f"Unknown leader: {message}")


def section_settings(config):
    """``(replication factor, timeout in s)`` from the ``[schema_registry]``
    section's kafkastore.topic.replication.factor / kafkastore.timeout.ms."""
    section = config.plugin_section(SECTION)
    try:
        rf = int(section.get("kafkastore.topic.replication.factor", DEFAULT_REPLICATION_FACTOR))
        timeout_ms = int(section.get("kafkastore.timeout.ms", DEFAULT_TIMEOUT_MS))
    except ValueError as exc:
        raise errors.ConfigError(f"[{SECTION}] {exc}") from None
    if rf < 1 or timeout_ms < 1:
        raise errors.ConfigError(
            f"[{SECTION}] kafkastore.topic.replication.factor={rf} and "
            f"kafkastore.timeout.ms={timeout_ms} must be positive"
        )
    return rf, timeout_ms / 1000.0


class RegistryNode:
    """The registry state of one broker and its role in the cluster."""

    def __init__(self, broker, registry=None, store=None, timeout_s=None, poll_s=POLL_S):
        rf, configured_timeout = section_settings(broker.config)
        self.broker = broker
        self.reactor = broker.reactor
        self.store = store or SchemaStore(broker, replication_factor=rf)
        self.registry = registry or SchemaRegistry()
        self.registry.apply_on_write = False
        self.registry.write = self._append
        self.timeout_s = configured_timeout if timeout_s is None else timeout_s
        self.poll_s = poll_s
        #: The next offset of _schemas-0 to apply.
        self.applied = 0
        self.lock = defer.DeferredLock()
        self._pending_end = None
        self._part = None
        self._loop = None

    # -- tailing the local replica -------------------------------------------------

    def start(self):
        self.catch_up()
        self._loop = task.LoopingCall(self._tick)
        self._loop.clock = self.reactor
        self._loop.start(self.poll_s, now=False)

    def stop(self):
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    def _tick(self):
        try:
            self.catch_up()
        except Exception:
            log.failure("schema registry: tailing _schemas failed")

    def catch_up(self):
        """Apply the local replica's records below its HW; returns the count."""
        part = self.store.local_partition()
        if part is not self._part:
            # A new replica object (created, deleted, reassigned): start over.
            self._part = part
            self._rebuild()
        if part is None:
            return 0
        if self.applied > part.log.log_end_offset:
            # Our replica restarted below what we applied (restart_at).
            self._rebuild()
        hw = part.high_watermark
        if self.applied >= hw:
            return 0
        count = 0
        for key, value in self.store.read(part, self.applied, hw):
            self.registry.apply(key, value)
            count += 1
        self.applied = hw
        return count

    def _rebuild(self):
        self.registry.reset()
        self.applied = 0

    # -- roles ---------------------------------------------------------------------------

    def leader_id(self):
        """The broker leading ``_schemas``-0 as this broker knows it, or -1."""
        part = self.store.local_partition()
        if part is not None:
            return self.broker.node_id if part.is_leader else part.leader_id
        state = self.broker.coordinator.partition_state(self.store.topic, 0)
        return -1 if state is None else state.leader

    def hosts_replica(self):
        return self.store.local_partition() is not None

    def is_leader(self):
        part = self.store.local_partition()
        return part is not None and part.is_leader

    def url_of(self, broker_id):
        urls = getattr(self.broker.coordinator, "http_urls", None)
        return None if urls is None else urls().get(broker_id)

    @defer.inlineCallbacks
    def route(self):
        """Where a write goes: None (here, we lead) or the leader's URL.

        Creates ``_schemas`` on the first write and waits (up to the timeout)
        for a leader to be known."""
        if not self.store.exists():
            try:
                yield self.store.ensure_topic()
            except KafkaError as exc:
                raise store_error(f"cannot create {self.store.topic}: {exc}") from None
        deadline = self.reactor.seconds() + self.timeout_s
        while True:
            leader = self.leader_id()
            if leader == self.broker.node_id and self.is_leader():
                return None
            if leader >= 0 and leader != self.broker.node_id:
                url = self.url_of(leader)
                if url is not None:
                    return url
            if self.reactor.seconds() >= deadline:
                if leader >= 0 and leader != self.broker.node_id:
                    raise unknown_leader(f"broker {leader} leads but registered no HTTP URL")
                raise unknown_leader(f"no leader of {self.store.topic}-0 yet")
            yield task.deferLater(self.reactor, 0.05, lambda: None)

    # -- the leader's writes -------------------------------------------------------------

    def _append(self, records):
        """The registry's ``write``: one batch on our leader replica."""
        part = self.store.local_partition()
        if part is None or not part.is_leader:
            raise unknown_leader(f"broker {self.broker.node_id} no longer leads")
        self._pending_end = self.store.append(part, records)

    @defer.inlineCallbacks
    def _wait_committed(self, part, offset):
        code = yield part.wait_for_hw(offset, self.timeout_s, self.reactor)
        if code == errors.REQUEST_TIMED_OUT:
            raise timeout_error(
                f"{self.store.topic}-0 was not replicated to the in-sync replicas "
                f"within {self.timeout_s:g} s"
            )
        if code == errors.NOT_LEADER_OR_FOLLOWER:
            raise unknown_leader(
                f"broker {self.broker.node_id} lost the leadership of {self.store.topic}-0"
            )
        if code != errors.NONE:
            raise store_error(f"{self.store.topic}-0 has too few in-sync replicas (error {code})")

    @defer.inlineCallbacks
    def write(self, op):
        """Run ``op()`` (a registry write returning the answer) as the leader.

        Fires with op's result once its records are committed (at or below
        the HW) and applied; errbacks with a RegistryError otherwise."""
        yield self.lock.acquire()
        try:
            part = self.store.local_partition()
            if part is None or not part.is_leader:
                raise unknown_leader(f"broker {self.broker.node_id} does not lead")
            # A new leader's log may hold records its HW does not cover yet:
            # commit and apply them before deciding anything (ids above all).
            yield self._wait_committed(part, part.log.log_end_offset)
            self.catch_up()
            self._pending_end = None
            try:
                result = op()
            except KafkaError as exc:
                raise store_error(str(exc)) from None
            if self._pending_end is not None:
                yield self._wait_committed(part, self._pending_end)
                self.catch_up()
            return result
        finally:
            self._pending_end = None
            self.lock.release()
