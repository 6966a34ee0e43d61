"""Start-up checks and registration of a broker in ZooKeeper.

The cluster id is created once in ``/cluster/id``; the data dir's Kafka
``meta.properties`` ties it to one cluster id and broker id; the broker's
ephemeral ``/brokers/ids/<id>`` is refused while another live session holds
it. Each failure is a ConfigError naming the values, which stops the broker.
These run on the coordinator's io worker (blocking kazoo calls).

A broker whose log dir fails reports its replicas there as offline
(:meth:`RegistrationMixin.replicas_offline`): its ephemeral
``/pluglog/offline_replicas/<id>`` lists them, and a sequential
``/log_dir_event_notification/log_dir_event_<n>`` (Kafka's) tells the
controller, both in one transaction. The list lives as long as the session,
so a broker restarted with healthy dirs starts without one; a broker that
lost its session writes it again when it registers again.

A broker restarted quickly after a crash finds its id still registered by
its own previous session, which ZooKeeper removes only once that session
times out. The data dir remembers the session that registered last
(``zookeeper.session``; the data dir lock guarantees that session's process
is gone), so the broker waits for it to expire, bounded by
``zookeeper.session.timeout.ms`` plus a margin, instead of exiting.
"""

import os
import time

from kazoo.exceptions import NodeExistsError, NoNodeError
from twisted.internet import defer

from pluglog.addresses import advertised_url
from pluglog.coordination import zkdata as z
from pluglog.coordination.local import _new_cluster_id
from pluglog.datadir import ZOOKEEPER, check_all_meta_properties
from pluglog.errors import ConfigError
from pluglog.fileutil import atomic_write
from pluglog.security.interbroker import advertised_endpoints

META_PROPERTIES = "meta.properties"
#: the session id that last registered this data dir's broker, in hex
SESSION_FILE = "zookeeper.session"
#: beyond the session timeout: ZooKeeper expires sessions on its tick
EXPIRY_MARGIN_S = 5.0


class RegistrationMixin:
    """Methods of :class:`pluglog.coordination.zookeeper.ZooKeeperCoordinator`."""

    def _cluster_id_blocking(self):
        wanted = self.config.cluster_id or _new_cluster_id()
        try:
            self.client.create(
                z.CLUSTER_ID, z.dumps({"version": "1", "id": wanted}), makepath=True
            )
        except NodeExistsError:
            pass
        raw, _ = self.client.get(z.CLUSTER_ID)
        cluster_id = z.loads(raw)["id"]
        if self.config.cluster_id and self.config.cluster_id != cluster_id:
            raise ConfigError(
                f"cluster.id={self.config.cluster_id} does not match the cluster id "
                f"{cluster_id} stored in ZooKeeper at {self.hosts + self.chroot}"
            )
        return cluster_id

    def _check_meta_properties(self, cluster_id):
        """Kafka's meta.properties: a data dir belongs to one cluster and broker."""
        check_all_meta_properties(
            self.config.data_dirs,
            cluster_id,
            self.broker_id,
            ZOOKEEPER,
            f"cluster {cluster_id} in ZooKeeper at zookeeper.connect={self.hosts + self.chroot}",
        )

    def _register(self, wait):
        """Create our ephemeral /brokers/ids/<id>; an id held by another live
        session is refused (after up to ``wait`` seconds for it to expire)."""
        # Every advertised listener, so each broker can answer a client with
        # the others' endpoints on the listener that client came in on.
        body = z.dumps(
            z.broker_json(
                self.config.advertised_host,
                self.config.advertised_port,
                self.config.broker_rack,
                advertised_url(self.config),
                advertised_endpoints(self.config),
            )
        )
        started = time.monotonic()
        deadline = started + wait
        path = z.broker_path(self.broker_id)
        previous = self._previous_session()
        waiting = False
        while True:
            try:
                _, stat = self.client.create(path, body, ephemeral=True, include_data=True)
                break
            except NodeExistsError:
                try:
                    _, stat = self.client.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.client.client_id[0]:
                    break
                if stat.ephemeralOwner == previous and not waiting:
                    # Our own crashed predecessor: its node goes when its session expires.
                    bound = self.config.zookeeper_session_timeout_ms / 1000.0 + EXPIRY_MARGIN_S
                    deadline = max(deadline, started + bound)
                    waiting = True
                    self._say(
                        f"broker.id={self.broker_id} is still registered by this data dir's "
                        f"previous ZooKeeper session 0x{previous:x}; waiting up to {bound:.0f}s "
                        "for it to expire"
                    )
                if time.monotonic() >= deadline:
                    raise ConfigError(
                        f"broker.id={self.broker_id} is already registered in ZooKeeper at "
                        f"{self.hosts + self.chroot} by another live broker "
                        f"(session 0x{stat.ephemeralOwner:x})"
                    ) from None
                time.sleep(0.2)
        # Kafka's broker epoch: the registration's czxid. The controller
        # refuses a controlled shutdown asked for by an earlier registration.
        self.broker_epoch = stat.czxid
        self._remember_session()

    def _session_path(self):
        return os.path.join(self.config.data_dir, SESSION_FILE)

    def _previous_session(self):
        try:
            with open(self._session_path(), encoding="ascii") as handle:
                return int(handle.read().strip(), 16)
        except (OSError, ValueError):
            return None

    def _remember_session(self):
        session = self.client.client_id[0]
        if session != self._previous_session():
            atomic_write(self._session_path(), f"{session:x}\n".encode())

    # -- replicas on failed log dirs -------------------------------------------

    def replicas_offline(self, partitions, log_dirs):
        """This broker's replicas of ``partitions`` are offline (their log
        dirs ``log_dirs`` failed): tell the controller, which moves their
        leadership away and drops this broker from their ISRs until it
        restarts. Cumulative; returns a Deferred."""
        # New sets, not updated ones: the io thread may be reading the old.
        self._offline_partitions = self._offline_partitions | set(partitions)
        self._offline_dirs = self._offline_dirs | set(log_dirs)
        if not self.io.started:
            return defer.succeed(None)
        partitions, dirs = self._offline_partitions, self._offline_dirs
        return self._submit_write(lambda: self._write_offline(partitions, dirs))

    def _write_offline(self, partitions, dirs):
        """One transaction: the offline list (created or replaced) and the
        notification, so the controller never sees one without the other."""
        path = z.offline_replicas_path(self.broker_id)
        body = z.dumps(z.offline_replicas_json(dirs, partitions))
        event = z.dumps(z.log_dir_event_json(self.broker_id))
        while True:
            tx = self.client.transaction()
            if self.client.exists(path):
                tx.set_data(path, body)
            else:
                tx.create(path, body, ephemeral=True)
            tx.create(z.LOG_DIR_EVENT_PREFIX, event, sequence=True)
            results = tx.commit()
            if not any(isinstance(r, (NodeExistsError, NoNodeError)) for r in results):
                break  # else it appeared or went meanwhile: look again
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise failed[0]

    def _rewrite_offline(self):
        """After registering again on a new session: the ephemeral list
        went with the old one."""
        partitions, dirs = self._offline_partitions, self._offline_dirs
        if partitions:
            self._write_offline(partitions, dirs)
