"""The ``zookeeper`` coordinator: cluster metadata in Kafka's ZooKeeper layout.

Every broker keeps a reactor-side cache of the cluster (live brokers, topics
with their replica assignment and configs, every partition's state, the
controller id), filled by one-shot ZooKeeper watches whose refresh jobs run
on the ``io`` :class:`SerialWorker` and deliver their results to the reactor
thread, where listeners get the events of :mod:`pluglog.coordination.state`.
Writes any broker may make (registration, topic creation, config changes,
deletion and reassignment requests, ISR changes of partitions it leads)
are made from the same worker; ISR writes and partition-state reads go out
pipelined, many at a time (:mod:`pluglog.coordination.zkpipeline`). The
controller's decisions are made by
:class:`pluglog.coordination.controller.Controller` on its own thread.

Start-up refuses, with a ConfigError the broker exits on: an unreachable
ZooKeeper (after ``zookeeper.connection.timeout.ms``), a data dir whose
``meta.properties`` names another cluster id or broker id, and a broker id
another live broker has registered.
"""

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import EventType, KazooState
from twisted.internet import defer, threads
from twisted.logger import Logger
from zope.interface import implementer

from pluglog.coordination import election
from pluglog.coordination import zkdata as z
from pluglog.coordination.controller import Controller
from pluglog.coordination.state import PartitionChange, TopicMetadata
from pluglog.coordination.zkadmin import AdminMixin
from pluglog.coordination.zkbridge import DISCONNECTED, SerialWorker, connect
from pluglog.coordination.zkpipeline import PipelineMixin
from pluglog.coordination.zkregister import RegistrationMixin
from pluglog.coordination.zkstores import StoresMixin
from pluglog.errors import ConfigError
from pluglog.interfaces import ICoordinator
from pluglog.security import interbroker

log = Logger()


@implementer(ICoordinator)
class ZooKeeperCoordinator(RegistrationMixin, AdminMixin, StoresMixin, PipelineMixin):
    """Brokers, controller, topics and partition states kept in ZooKeeper."""

    def __init__(self, config, reactor):
        self.config = config
        self.reactor = reactor
        self.broker_id = config.broker_id
        #: this registration's czxid (Kafka's broker epoch), set by _register
        self.broker_epoch = None
        #: the listener whose endpoints brokers() gives (replica fetchers use it)
        self.inter_broker_listener = interbroker.check(config)[0]
        try:
            self.hosts, self.chroot = z.parse_connect(config.zookeeper_connect)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.client = None
        self.stopping = False
        self.io = SerialWorker(reactor, f"pluglog-zk-{self.broker_id}")
        self.controller = Controller(self, reactor)
        self._listeners = []
        self._brokers = {}
        self._http_urls = {}
        self._endpoints = {}
        self._topics = {}
        self._reassigning = {}
        self._states = {}
        self._controller_id = -1
        self._cluster_id = ""
        self._waiters = []
        # io-thread only: topics whose znodes are watched, and watcher objects.
        self._io_topics = set()
        self._watchers = {}
        self._lost = False
        self._rebalance = None
        #: replicas on failed log dirs and those dirs (replicas_offline)
        self._offline_partitions = set()
        self._offline_dirs = set()
        self._init_stores()
        self._init_pipeline()

    # -- lifecycle -------------------------------------------------------------

    def start(self):
        self.io.start()
        self.controller.worker.start()
        d = self.io.submit(self._start_blocking)
        d.addCallback(self._started)
        d.addErrback(self._start_failed)
        return d

    def _say(self, message):
        self.io.deliver(log.info, "{message}", message=message)

    def _start_blocking(self):
        if self.chroot:
            # Kafka creates a missing chroot itself; kazoo cannot through a
            # chrooted client, so make it with a short-lived plain one.
            root = connect(
                self.hosts,
                self.config.zookeeper_session_timeout_ms,
                self.config.zookeeper_connection_timeout_ms,
                self._say,
            )
            try:
                root.ensure_path(self.chroot)
            finally:
                root.stop()
                root.close()
        self.client = connect(
            self.hosts + self.chroot,
            self.config.zookeeper_session_timeout_ms,
            self.config.zookeeper_connection_timeout_ms,
            self._say,
        )
        try:
            for path in z.PERSISTENT_PATHS:
                self.client.ensure_path(path)
            cluster_id = self._cluster_id_blocking()
            self._check_meta_properties(cluster_id)
            self._register(wait=0)
            self._import_credentials()
        except Exception:
            self.client.stop()
            self.client.close()
            raise
        self.client.add_listener(self._on_connection_state)
        self.refresh_all()
        return cluster_id

    def _started(self, cluster_id):
        self._cluster_id = cluster_id
        interval = self.config.leader_imbalance_check_interval_seconds
        if self.config.auto_leader_rebalance_enable and interval > 0:
            from twisted.internet import task

            self._rebalance = task.LoopingCall(self.check_imbalance)
            self._rebalance.clock = self.reactor
            self._rebalance.start(interval, now=False)
        log.info(
            "broker {id} registered in ZooKeeper {zk} (cluster {cluster}); controller {ctl}",
            id=self.broker_id,
            zk=self.hosts + self.chroot,
            cluster=cluster_id,
            ctl=self._controller_id,
        )

    def check_imbalance(self):
        """The periodic leader-imbalance check, on the cached states (Kafka's
        controller checks its context, not ZooKeeper): reading every state
        znode each time cost ~23 % of a core at 10,000 partitions and a 5 s
        interval. The controller reads ZooKeeper, and decides on what it
        reads, only when the cache shows a preferred leader to move back."""
        if self._controller_id != self.broker_id or self.stopping:
            return
        partitions = (
            (key, self._topics[key[0]].replicas(key[1]), state)
            for key, state in self._states.items()
            if key[0] in self._topics
        )
        if election.imbalanced(partitions, set(self._brokers)):
            self.controller.post(self.controller.rebalance)

    def _start_failed(self, failure):
        self.controller.worker.stop()
        self.io.stop()
        return failure

    def stop(self):
        self.stopping = True
        if self._rebalance is not None and self._rebalance.running:
            self._rebalance.stop()
        for waiter in list(self._waiters):
            self._finish_waiter(waiter, None)
        if not self.io.started:
            return defer.succeed(None)

        def close():
            if self.client is not None:
                # Closing the session deletes our ephemerals at once, so the
                # controller reacts now rather than after the session timeout;
                # it also fails any job still waiting on ZooKeeper.
                self.client.stop()
                self.client.close()

        # Not on the io worker: a job there may be waiting for ZooKeeper.
        d = threads.deferToThreadPool(self.reactor, self.reactor.getThreadPool(), close)

        def stop_workers(result):
            self.controller.worker.stop()
            self.io.stop()
            return result

        return d.addBoth(stop_workers)

    # -- connection state ------------------------------------------------------

    def _submit_write(self, fn):
        """Run the ZooKeeper job ``fn`` on the io worker through kazoo's
        command retry (:func:`pluglog.coordination.zkbridge.connect`): cut off
        by a lost connection or an expired session, it is run again once a
        session is back. Jobs are written to be run again (check, then write;
        an existing node found on the second run is reported as such)."""
        return self.io.submit(lambda: self.client.retry(fn))

    def _on_connection_state(self, state):
        # kazoo's connection thread: never block here.
        if self.stopping:
            return
        if state == KazooState.LOST:
            self._lost = True
            self.io.deliver(self._session_lost)
        elif state == KazooState.CONNECTED and self._lost:
            # _lost stays set until a restore completes: one cut off by
            # another disconnection runs again on the next connection.
            self.io.post(self._restore)
        elif state == KazooState.CONNECTED:
            # Same session after a disconnection (e.g. a ZooKeeper restart).
            # kazoo drops every watch when a connection is lost (it has no
            # SetWatches on reconnect), so every znode is read again with
            # a new watch, and jobs cut off meanwhile are redone.
            self.io.post(self._safely, self.refresh_all, True)
            self.controller.post(self.controller.resync)

    def _session_lost(self):
        log.warn("broker {id}: ZooKeeper session lost", id=self.broker_id)
        self.controller.worker.post(self.controller.stepped_down, "session lost")
        self._notify("session", "lost")

    def _restore(self):
        if self.stopping or not self._lost:
            return
        try:
            self._register(wait=self.config.zookeeper_session_timeout_ms / 1000.0)
            self._rewrite_offline()
            self.refresh_all(rewatch=True)
        except DISCONNECTED:
            return  # disconnected again: the next CONNECTED restores
        self._lost = False
        self.io.deliver(self._restored)

    def _restored(self):
        log.info("broker {id}: ZooKeeper session restored, registered again", id=self.broker_id)
        self._notify("session", "restored")
        for (topic, p), state in sorted(self._states.items()):
            self._announce(topic, p, state)

    # -- watches and refresh jobs (io thread) ----------------------------------

    def _watcher(self, key, job, *args):
        watcher = self._watchers.get(key)
        if watcher is None:

            def watcher(event):
                if event.type != EventType.NONE and not self.stopping:
                    self.io.post(self._safely, job, *args)

            self._watchers[key] = watcher
        return watcher

    def _safely(self, job, *args):
        try:
            job(*args)
        except DISCONNECTED:
            pass  # the session restore refreshes everything

    def refresh_all(self, rewatch=False):
        """Read the cluster's znodes, watching each. ``rewatch`` re-reads every
        known topic and partition state too: after a lost connection, whose
        watches kazoo has dropped, a change made meanwhile would otherwise
        never be seen (a broker would follow a dead leader forever)."""
        self.refresh_controller()
        self.refresh_brokers()
        self.refresh_topics(rewatch)
        self.refresh_stores()

    def refresh_controller(self):
        watch = self._watcher("controller", self.refresh_controller)
        while True:
            try:
                raw, _ = self.client.get(z.CONTROLLER, watch=watch)
                controller = int(z.loads(raw)["brokerid"])
                break
            except NoNodeError:
                # Watch for its creation; if it appeared in between, read it.
                if not self.client.exists(z.CONTROLLER, watch=watch):
                    controller = -1
                    self.controller.post(self.controller.elect)
                    break
        self.io.deliver(self._set_controller, controller)

    def refresh_brokers(self):
        children = self.client.get_children(
            z.BROKER_IDS, watch=self._watcher("brokers", self.refresh_brokers)
        )
        pending = {c: self.client.get_async(f"{z.BROKER_IDS}/{c}") for c in children}
        brokers, endpoints = {}, {}
        urls = {}
        for child, result in pending.items():
            try:
                raw, _ = result.get()
            except NoNodeError:
                continue
            data = z.loads(raw)
            info = z.broker_from_json(child, data, self.inter_broker_listener)
            brokers[info[0]] = info
            endpoints[info[0]] = z.broker_endpoints(data)
            if data.get("http_url"):
                urls[info[0]] = data["http_url"]
        self.io.deliver(self._set_http_urls, urls)
        self.io.deliver(self._set_brokers, brokers, endpoints)
        self.controller.post(self.controller.on_brokers_changed)

    def refresh_topics(self, rewatch=False):
        names = set(
            self.client.get_children(z.TOPICS, watch=self._watcher("topics", self.refresh_topics))
        )
        fresh = names if rewatch else names - self._io_topics
        self._io_topics |= names
        for name in sorted(fresh):
            self.refresh_topic(name)
        for name in sorted(self._io_topics - names):
            self._io_topics.discard(name)
            self.io.deliver(self._topic_deleted, name)
        if not fresh:
            # (Each new topic's refresh_topic asked already, before reading
            # its states: a second reconcile would only read every state
            # again, 10,000 reads for a topic of 10,000 partitions.)
            self.controller.post(self.controller.on_topics_changed)

    def refresh_topic(self, name, states=True):
        if name not in self._io_topics:
            return
        try:
            raw, _ = self.client.get(
                z.topic_path(name), watch=self._watcher(("topic", name), self.refresh_topic, name)
            )
        except NoNodeError:
            return  # deleted: refresh_topics announces it
        watch = self._watcher(("config", name), self.refresh_topic, name, False)
        raw_config = None
        for _ in range(3):
            try:
                raw_config, _ = self.client.get(z.config_path(name), watch=watch)
                break
            except NoNodeError:
                # Watch for its creation; if it appeared in between, read it.
                if not self.client.exists(z.config_path(name), watch=watch):
                    break
        assignment, topic_id, internal, adding, removing = z.topic_from_json(z.loads(raw))
        meta = TopicMetadata(
            name,
            len(assignment),
            z.config_from_json(z.loads(raw_config)),
            topic_id,
            internal,
            assignment,
        )
        self.io.deliver(self._topic_update, meta, adding, removing)
        if states:
            # Partitions added to an existing topic need their first states.
            self.controller.post(self.controller.on_topics_changed)
            self.read_states([(name, p) for p in sorted(assignment)])

    # -- the cache (reactor thread) --------------------------------------------

    def _notify(self, event, payload):
        for listener in list(self._listeners):
            try:
                listener(event, payload)
            except Exception:
                log.failure("coordinator listener failed on {event}", event=event)
        self._check_waiters()

    def _set_controller(self, controller):
        self._controller_id = controller
        self._check_waiters()

    def _set_http_urls(self, urls):
        self._http_urls = urls

    def _set_brokers(self, brokers, endpoints=None):
        self._endpoints = endpoints or {}
        if brokers != self._brokers:
            self._brokers = brokers
            self._notify("brokers", self.brokers())

    def _topic_update(self, meta, adding, removing):
        old = self._topics.get(meta.name)
        if old is not None and old.topic_id and old.topic_id != meta.topic_id:
            # Deleted and created again between two looks: a new topic.
            self._topic_deleted(meta.name)
            old = None
        self._reassigning[meta.name] = (adding, removing)
        if old is None:
            self._topics[meta.name] = meta
            self._notify("created", meta)
        elif (old.assignment, old.configs, old.num_partitions, old.topic_id) != (
            meta.assignment,
            meta.configs,
            meta.num_partitions,
            meta.topic_id,
        ):
            # A topic id appearing is a change: the controller gave a topic
            # from before topic ids its id.
            self._topics[meta.name] = meta
            self._notify("changed", meta)
            for p in meta.assignment:
                if old.replicas(p) != meta.replicas(p) and (meta.name, p) in self._states:
                    self._announce(meta.name, p, self._states[(meta.name, p)])

    def _topic_deleted(self, name):
        meta = self._topics.pop(name, None)
        self._reassigning.pop(name, None)
        for key in [k for k in self._states if k[0] == name]:
            del self._states[key]
        if meta is not None:
            self._notify("deleted", meta)

    def _set_state(self, topic, partition, state):
        if topic not in self._topics:
            return
        old = self._states.get((topic, partition))
        if old is not None and (old.leader_epoch, old.version) > (
            state.leader_epoch,
            state.version,
        ):
            return
        if old == state:
            return
        self._states[(topic, partition)] = state
        self._announce(topic, partition, state)
        self._check_waiters()

    def _announce(self, topic, partition, state):
        meta = self._topics.get(topic)
        if meta is not None and self.broker_id in meta.replicas(partition):
            change = PartitionChange(topic, partition, tuple(meta.replicas(partition)), state)
            self._notify("partition", change)

    # -- ICoordinator reads ----------------------------------------------------

    def add_listener(self, listener):
        self._listeners.append(listener)

    def brokers(self):
        return [self._brokers[b] for b in sorted(self._brokers)]

    def controller_id(self):
        return self._controller_id

    def http_urls(self):
        """``{broker id: --http URL}`` of live brokers that registered one."""
        return dict(self._http_urls)

    def broker_endpoints(self):
        """``{broker id: {listener name: (host, port)}}`` of the live brokers."""
        return {node: dict(found) for node, found in self._endpoints.items()}

    def cluster_id(self):
        return self._cluster_id

    def topics(self):
        return dict(self._topics)

    def partition_state(self, topic, partition):
        return self._states.get((topic, partition))


def make_zookeeper(config, reactor):
    return ZooKeeperCoordinator(config, reactor)
