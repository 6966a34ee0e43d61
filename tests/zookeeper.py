"""Start and stop a real ZooKeeper for tests: pytest fixtures over
:class:`pluglog.coordination.zkserver.ZooKeeperServer`.

Import the fixtures into a conftest: one ZooKeeper per test session, and
every test its own chroot, ``127.0.0.1:PORT/t<uuid>``, so tests never see
each other's znodes.

:class:`ZooKeeperEnsemble` runs three ZooKeeper servers as one ensemble
(QuorumPeerMain, the recipe of shared/environment.md §2) for the tests and
bench/ runs that kill single ZooKeeper nodes.
"""

import os
import time
import uuid
from pathlib import Path

import pytest

from pluglog.coordination.zkserver import MAIN, ZK_JAR, ZooKeeperServer, four_letter, free_port

__all__ = ["ZK_JAR", "ZooKeeperEnsemble", "ZooKeeperProcess", "four_letter", "new_chroot"]

#: The name tests and bench/ use.
ZooKeeperProcess = ZooKeeperServer


def new_chroot():
    return f"/t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def zookeeper_process(tmp_path_factory):
    """One ZooKeeper for the whole test session."""
    proc = ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper")).start()
    yield proc
    proc.stop()


@pytest.fixture
def zookeeper(zookeeper_process):
    """The session's ZooKeeper; restarted if an earlier test stopped it."""
    if not zookeeper_process.alive():
        zookeeper_process.start()
    return zookeeper_process


@pytest.fixture
def zk_connect(zookeeper):
    """A connect string with a chroot of this test's own: ``127.0.0.1:PORT/t<id>``."""
    return zookeeper.connect_string(new_chroot())


@pytest.fixture
def zk(zookeeper, zk_connect):
    """A plain kazoo client on this test's chroot (made here), for reading
    and asserting znodes. Its session lasts 45 s like the brokers' in the
    ZooKeeper-restart tests: kazoo's default 10 s expired across a restart
    at load ~10."""
    from kazoo.client import KazooClient
    from kazoo.retry import KazooRetry

    root = KazooClient(hosts=zookeeper.hosts)
    root.start(10)
    root.ensure_path(zk_connect[len(zookeeper.hosts) :])
    root.stop()
    root.close()
    # Reconnects at most 1 s apart, as the brokers' clients do
    # (pluglog.coordination.zkbridge): kazoo's default backoff doubles up to
    # an hour, so after a 31.6 s ZooKeeper outage this client stayed
    # disconnected another 30.9 s (the capped one: at once), and an outage
    # that outlasts a doubling lands its next attempt past the session.
    client = KazooClient(
        hosts=zk_connect,
        timeout=45,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
    )
    client.start(10)
    yield client
    client.stop()
    client.close()


# -- a 3-node ensemble -------------------------------------------------------------

QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


def mode(port):
    """``leader``, ``follower`` or ``standalone`` from ``srvr``; '' if not serving."""
    for line in four_letter(port, b"srvr").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return ""


class EnsembleNode(ZooKeeperServer):
    """One QuorumPeerMain of a :class:`ZooKeeperEnsemble` (``server.N`` of its zoo.cfg)."""

    def __init__(self, base_dir, myid, port, servers):
        super().__init__(base_dir, port)
        self.myid = myid
        self.servers = servers

    def _write_config(self):
        super()._write_config()
        with open(self.cfg_path, "a", encoding="ascii") as handle:
            handle.write("initLimit=20\nsyncLimit=10\n")
            for number, (peer, election) in sorted(self.servers.items()):
                handle.write(f"server.{number}=127.0.0.1:{peer}:{election}\n")
        with open(os.path.join(self.data_dir, "myid"), "w", encoding="ascii") as handle:
            handle.write(f"{self.myid}\n")

    def command(self):
        return [QUORUM_MAIN if part == MAIN else part for part in super().command()]

    def mode(self):
        return mode(self.port) if self.alive() else ""

    def start(self, timeout=30, wait=True):
        """Start the node; with ``wait``, return once it serves (a quorum is up)."""
        if not os.path.exists(ZK_JAR):
            raise RuntimeError(f"{ZK_JAR} is missing: apt-get install zookeeper")
        self._write_config()
        ready = (lambda: self.mode() in ("leader", "follower")) if wait else (lambda: True)
        return self._spawn(self.command(), ready, "serve", timeout, cwd=self.base_dir)


class ZooKeeperEnsemble:
    """A 3-node ZooKeeper ensemble on 127.0.0.1 (``tickTime=500``, free ports),
    nodes numbered 1..3; kill and restart keep each node's ports and data."""

    def __init__(self, base_dir, size=3):
        base_dir = Path(base_dir)
        servers = {n: (free_port(), free_port()) for n in range(1, size + 1)}
        self.nodes = {
            n: EnsembleNode(base_dir / f"zk{n}", n, free_port(), servers)
            for n in range(1, size + 1)
        }

    @property
    def hosts(self):
        return ",".join(node.hosts for node in self.nodes.values())

    def connect_string(self, chroot=""):
        return self.hosts + chroot

    def start(self, timeout=60):
        for node in self.nodes.values():
            if not node.alive():
                node.start(wait=False)
        self.wait_serving(timeout)
        return self

    def wait_serving(self, timeout=60):
        """Wait until every running node is a leader or follower, with one leader."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            modes = [node.mode() for node in self.nodes.values() if node.alive()]
            if modes.count("leader") == 1 and all(m in ("leader", "follower") for m in modes):
                return self
            time.sleep(0.1)
        logs = "\n".join(f"--- zk{n} ---\n{node.log()[-2000:]}" for n, node in self.nodes.items())
        raise RuntimeError(f"the ZooKeeper ensemble did not serve within {timeout}s:\n{logs}")

    def alive(self):
        return all(node.alive() for node in self.nodes.values())

    def stop(self):
        for node in self.nodes.values():
            node.stop()

    def kill(self, number):
        """SIGKILL node ``number``."""
        self.nodes[number].kill()

    def start_node(self, number, timeout=60):
        """Start node ``number`` again; return once it serves."""
        self.nodes[number].start(timeout)
        return self.wait_serving(timeout)

    def leader(self):
        """The number of the node that is the ensemble's leader (None if none)."""
        for number, node in self.nodes.items():
            if node.mode() == "leader":
                return number
        return None
