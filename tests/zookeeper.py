"""Start and stop a real ZooKeeper (the Debian ``zookeeper`` package) for tests.

:class:`ZooKeeperProcess` runs ``java ... ZooKeeperServerMain zoo.cfg`` on
127.0.0.1 on a free port with its own data dir (the command measured in
``shared/environment.md`` §2: tickTime=500, minSessionTimeout=1000), waits for
``ruok`` -> ``imok`` and a working client connection, and can be stopped,
killed and restarted on the same port and data dir (a restart loses nothing).

The pytest fixtures (import them into a conftest) share one ZooKeeper per
test session and give every test its own chroot, ``127.0.0.1:PORT/t<uuid>``,
so tests never see each other's znodes.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid

import pytest

from tests.broker_process import free_port

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


class ZooKeeperProcess:
    """A standalone ZooKeeper server subprocess on 127.0.0.1."""

    def __init__(self, base_dir=None, port=None):
        self._own_dir = base_dir is None
        self.base_dir = str(base_dir or tempfile.mkdtemp(prefix="pluglog-zk-"))
        self.port = port or free_port()
        self.data_dir = os.path.join(self.base_dir, "data")
        self.log_path = os.path.join(self.base_dir, "zookeeper.log")
        self.cfg_path = os.path.join(self.base_dir, "zoo.cfg")
        self.proc = None
        self._log = None

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
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.command(), stdout=self._log, stderr=subprocess.STDOUT, cwd=self.base_dir
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"zookeeper exited with {self.proc.returncode}:\n{self.log()}")
            if four_letter(self.port) == "imok" and self._client_works():
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"zookeeper did not serve within {timeout}s:\n{self.log()}")

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

    def log(self):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def stop(self, timeout=30):
        """SIGTERM and wait."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_log()

    def kill(self):
        """SIGKILL: the crash path."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._close_log()

    def restart(self, timeout=30):
        """Stop and start again on the same port and data dir."""
        self.stop()
        return self.start(timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def cleanup(self):
        self.kill()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def _close_log(self):
        if self._log:
            self._log.close()
            self._log = None


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
