"""A local pluglog cluster for tests and bench/: N ``twistd pluglog`` broker processes
coordinated by a real ZooKeeper (the caller's connect string, usually with a chroot
of its own), each with its own data dir and port on 127.0.0.1.

Timeouts are shortened so failures show within seconds: a ZooKeeper session
of 4 s (a killed broker's partitions move within 2 x that), replica lag of
3 s. Helpers read the cluster's own view through Metadata, like a client.
"""

import time

from pluglog.client.blocking import BlockingClient
from pluglog.protocol import api_keys
from tests.broker_process import BrokerProcess, free_port

FAST_SETTINGS = {
    "zookeeper.session.timeout.ms": "4000",
    "zookeeper.connection.timeout.ms": "15000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "200",
    "replica.socket.timeout.ms": "5000",
    "controlled.shutdown.timeout.ms": "10000",
    "leader.imbalance.check.interval.seconds": "5",
    "offsets.topic.num.partitions": "6",
}


class Cluster:
    """Brokers 1..N of one cluster."""

    def __init__(
        self,
        root,
        zk_connect,
        brokers=3,
        settings=None,
        racks=None,
        http=False,
        node_settings=None,
    ):
        self.root = root
        self.zk_connect = zk_connect
        self.settings = {**FAST_SETTINGS, **(settings or {})}
        #: ``{node: {key: value}}`` on top of ``settings`` for single brokers
        self.node_settings = node_settings or {}
        self.racks = racks or {}
        #: ``--http`` ports (the schema registry) when ``http``; kept across restarts.
        self.http_ports = {node: free_port() for node in range(1, brokers + 1)} if http else {}
        self.brokers = {}
        for node in range(1, brokers + 1):
            self.brokers[node] = self._process(node, free_port())

    def _process(self, node, port):
        settings = {
            **self.settings,
            **self.node_settings.get(node, {}),
            "zookeeper.connect": self.zk_connect,
        }
        if node in self.racks:
            settings["broker.rack"] = self.racks[node]
        extra = ["--coordinator", "zookeeper", "--broker-id", str(node)]
        if node in self.http_ports:
            extra += ["--http", f"tcp:{self.http_ports[node]}:interface=127.0.0.1"]
        return BrokerProcess(
            self.root / f"broker-{node}", port=port, settings=settings, extra_args=extra
        )

    def url(self, node):
        """The ``--http`` (schema registry) URL of ``node``."""
        return f"http://127.0.0.1:{self.http_ports[node]}"

    @property
    def bootstrap(self):
        return ",".join(b.bootstrap for b in self.brokers.values() if b.alive())

    def start(self):
        try:
            for broker in self.brokers.values():
                broker.start()
            self.wait_for(lambda: len(self.metadata()["brokers"]) == len(self.brokers))
        except BaseException:
            # A fixture that fails here never reaches its teardown: stop the
            # brokers that did start, or they outlive the test run.
            for broker in self.brokers.values():
                broker.kill()
            raise
        return self

    def stop(self):
        for broker in self.brokers.values():
            if broker.alive():
                broker.stop()

    def kill(self, node):
        self.brokers[node].kill()

    def restart(self, node, wait_expiry=True):
        old = self.brokers[node]
        if old.alive():
            old.stop()
        if self.live() and wait_expiry:
            # A SIGKILLed broker stays registered until its ZooKeeper session
            # expires; until then its id counts as taken (as in Kafka).
            self.wait_for(
                lambda: node not in {b["node_id"] for b in self.metadata()["brokers"]},
                what=f"broker {node}'s registration to expire",
            )
        self.brokers[node] = self._process(node, old.port).start()
        return self.brokers[node]

    def live(self):
        return [node for node, b in self.brokers.items() if b.alive()]

    # -- the cluster's view, as a client sees it ---------------------------------

    def metadata(self, topics=None, node=None):
        """A Metadata v8 answer from ``node`` (default: any live broker)."""
        candidates = [node] if node is not None else self.live()
        last = None
        for candidate in candidates:
            broker = self.brokers[candidate]
            try:
                with BlockingClient("127.0.0.1", broker.port, timeout=5) as client:
                    body = {
                        "topics": None if topics is None else [{"name": t} for t in topics],
                        "allow_auto_topic_creation": False,
                        "include_cluster_authorized_operations": False,
                        "include_topic_authorized_operations": False,
                    }
                    return client.request(api_keys.METADATA, 8, body)
            except OSError as exc:
                last = exc
        raise RuntimeError(f"no broker answered Metadata: {last}")

    def partition(self, topic, index, node=None):
        """``{leader, leader_epoch, replicas, isr, offline}`` of one partition."""
        for entry in self.metadata([topic], node)["topics"]:
            for part in entry["partitions"]:
                if part["partition_index"] == index:
                    return {
                        "leader": part["leader_id"],
                        "leader_epoch": part["leader_epoch"],
                        "replicas": part["replica_nodes"],
                        "isr": part["isr_nodes"],
                        "offline": part["offline_replicas"],
                        "error": part["error_code"],
                    }
        return None

    def leader(self, topic, index=0):
        info = self.partition(topic, index)
        return None if info is None else info["leader"]

    def controller(self):
        return self.metadata([])["controller_id"]

    def wait_for(self, predicate, timeout=30.0, interval=0.1, what="condition"):
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            try:
                value = predicate()
                if value:
                    return value
            except (OSError, RuntimeError, KeyError) as exc:
                last_error = exc
            except Exception as exc:
                # Not a transient condition (e.g. a partition missing from a
                # Metadata answer): fail now, with the brokers' logs.
                raise AssertionError(f"waiting for {what}: {exc!r}\n{self._logs()}") from exc
            time.sleep(interval)
        raise AssertionError(f"timed out waiting for {what} ({last_error})\n{self._logs()}")

    def _logs(self):
        return "\n".join(f"--- broker {n} ---\n{b.log()[-6000:]}" for n, b in self.brokers.items())

    def wait_for_isr(self, topic, partitions, size, timeout=30.0):
        def full():
            return all(len(self.partition(topic, p)["isr"]) >= size for p in range(partitions))

        return self.wait_for(full, timeout, what=f"ISR of {size} on {topic}")
