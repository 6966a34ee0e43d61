"""Start and stop a real ``twistd -n pluglog`` broker process for tests.

The broker runs exactly as a user would run it (twistd, the plugin file, a
data dir, a loopback port), with its log captured to a file the tests can
read when something goes wrong.
"""

import os
import socket
import subprocess
import sys
from typing import NamedTuple

from pluglog.childprocess import ChildProcess, free_port

__all__ = ["ROOT", "TWISTD", "BrokerProcess", "Exited", "assert_refused", "free_port"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWISTD = "from twisted.scripts.twistd import run; run()"


class Exited(NamedTuple):
    """How a broker process that was expected to refuse to start ended."""

    returncode: int
    log: str  # stdout: twistd logs there (--logfile=-)
    stderr: str


def assert_refused(exited, *fragments):
    """A start-up failure as an operator must see it: a non-zero exit, the
    reason as one line on stderr (the last) and in the log, no traceback and
    no claim of a clean stop."""
    assert exited.returncode > 0, exited
    last = exited.stderr.strip().splitlines()[-1] if exited.stderr.strip() else ""
    for fragment in fragments:
        assert fragment in last, (fragment, exited)
        assert fragment in exited.log, (fragment, exited)
    everything = exited.log + exited.stderr
    assert "Traceback" not in everything, exited
    assert "stopped cleanly" not in everything, exited
    return last


class BrokerProcess(ChildProcess):
    """A pluglog broker subprocess on 127.0.0.1."""

    name = "broker"

    def __init__(self, data_dir, port=None, settings=None, extra_args=(), nofile=None, root=None):
        self.data_dir = str(data_dir)
        #: the checkout whose pluglog runs (benches compare another one's)
        self.root = root or ROOT
        #: (soft, hard) descriptor limits the broker process starts with
        self.nofile = nofile
        #: a port free_port() picked may be taken before the broker binds it
        #: (another test run on the machine); start() then picks another
        self._port_picked = not port
        self.port = port or free_port()
        self.settings = {"group.initial.rebalance.delay.ms": "0", **(settings or {})}
        self.extra_args = list(extra_args)
        super().__init__(os.path.join(self.data_dir, "..", f"broker-{self.port}.log"))

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def command(self):
        cmd = [
            sys.executable,
            "-c",
            TWISTD,
            "-n",
            "--pidfile=",
            "--logfile=-",
            "pluglog",
            "--listen",
            f"tcp:{self.port}:interface=127.0.0.1",
            "--advertised-listener",
            f"127.0.0.1:{self.port}",
            "--data-dir",
            self.data_dir,
        ]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd + self.extra_args

    def start(self, timeout=30):
        os.makedirs(self.data_dir, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [self.root, env.get("PYTHONPATH")]))
        for attempt in range(3):
            try:
                return self._spawn(
                    self.command(),
                    self._listening,
                    "listen",
                    timeout,
                    env=env,
                    cwd=self.root,
                    preexec_fn=self._limits if self.nofile else None,
                )
            except RuntimeError:
                taken = "Address already in use" in self.log_since_start()
                if not (taken and self._port_picked and attempt < 2):
                    raise
            self._close_log()
            self.port = free_port()
            self.log_path = os.path.join(self.data_dir, "..", f"broker-{self.port}.log")

    def _limits(self):
        """In the broker's process, before it runs: its descriptor limits."""
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, self.nofile)

    def run_until_exit(self, timeout=20):
        """Run the broker expecting it to exit on its own (a refused start);
        one still running after ``timeout`` seconds gets SIGTERM. Returns
        :class:`Exited` with its stdout and stderr apart."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [self.root, env.get("PYTHONPATH")]))
        proc = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=self.root,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            out, err = proc.communicate(timeout=60)
        return Exited(proc.returncode, out, err)

    def _listening(self):
        # The broker's own word first: a port that accepts connections may
        # belong to some other process while this one fails to bind it.
        if " listening on " not in self.log_since_start():
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def stop(self, timeout=30):
        """SIGTERM and wait: the clean shutdown path."""
        if not self.terminate(timeout):
            raise RuntimeError("broker ignored SIGTERM")
        return self.proc.returncode if self.proc else None
