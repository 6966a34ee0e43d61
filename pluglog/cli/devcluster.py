"""``pluglog dev-cluster``: a local cluster for trying pluglog out.

Starts its own ZooKeeper (the Debian ``zookeeper`` package) and N ``twistd
pluglog --coordinator zookeeper`` broker processes on 127.0.0.1, each with
its own data dir, log file and port, in a directory of your choice (kept) or
a temporary one (removed at the end). Prints each broker's address, pid, log
file and the commands that stop and restart it, then the bootstrap string,
and waits; Ctrl-C or SIGTERM stops the brokers (their clean SIGTERM
shutdown: controlled shutdown, flushed logs) and then ZooKeeper.

A broker that dies (``kill -9 PID``, a crash) is reported in one line (id,
pid, exit code, log file, how to restart it) and the others keep serving, so
a failover can be watched. ``pluglog dev-cluster stop N`` and ``start N``
(:mod:`pluglog.cli.devcontrol`) stop and start one broker of the running
cluster. Only ZooKeeper dying ends the cluster.
"""

import argparse
import logging
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from pluglog.cli import devcontrol
from pluglog.coordination.zkserver import ZK_JAR, ZooKeeperServer, free_port

# argv[0] "twistd": its usage errors then read "twistd ...: <error>", not "-c ...".
TWISTD = "import sys; sys.argv[0] = 'twistd'; from twisted.scripts.twistd import run; run()"
#: Broker settings of every dev cluster (``--set`` adds and overrides).
SETTINGS = {
    "zookeeper.session.timeout.ms": "6000",
    "controlled.shutdown.timeout.ms": "10000",
}
START_TIMEOUT_S = 60


class DevClusterError(Exception):
    """The cluster could not start; the message says why."""


def _setting(text):
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def add_parser(sub, positive):
    parser = sub.add_parser(
        "dev-cluster",
        help="run a local N-broker cluster with its own ZooKeeper until Ctrl-C; "
        "stop/start/status act on a running one",
        description="Without an action: run the cluster until Ctrl-C. "
        "'stop N' and 'start N' stop (SIGTERM, or SIGKILL with --kill) and start "
        "broker N of the running dev cluster; 'status' shows its brokers.",
    )
    parser.add_argument(
        "action", nargs="?", choices=("stop", "start", "status"), help="act on a running cluster"
    )
    parser.add_argument("broker", nargs="?", type=positive, help="broker id for stop/start")
    parser.add_argument("--brokers", type=positive, default=3, help="broker count (default 3)")
    parser.add_argument(
        "--dir",
        default=None,
        help="directory for data and logs (default: a temporary one); "
        "for stop/start/status: the running cluster's (default: the last one started)",
    )
    parser.add_argument(
        "--base-port",
        type=positive,
        default=None,
        help="broker N listens on BASE+N-1 (default: free ports)",
    )
    parser.add_argument(
        "--set",
        type=_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker config for every broker, e.g. zookeeper.session.timeout.ms=3000 "
        "(repeatable)",
    )
    parser.add_argument("--kill", action="store_true", help="stop: SIGKILL (a crash)")
    parser.set_defaults(run=run, standalone=True)


def broker_command(node, port, data_dir, log_file, zk_connect, settings=None):
    command = [
        sys.executable,
        "-c",
        TWISTD,
        "-n",
        "--pidfile=",
        f"--logfile={log_file}",
        "pluglog",
        "--coordinator",
        "zookeeper",
        "--broker-id",
        str(node),
        "--listen",
        f"tcp:{port}:interface=127.0.0.1",
        "--advertised-listener",
        f"127.0.0.1:{port}",
        "--data-dir",
        data_dir,
        "--set",
        f"zookeeper.connect={zk_connect}",
    ]
    for key, value in {**SETTINGS, **dict(settings or ())}.items():
        command += ["--set", f"{key}={value}"]
    return command


def _listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


_ERROR = re.compile(r"\b[A-Z]\w*(Error|Exception): .*")


def _size(path):
    return os.path.getsize(path) if os.path.exists(path) else 0


def _tail(path, offset):
    """Non-empty lines of ``path`` from byte ``offset`` on."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()]


def describe_exit(code):
    """``-9 (SIGKILL)`` for a signal, else the number."""
    if code is not None and code < 0:
        try:
            return f"{code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return str(code)


class Broker:
    """One broker process of the dev cluster; started again on the same
    port, data dir and log."""

    def __init__(self, root, node, port):
        self.node = node
        self.port = port
        self.data = os.path.join(root, f"broker-{node}")
        self.log = os.path.join(root, f"broker-{node}.log")
        self.out = os.path.join(root, f"broker-{node}.out")  # stdout/stderr
        self.command = None
        self.proc = None
        self.status = "new"  # running, stopped, exited
        self._out_from = self._log_from = 0

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def spawn(self, command):
        os.makedirs(self.data, exist_ok=True)
        with open(self.log, "a", encoding="utf-8"):
            pass  # exists from the start: error messages name it
        self._out_from = _size(self.out)
        self._log_from = _size(self.log)
        self.command = command
        with open(self.out, "ab") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        self.status = "running"

    def last_words(self):
        """Why this run ended, if it said: the last ``SomeError: ...`` it
        wrote on stdout/stderr, else its first plain line there (a start-up
        failure's one line, not a hint or a traceback's frames), else the
        last ``SomeError: ...`` of its log; '' if none."""
        said = _tail(self.out, self._out_from)
        found = [_ERROR.search(line).group(0) for line in said if _ERROR.search(line)]
        if not found:
            found = [line for line in said if not line.startswith(("(", " ", "\t", "Traceback"))]
            found = found[:1]
        if not found:
            found = [
                _ERROR.search(line).group(0)
                for line in _tail(self.log, self._log_from)
                if _ERROR.search(line)
            ]
        return found[-1].strip()[:300] if found else ""

    def exit_report(self):
        """``exited with code 1: <why, if it said>; see <log> [and <stdout/stderr>]``."""
        words = self.last_words()
        reason = f": {words}" if words else ""
        logs = self.log
        if _size(self.out) > self._out_from:
            logs += f" and {self.out}"
        return f"exited with code {describe_exit(self.proc.returncode)}{reason}; see {logs}"


class DevCluster:
    def __init__(self, root, brokers, base_port=None, settings=None):
        self.root = root
        self.count = brokers
        self.settings = list(settings or ())
        self.brokers = {
            node: Broker(root, node, (base_port + node - 1) if base_port else free_port())
            for node in range(1, brokers + 1)
        }
        self.zk = ZooKeeperServer(os.path.join(root, "zookeeper"))
        self.control = None

    @property
    def ports(self):
        return [b.port for b in self.brokers.values()]

    @property
    def bootstrap(self):
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def _spawn(self, node):
        broker = self.brokers[node]
        zk_connect = self.zk.connect_string("/pluglog")
        broker.spawn(
            broker_command(node, broker.port, broker.data, broker.log, zk_connect, self.settings)
        )

    def _wait_listening(self, nodes, timeout, stopping=()):
        deadline = time.monotonic() + timeout
        waiting = set(nodes)
        while waiting:
            for node in sorted(waiting):
                broker = self.brokers[node]
                if broker.proc.poll() is not None:
                    broker.status = "exited"
                    raise DevClusterError(
                        f"broker {node} (pid {broker.pid}) {broker.exit_report()}"
                    )
                if _listening(broker.port):
                    waiting.discard(node)
            if stopping:
                raise DevClusterError("interrupted")
            if time.monotonic() > deadline:
                logs = ", ".join(self.brokers[n].log for n in sorted(waiting))
                raise DevClusterError(
                    f"brokers {sorted(waiting)} did not listen in {timeout}s; see {logs}"
                )
            time.sleep(0.1)

    def start(self, timeout=START_TIMEOUT_S):
        if not os.path.exists(ZK_JAR):
            raise DevClusterError(
                f"{ZK_JAR} is missing: install the Debian 'zookeeper' package "
                "(scripts/install-and-test.sh does)"
            )
        # The readiness probe's kazoo client logs connection noise while
        # ZooKeeper comes up; the banner is what a user should read.
        logging.getLogger("kazoo").addHandler(logging.NullHandler())
        try:
            self.zk.start()
        except RuntimeError:
            raise DevClusterError(f"ZooKeeper did not start; see {self.zk.log_path}") from None
        for node in self.brokers:
            self._spawn(node)
        self._wait_listening(self.brokers, timeout)

    # -- one broker, asked by ``dev-cluster stop N`` / ``start N`` ------------------

    def start_broker(self, node, stopping=()):
        broker = self.brokers.get(node)
        if broker is None:
            return False, f"no broker {node}: this dev cluster has brokers 1-{self.count}"
        if broker.proc.poll() is None:
            return False, f"broker {node} is already running (pid {broker.pid})"
        self._spawn(node)
        try:
            self._wait_listening([node], START_TIMEOUT_S, stopping)
        except DevClusterError as exc:
            return False, f"{exc} (try again: {self.command('start', node)})"
        return True, f"broker {node} started: pid {broker.pid}, 127.0.0.1:{broker.port}"

    def stop_broker(self, node, kill=False):
        broker = self.brokers.get(node)
        if broker is None:
            return False, f"no broker {node}: this dev cluster has brokers 1-{self.count}"
        if broker.proc.poll() is not None:
            return False, f"broker {node} is not running"
        broker.status = "stopped"  # on request: not reported as a death
        broker.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            broker.proc.wait(45)
        except subprocess.TimeoutExpired:
            broker.proc.kill()
            broker.proc.wait()
        how = "killed (SIGKILL)" if kill else "stopped (SIGTERM, controlled shutdown)"
        return True, (
            f"broker {node} (pid {broker.pid}) {how}, exit code "
            f"{describe_exit(broker.proc.returncode)}; see {broker.log}"
        )

    def command(self, action, node):
        return (
            f"{devcontrol.cli_prefix()} dev-cluster {action} {node} --dir {shlex.quote(self.root)}"
        )

    def deaths(self):
        """Brokers that exited on their own since the last call."""
        dead = []
        for broker in self.brokers.values():
            if broker.status == "running" and broker.proc.poll() is not None:
                broker.status = "exited"
                dead.append(broker)
        return dead

    def state(self):
        return {
            "supervisor_pid": os.getpid(),
            "control": self.control,
            "bootstrap": self.bootstrap,
            "zookeeper": {
                "connect": self.zk.connect_string("/pluglog"),
                "pid": self.zk.proc.pid if self.zk.proc else None,
                "log": self.zk.log_path,
            },
            "brokers": {
                str(b.node): {
                    "pid": b.pid,
                    "port": b.port,
                    "status": b.status,
                    "log": b.log,
                    "data_dir": b.data,
                    "command": b.command,
                }
                for b in self.brokers.values()
            },
        }

    def stop(self):
        for broker in self.brokers.values():
            if broker.proc and broker.proc.poll() is None:
                broker.proc.send_signal(signal.SIGTERM)
        for broker in self.brokers.values():
            if broker.proc is None:
                continue
            try:
                broker.proc.wait(30)
            except subprocess.TimeoutExpired:
                broker.proc.kill()
                broker.proc.wait()
        self.zk.stop()


def _print_banner(cluster, root):
    zk = cluster.zk
    print(f"ZooKeeper: {zk.connect_string('/pluglog')}", flush=True)
    print(f"  pid {zk.proc.pid}, log {zk.log_path}")
    for node, broker in cluster.brokers.items():
        print(f"broker {node}: 127.0.0.1:{broker.port}, pid {broker.pid}, log {broker.log}")
        print(f"  stop:    {cluster.command('stop', node)}   (or: kill -9 {broker.pid})")
        print(f"  restart: {cluster.command('start', node)}")
    print(f"data and logs: {root}")
    print(f"bootstrap: {cluster.bootstrap}")
    print("Ctrl-C stops the cluster.", flush=True)


def run(client, args):
    if args.action is not None:
        return devcontrol.run_action(client, args)
    keep = args.dir is not None
    root = os.path.abspath(args.dir) if keep else tempfile.mkdtemp(prefix="pluglog-dev-")
    os.makedirs(root, exist_ok=True)
    other = devcontrol.already_running(root)
    if other:
        print(f"pluglog: a dev cluster already runs in {root} (pid {other})", file=sys.stderr)
        return 1
    cluster = DevCluster(root, args.brokers, args.base_port, args.set)
    stopping = []

    def on_signal(signum, _frame):
        stopping.append(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    status = 0
    server = None
    try:
        cluster.start()
        cluster.control = devcontrol.control_path(root)
        if os.path.exists(cluster.control):
            os.unlink(cluster.control)  # left by a cluster that was killed
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(cluster.control)
        server.listen(4)
        devcontrol.write_state(root, cluster.state())
        with open(devcontrol.current_pointer(), "w", encoding="utf-8") as handle:
            handle.write(root + "\n")
        _print_banner(cluster, root)
        while not stopping:
            for broker in cluster.deaths():
                print(
                    f"pluglog: broker {broker.node} (pid {broker.pid}) {broker.exit_report()} "
                    f"(the other brokers keep serving; restart it: "
                    f"{cluster.command('start', broker.node)})",
                    file=sys.stderr,
                    flush=True,
                )
                devcontrol.write_state(root, cluster.state())
            if cluster.zk.proc.poll() is not None:
                print(
                    f"pluglog: ZooKeeper (pid {cluster.zk.proc.pid}) exited with code "
                    f"{describe_exit(cluster.zk.proc.returncode)}; log: {cluster.zk.log_path}; "
                    "stopping the cluster",
                    file=sys.stderr,
                )
                status = 1
                break
            readable, _, _ = select.select([server], [], [], 0.2)
            if readable:
                conn, _ = server.accept()
                devcontrol.answer(cluster, conn, stopping)
                devcontrol.write_state(root, cluster.state())
    except DevClusterError as exc:
        print(f"pluglog: {exc}", file=sys.stderr)
        status = 1
    finally:
        if server is not None:
            server.close()
            os.unlink(cluster.control)
            if os.path.dirname(cluster.control) != root:  # a short temporary one
                os.rmdir(os.path.dirname(cluster.control))
        cluster.stop()
        for signum, handler in old.items():
            signal.signal(signum, handler)
        devcontrol.forget(root)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    print("cluster stopped", flush=True)
    return status
