"""Run a standalone ZooKeeper (the Debian ``zookeeper`` package) on 127.0.0.1.

Used by ``pluglog dev-cluster`` and the tests: ``java ... ZooKeeperServerMain
zoo.cfg`` with its own data dir and port (the command measured in
``shared/environment.md`` §2: tickTime=500, minSessionTimeout=1000), ready
once ``ruok`` answers ``imok`` and a kazoo client connects; stop, kill and
restart keep the port and data dir, so a restart loses nothing.
"""

import os
import shutil
import socket
import tempfile

from pluglog.childprocess import ChildProcess, free_port

__all__ = ["ZK_JAR", "ZooKeeperServer", "four_letter", "free_port"]

ZK_JAR = "/usr/share/java/zookeeper.jar"
CLASSPATH = ":".join(
    [
        "/etc/zookeeper/conf",
        ZK_JAR,
        "/usr/share/java/slf4j-log4j12.jar",
        "/usr/share/java/log4j-1.2.jar",
    ]
)
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"


def four_letter(port, word=b"ruok", timeout=0.5):
    """Send a ZooKeeper four-letter command; return the reply ('' on error)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(word)
            chunks = []
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode("ascii", "replace")
    except OSError:
        return ""


class ZooKeeperServer(ChildProcess):
    """A standalone ZooKeeper server subprocess on 127.0.0.1."""

    name = "zookeeper"

    def __init__(self, base_dir=None, port=None):
        self._own_dir = base_dir is None
        self.base_dir = str(base_dir or tempfile.mkdtemp(prefix="pluglog-zk-"))
        super().__init__(os.path.join(self.base_dir, "zookeeper.log"))
        self.port = port or free_port()
        self.data_dir = os.path.join(self.base_dir, "data")
        self.cfg_path = os.path.join(self.base_dir, "zoo.cfg")

    @property
    def hosts(self):
        return f"127.0.0.1:{self.port}"

    def connect_string(self, chroot=""):
        return self.hosts + chroot

    def _write_config(self):
        os.makedirs(self.data_dir, exist_ok=True)
        with open(self.cfg_path, "w", encoding="ascii") as handle:
            handle.write(
                "\n".join(
                    [
                        "tickTime=500",
                        f"dataDir={self.data_dir}",
                        f"clientPort={self.port}",
                        "clientPortAddress=127.0.0.1",
                        "minSessionTimeout=1000",
                        "maxSessionTimeout=60000",
                        "admin.enableServer=false",
                        "4lw.commands.whitelist=ruok,srvr,stat,mntr",
                        "maxClientCnxns=0",
                        "",
                    ]
                )
            )

    def command(self):
        return [
            shutil.which("java") or "/usr/bin/java",
            "-Xmx256m",
            "-cp",
            CLASSPATH,
            f"-Dzookeeper.log.dir={self.base_dir}",
            "-Dzookeeper.root.logger=INFO,CONSOLE",
            "-Dzookeeper.jmx.log4j.disable=true",
            MAIN,
            self.cfg_path,
        ]

    def start(self, timeout=30):
        if not os.path.exists(ZK_JAR):
            raise RuntimeError(
                f"{ZK_JAR} is missing: apt-get install zookeeper (scripts/install-and-test.sh)"
            )
        self._write_config()
        return self._spawn(
            self.command(),
            lambda: four_letter(self.port) == "imok" and self._client_works(),
            "serve",
            timeout,
            cwd=self.base_dir,
        )

    def _client_works(self):
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.hosts, timeout=5)
        try:
            client.start(timeout=2)
            client.exists("/")
            return True
        except Exception:
            return False
        finally:
            try:
                client.stop()
                client.close()
            except Exception:
                pass

    def stop(self, timeout=30):
        """SIGTERM and wait (SIGKILL after ``timeout``)."""
        self.terminate(timeout)

    def restart(self, timeout=30):
        """Stop and start again on the same port and data dir."""
        self.stop()
        return self.start(timeout)

    def cleanup(self):
        self.kill()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
