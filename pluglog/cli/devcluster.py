"""``pluglog dev-cluster``: a local cluster for trying pluglog out.

Starts its own ZooKeeper (the Debian ``zookeeper`` package) and N ``twistd
pluglog --coordinator zookeeper`` broker processes on 127.0.0.1, each with
its own data dir, log file and port, in a directory of your choice (kept) or
a temporary one (removed at the end). Prints the bootstrap string, then
waits; Ctrl-C or SIGTERM stops the brokers (their clean SIGTERM shutdown:
controlled shutdown, flushed logs) and then ZooKeeper. A broker that exits
on its own is reported and stops the cluster.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from pluglog.coordination.zkserver import ZK_JAR, ZooKeeperServer, free_port

TWISTD = "from twisted.scripts.twistd import run; run()"


class DevClusterError(Exception):
    """The cluster could not start; the message says why."""


def add_parser(sub, positive):
    parser = sub.add_parser(
        "dev-cluster",
        help="run a local N-broker cluster with its own ZooKeeper until Ctrl-C",
    )
    parser.add_argument("--brokers", type=positive, default=3, help="broker count (default 3)")
    parser.add_argument(
        "--dir", default=None, help="directory for data and logs (default: a temporary one)"
    )
    parser.add_argument(
        "--base-port",
        type=positive,
        default=None,
        help="broker N listens on BASE+N-1 (default: free ports)",
    )
    parser.set_defaults(run=run, standalone=True)


def broker_command(node, port, data_dir, log_file, zk_connect):
    return [
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
        "--set",
        "zookeeper.session.timeout.ms=6000",
        "--set",
        "controlled.shutdown.timeout.ms=10000",
    ]


def _listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class DevCluster:
    def __init__(self, root, brokers, base_port=None):
        self.root = root
        self.count = brokers
        self.ports = [(base_port + i) if base_port else free_port() for i in range(brokers)]
        self.zk = ZooKeeperServer(os.path.join(root, "zookeeper"))
        self.procs = {}

    @property
    def bootstrap(self):
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def start(self, timeout=60):
        if not os.path.exists(ZK_JAR):
            raise DevClusterError(
                f"{ZK_JAR} is missing: install the Debian 'zookeeper' package "
                "(scripts/install-and-test.sh does)"
            )
        self.zk.start()
        zk_connect = self.zk.connect_string("/pluglog")
        for node, port in enumerate(self.ports, start=1):
            data = os.path.join(self.root, f"broker-{node}")
            os.makedirs(data, exist_ok=True)
            log_file = os.path.join(self.root, f"broker-{node}.log")
            self.procs[node] = subprocess.Popen(
                broker_command(node, port, data, log_file, zk_connect),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        waiting = dict(zip(self.procs, self.ports))
        while waiting:
            for node, port in list(waiting.items()):
                if self.procs[node].poll() is not None:
                    raise DevClusterError(
                        f"broker {node} exited with {self.procs[node].returncode}; "
                        f"see {os.path.join(self.root, f'broker-{node}.log')}"
                    )
                if _listening(port):
                    del waiting[node]
            if time.monotonic() > deadline:
                raise DevClusterError(f"brokers {sorted(waiting)} did not listen in {timeout}s")
            time.sleep(0.1)

    def exited(self):
        return {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.zk.stop()


def run(_client, args):
    keep = args.dir is not None
    root = os.path.abspath(args.dir) if keep else tempfile.mkdtemp(prefix="pluglog-dev-")
    os.makedirs(root, exist_ok=True)
    cluster = DevCluster(root, args.brokers, args.base_port)
    stopping = []

    def on_signal(signum, _frame):
        stopping.append(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    status = 0
    try:
        cluster.start()
        print(f"ZooKeeper: {cluster.zk.connect_string('/pluglog')}", flush=True)
        print(f"data and logs: {root}", flush=True)
        print(f"bootstrap: {cluster.bootstrap}", flush=True)
        print("Ctrl-C stops the cluster.", flush=True)
        while not stopping:
            gone = cluster.exited()
            if gone:
                print(f"pluglog: broker(s) exited: {gone}; stopping", file=sys.stderr)
                status = 1
                break
            time.sleep(0.2)
    except DevClusterError as exc:
        print(f"pluglog: {exc}", file=sys.stderr)
        status = 1
    finally:
        cluster.stop()
        for signum, handler in old.items():
            signal.signal(signum, handler)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    print("cluster stopped", flush=True)
    return status
