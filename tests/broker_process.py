"""Start and stop a real ``twistd -n pluglog`` broker process for tests.

The broker runs exactly as a user would run it (twistd, the plugin file, a
data dir, a loopback port), with its log captured to a file the tests can
read when something goes wrong.
"""

import os
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWISTD = "from twisted.scripts.twistd import run; run()"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class BrokerProcess:
    """A pluglog broker subprocess on 127.0.0.1."""

    def __init__(self, data_dir, port=None, settings=None, extra_args=()):
        self.data_dir = str(data_dir)
        self.port = port or free_port()
        self.settings = {"group.initial.rebalance.delay.ms": "0", **(settings or {})}
        self.extra_args = list(extra_args)
        self.proc = None
        self.log_path = os.path.join(self.data_dir, "..", f"broker-{self.port}.log")
        self._log = None

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
        self._log = open(self.log_path, "ab")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=ROOT
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not listen within {timeout}s:\n{self.log()}")

    def log(self):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def stop(self, timeout=30):
        """SIGTERM and wait: the clean shutdown path."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("broker ignored SIGTERM") from None
        self._close_log()
        return self.proc.returncode if self.proc else None

    def kill(self):
        """SIGKILL: the crash path."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._close_log()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def _close_log(self):
        if self._log:
            self._log.close()
            self._log = None
