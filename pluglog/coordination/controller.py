"""The ZooKeeper-mode controller: leader election and partition state changes.

One broker at a time is the controller: the one whose ephemeral
``/controller`` znode exists. It wins in one ZooKeeper transaction that
creates ``/controller`` and bumps ``/controller_epoch`` (Kafka's
registerControllerAndIncrementControllerEpoch) and remembers that znode's
version. Every state write it makes afterwards is a transaction that first
``check``s ``/controller_epoch`` still has that version, so a controller
that lost its session and was replaced cannot overwrite the new one's
decisions: its transaction fails and it steps down.

Work runs on the controller's own :class:`SerialWorker` thread, one event at
a time (Kafka's controller event queue), with blocking kazoo calls that read
the current znodes, so every decision is made on fresh data. Events come from
the coordinator's watches (brokers, topics, partition states), the admin
znodes (``/admin/delete_topics``, ``/admin/reassign_partitions``,
``/admin/preferred_replica_election``), our request znodes under
``/pluglog/requests`` (elections and controlled shutdowns asked by any
broker) and Kafka's log dir failure notifications. A replica on a failed
log dir counts as dead for its partition: it leaves the ISR and is never
elected until its broker restarts. Election rules:
:mod:`pluglog.coordination.election`; the admin and request znodes and log
dir events: :mod:`pluglog.coordination.adminznodes`; reassignment:
:mod:`pluglog.coordination.reassignment`; first partition states (pipelined):
:mod:`pluglog.coordination.statecreation`.
"""

import dataclasses

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.protocol.states import EventType
from twisted.logger import Logger

from pluglog.coordination import election
from pluglog.coordination import zkdata as z
from pluglog.coordination.adminznodes import AdminZnodesMixin
from pluglog.coordination.reassignment import ReassignmentMixin
from pluglog.coordination.state import StaleStateError
from pluglog.coordination.statecreation import StateCreationMixin
from pluglog.coordination.zkbridge import DISCONNECTED, SerialWorker

log = Logger()


class ControllerMovedError(StaleStateError):
    """Another controller bumped /controller_epoch: this one is stale."""


@dataclasses.dataclass
class TopicView:
    assignment: dict
    adding: dict
    removing: dict
    topic_id: str
    internal: bool
    version: int


class Controller(AdminZnodesMixin, ReassignmentMixin, StateCreationMixin):
    """Runs on every broker; acts only while it holds ``/controller``."""

    def __init__(self, coordinator, reactor):
        self.co = coordinator
        self.broker_id = coordinator.config.broker_id
        self.worker = SerialWorker(reactor, f"pluglog-controller-{self.broker_id}")
        self.active = False
        self.resigned = False
        self.epoch = 0
        self.epoch_version = -1
        self.live = set()
        self.epochs = {}
        self.shutting_down = set()
        self.reassigning = set()
        self._watchers = {}

    @property
    def client(self):
        return self.co.client

    def post(self, fn, *args):
        self.worker.post(self._if_connected, fn, args)

    def _if_connected(self, fn, args):
        if self.client is None or not self.client.connected or self.co.stopping:
            return
        try:
            fn(*args)
        except DISCONNECTED:
            # Cut off mid-way: resync() redoes the work from the znodes once
            # the connection is back (or a new controller's failover does).
            pass

    def resync(self):
        """After a reconnect with the same session: events may have been
        missed while disconnected, so look at everything again."""
        if self.active:
            self.on_failover()
        else:
            self.elect()

    def _read_watched(self, path, handler):
        """``(raw, stat)`` of ``path`` with ``handler`` watching it, or None
        when there is no node (then watching for its creation). ZooKeeper
        leaves no watch on a read of a missing node, so a node created
        between that read and the ``exists`` would be seen only at its next
        change (a reassignment asked for just after another finished never
        started): ``handler`` then runs again at once."""
        watch = self._watcher(handler)
        try:
            return self.client.get(path, watch=watch)
        except NoNodeError:
            if self.client.exists(path, watch=watch) is not None:
                self.post(handler)
            return None

    def _watcher(self, handler):
        """One watcher object per handler (kazoo keeps a set per path)."""
        watcher = self._watchers.get(handler)
        if watcher is None:

            def watcher(event, handler=handler):
                if event.type != EventType.NONE:
                    self.post(handler)

            self._watchers[handler] = watcher
        return watcher

    def say(self, message, **kw):
        self.worker.deliver(log.info, "controller {id}: " + message, id=self.broker_id, **kw)

    # -- election --------------------------------------------------------------

    def elect(self):
        """Try to become the controller (no-op if someone else is)."""
        if self.active or self.resigned or self.co.stopping:
            return
        client = self.client
        while True:
            try:
                raw, stat = client.get(z.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    client.create(z.CONTROLLER_EPOCH, b"0")
                except NodeExistsError:
                    pass
                continue
            epoch = int(raw or b"0")
            tx = client.transaction()
            tx.create(z.CONTROLLER, z.dumps(z.controller_json(self.broker_id)), ephemeral=True)
            tx.set_data(z.CONTROLLER_EPOCH, str(epoch + 1).encode(), version=stat.version)
            results = tx.commit()
            if isinstance(results[0], NodeExistsError):
                return
            if isinstance(results[1], BadVersionError):
                continue
            if any(isinstance(r, Exception) for r in results):
                raise results[0] if isinstance(results[0], Exception) else results[1]
            break
        self.active = True
        self.epoch = epoch + 1
        self.epoch_version = results[1].version
        self.say("elected, controller epoch {epoch}", epoch=self.epoch)
        self.on_failover()

    def on_failover(self):
        self.live = self.live_brokers()
        self.shutting_down = set()
        self.reconcile()
        self.on_delete_topics()
        self.on_reassign()
        self.on_preferred_admin()
        self.on_requests()
        self.on_log_dir_events()

    def stepped_down(self, reason):
        if self.active:
            self.active = False
            self.say("stepping down: {reason}", reason=reason)

    def resign(self):
        """Give up the controller role (controlled shutdown of this broker)."""
        self.resigned = True
        if not self.active:
            return
        self.active = False
        try:
            _, stat = self.client.get(z.CONTROLLER)
            if stat.ephemeralOwner == self.client.client_id[0]:
                self.client.delete(z.CONTROLLER, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass
        self.say("resigned")

    # -- reads -----------------------------------------------------------------

    def live_brokers(self):
        """Live broker ids; ``self.epochs`` gets each registration's czxid
        (Kafka's broker epoch), which tells a restarted broker from one
        that never left."""
        client = self.client
        pending = {
            int(c): client.exists_async(f"{z.BROKER_IDS}/{c}")
            for c in client.get_children(z.BROKER_IDS)
        }
        epochs = {}
        for broker, result in pending.items():
            stat = result.get()
            if stat is not None:
                epochs[broker] = stat.czxid
        self.epochs = epochs
        return set(epochs)

    def load(self):
        """Fresh ``({topic: TopicView}, {(t, p): PartitionState or None})``,
        skipping topics queued for deletion; reads are pipelined."""
        client = self.client
        deleting = set(client.get_children(z.DELETE_TOPICS))
        pending = {
            name: client.get_async(z.topic_path(name))
            for name in client.get_children(z.TOPICS)
            if name not in deleting
        }
        topics = {}
        for name, result in pending.items():
            try:
                raw, stat = result.get()
            except NoNodeError:
                continue
            assignment, tid, internal, adding, removing = z.topic_from_json(z.loads(raw) or {})
            topics[name] = TopicView(assignment, adding, removing, tid, internal, stat.version)
        reads = {
            (name, p): client.get_async(z.state_path(name, p))
            for name, view in topics.items()
            for p in view.assignment
        }
        states = {}
        for key, result in reads.items():
            try:
                states[key] = z.state_from_znode(*result.get())
            except NoNodeError:
                states[key] = None
        return topics, states

    def read_state(self, topic, partition):
        try:
            return z.state_from_znode(*self.client.get(z.state_path(topic, partition)))
        except NoNodeError:
            return None

    def unclean_allowed(self, topic):
        default = self.co.config.topic_defaults.unclean_leader_election_enable
        try:
            raw, _ = self.client.get(z.config_path(topic))
        except NoNodeError:
            return default
        value = z.config_from_json(z.loads(raw)).get("unclean.leader.election.enable")
        return default if value is None else value.strip().lower() == "true"

    # -- fenced writes ---------------------------------------------------------

    def _commit(self, tx):
        """Commit ``tx``, whose first op checks the controller epoch; the
        other ops' results. A multi that fails returns an error for every
        op: the check's own error (BadVersion) means a newer controller, but
        RolledBack only means a later op failed (a leader's ISR write got in
        between, a znode already there), which the caller retries."""
        return self._commit_results(tx.commit())

    def _commit_results(self, results):
        """The ops' results of a committed fenced transaction (see _commit)."""
        fence = results[0]
        if isinstance(fence, Exception) and not isinstance(fence, RolledBackError):
            self.stepped_down("controller epoch moved on")
            self.co.io.post(self.co.refresh_controller)
            raise ControllerMovedError(f"controller {self.broker_id} epoch {self.epoch} is stale")
        return results[1:]

    def write_state(self, topic, partition, new, version):
        """Fenced conditional write; ``(ok, stat)``. Raises ControllerMovedError."""
        tx = self.client.transaction()
        tx.check(z.CONTROLLER_EPOCH, self.epoch_version)
        tx.set_data(z.state_path(topic, partition), z.state_bytes(new), version=version)
        (result,) = self._commit(tx)
        if isinstance(result, Exception):
            return False, None
        return True, result

    def update(self, topic, partition, replicas, state, decide):
        """Apply ``decide(replicas, state) -> new state | None`` with retries
        when a leader's ISR write got in between; returns the final state."""
        for _ in range(10):
            if state is None:
                return None
            new = decide(replicas, state)
            if new is None:
                return state
            new = dataclasses.replace(new, controller_epoch=self.epoch)
            ok, stat = self.write_state(topic, partition, new, state.version)
            if ok:
                return dataclasses.replace(new, version=stat.version)
            state = self.read_state(topic, partition)
        return state

    # -- events ----------------------------------------------------------------

    def reconcile(self, excluded=()):
        """Create missing states and elect for partitions without a live
        leader; drop dead brokers from ISRs. Idempotent."""
        if not self.active:
            return
        topics, states = self.load()
        self.assign_topic_ids(topics)
        excluded = set(excluded) | self.shutting_down
        offline = self.offline_replicas()

        def decide(topic, live):
            return lambda replicas, state: election.offline(
                replicas, state, live, excluded, lambda: self.unclean_allowed(topic)
            )

        # Missing states first, all at once (pipelined): a new topic's
        # partitions get their leaders without waiting on the others' writes.
        self.create_states(
            [
                (topic, p, topics[topic].assignment[p], offline.get((topic, p), ()))
                for (topic, p), state in sorted(states.items())
                if state is None
            ]
        )
        for (topic, p), state in sorted(states.items()):
            if state is not None:
                dead = offline.get((topic, p), ())
                replicas = topics[topic].assignment[p]
                self.update(topic, p, replicas, state, decide(topic, self.live - set(dead)))

    def assign_topic_ids(self, topics):
        """Give every topic from before topic ids (no ``topic_id`` in its
        znode, as Kafka < 2.8 wrote it) an id, once: a fenced conditional
        write of the znode, as Kafka's controller does on upgrade. Brokers
        adopt it through their topic watch."""
        for name, view in sorted(topics.items()):
            if view.topic_id:
                continue
            view.topic_id = z.new_topic_id()
            body = z.topic_json(
                view.assignment, view.topic_id, view.internal, view.adding, view.removing
            )
            tx = self.client.transaction()
            tx.check(z.CONTROLLER_EPOCH, self.epoch_version)
            tx.set_data(z.topic_path(name), z.dumps(body), version=view.version)
            (result,) = self._commit(tx)
            if isinstance(result, Exception):
                continue  # changed meanwhile: its watch brings us back here
            view.version = result.version
            self.say(
                "topic {t} was given the id {tid}", t=name, tid=z.topic_id_to_zk(view.topic_id)
            )

    def on_brokers_changed(self):
        if not self.active:
            return
        before = dict(self.epochs)
        now = self.live_brokers()
        # Re-registered since we last looked (a quick restart): handled as a
        # failure and a return, like Kafka's broker epochs.
        bounced = {b for b in now & self.live if before.get(b) != self.epochs[b]}
        gone = (self.live - now) | bounced
        returned = (now - self.live) | bounced
        self.shutting_down -= gone
        if gone or returned:
            self.say(
                "brokers {live} (gone {gone}, back {back})",
                live=sorted(now),
                gone=sorted(gone),
                back=sorted(returned),
            )
        if bounced:
            self.live = now - bounced
            self.reconcile()
        self.live = now
        self.reconcile()
        if returned and self.co.config.auto_leader_rebalance_enable:
            self.rebalance()

    def on_topics_changed(self):
        if self.active:
            self.reconcile()

    def on_states_changed(self, keys):
        """States of ``keys`` ((topic, partition)) were read from their znodes."""
        if self.active and self.reassigning.intersection(keys):
            self.on_reassign()

    def rebalance(self):
        """Kafka's auto leader rebalance: per preferred broker, if more than
        10 % of its partitions are led elsewhere, move them back when it is
        live and in sync. Reads every state: the coordinator's periodic
        check (:meth:`ZooKeeperCoordinator.check_imbalance`) asks for it only
        when its cache shows something to move."""
        if not self.active:
            return
        topics, states = self.load()
        partitions = (
            (key, topics[key[0]].assignment[key[1]], state) for key, state in states.items()
        )
        for _, off in election.imbalanced(partitions, self.live).items():
            self.elect_partitions(off, preferred=True, loaded=(topics, states))

    def elect_partitions(self, partitions, preferred, loaded=None):
        """ElectLeaders: ``{(t, p): error code}`` (0 = elected)."""
        topics, states = loaded or self.load()
        offline = self.offline_replicas()
        result = {}
        for topic, p in partitions:
            view = topics.get(topic)
            if view is None or p not in view.assignment or states.get((topic, p)) is None:
                result[(topic, p)] = election.UNKNOWN
                continue
            replicas = view.assignment[p]
            codes = {}
            live = self.live - offline.get((topic, p), set())

            def decide(replicas, state, codes=codes, live=live):
                if preferred:
                    new, codes["c"] = election.preferred(replicas, state, live, self.shutting_down)
                else:
                    new, codes["c"] = election.unclean(replicas, state, live)
                return new

            self.update(topic, p, replicas, states[(topic, p)], decide)
            result[(topic, p)] = codes.get("c", election.NOT_NEEDED)
        return result

    def controlled_shutdown(self, broker):
        """Move leadership off ``broker`` and drop it from ISRs; returns how
        many partitions it still leads that another live in-sync replica
        could take. One that no other replica can lead stays with ``broker``
        until it stops (then it is offline, as in Kafka): counting it would
        only make the last broker of a cluster wait out its timeout."""
        self.shutting_down.add(broker)
        topics, states = self.load()
        offline = self.offline_replicas()
        remaining = stuck = 0
        for (topic, p), state in sorted(states.items()):
            replicas = topics[topic].assignment[p]
            if state is None or broker not in replicas:
                continue
            live = self.live - offline.get((topic, p), set())
            final = self.update(
                topic,
                p,
                replicas,
                state,
                lambda r, s, live=live: election.shutdown(r, s, broker, live, self.shutting_down),
            )
            if final is None or final.leader != broker:
                continue
            if any(r in live and r not in self.shutting_down for r in final.isr):
                remaining += 1
            else:
                stuck += 1
        self.say(
            "controlled shutdown of broker {b}: {n} partition(s) still led, "
            "{s} with no other live in-sync replica",
            b=broker,
            n=remaining,
            s=stuck,
        )
        return remaining
