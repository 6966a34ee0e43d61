"""Start-up checks and registration of a broker in ZooKeeper.

The cluster id is created once in ``/cluster/id``; the data dir's Kafka
``meta.properties`` ties it to one cluster id and broker id; the broker's
ephemeral ``/brokers/ids/<id>`` is refused while another live session holds
it. Each failure is a ConfigError naming the values, which stops the broker.
These run on the coordinator's io worker (blocking kazoo calls).
"""

import time

from kazoo.exceptions import NodeExistsError, NoNodeError

from pluglog.coordination import zkdata as z
from pluglog.coordination.local import _new_cluster_id
from pluglog.datadir import ZOOKEEPER, check_meta_properties
from pluglog.errors import ConfigError
from pluglog.security.interbroker import advertised_endpoints

META_PROPERTIES = "meta.properties"


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
        check_meta_properties(
            self.config.data_dir,
            cluster_id,
            self.broker_id,
            ZOOKEEPER,
            f"cluster {cluster_id} in ZooKeeper at zookeeper.connect={self.hosts + self.chroot}",
        )

    def _register(self, wait):
        """Create our ephemeral /brokers/ids/<id>; an id held by another live
        session is refused (after up to ``wait`` seconds for it to expire)."""
        from pluglog.web.site import advertised_url

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
        deadline = time.monotonic() + wait
        path = z.broker_path(self.broker_id)
        while True:
            try:
                self.client.create(path, body, ephemeral=True)
                return
            except NodeExistsError:
                try:
                    _, stat = self.client.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.client.client_id[0]:
                    return
                if time.monotonic() >= deadline:
                    raise ConfigError(
                        f"broker.id={self.broker_id} is already registered in ZooKeeper at "
                        f"{self.hosts + self.chroot} by another live broker "
                        f"(session 0x{stat.ephemeralOwner:x})"
                    ) from None
                time.sleep(0.2)
