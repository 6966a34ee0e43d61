"""Starting, watching and stopping a server subprocess on 127.0.0.1.

Shared by the ZooKeeper server of ``pluglog dev-cluster`` and the tests
(:mod:`pluglog.coordination.zkserver`) and the tests' broker processes
(``tests/broker_process.py``): output goes to a log file that error messages
quote, start-up waits until a readiness check passes (failing early if the
process exits), SIGTERM falls back to SIGKILL after a timeout.
"""

import os
import random
import signal
import socket
import subprocess
import time

#: ``low-high``: the ports :func:`free_port` hands out. The test suite gives
#: each pytest-xdist worker a slice of its own below Linux's ephemeral range
#: (32768-60999), so two workers never pick the same port and no outgoing
#: connection takes a picked port before its server binds it.
PORT_RANGE_ENV = "PLUGLOG_PORT_RANGE"

_cursor = {}


def _bindable(port):
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    Without :data:`PORT_RANGE_ENV` the kernel picks one (an ephemeral
    port). With it, ports of that range are tried in turn from a random start,
    so one process does not hand out the same port twice until it has gone
    round the whole range.
    """
    span = os.environ.get(PORT_RANGE_ENV)
    if not span:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    low, high = (int(part) for part in span.split("-"))
    size = high - low + 1
    position = _cursor.get(span)
    if position is None:
        position = random.randrange(size)
    for step in range(size):
        port = low + (position + step) % size
        if _bindable(port):
            _cursor[span] = (position + step + 1) % size
            return port
    raise OSError(f"no free port in {PORT_RANGE_ENV}={span}")


class ChildProcess:
    """A subprocess with its output in ``log_path``; subclasses build the
    command and say when it is ready."""

    #: The name error messages use ("broker", "zookeeper").
    name = "process"

    def __init__(self, log_path):
        self.log_path = log_path
        self.proc = None
        self._log = None
        #: Where this start's output begins in the log (restarts append).
        self._log_start = 0

    def _spawn(self, command, ready, what, timeout, **popen):
        """Start ``command``; return once ``ready()`` is true. Raises
        RuntimeError (with the log) if it exits first or does not ``what``
        within ``timeout`` seconds (then it is killed)."""
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed by stop/kill
        self._log_start = self._log.tell()
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, **popen)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.log()}"
                )
            if ready():
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"{self.name} did not {what} within {timeout}s:\n{self.log()}")

    def log(self):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def log_since_start(self):
        """The output of the latest start only."""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(self._log_start)
                return handle.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def terminate(self, timeout=30):
        """SIGTERM and wait; SIGKILL after ``timeout`` seconds. True if it
        exited on SIGTERM (or was not running)."""
        obeyed = True
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                obeyed = False
        self._close_log()
        return obeyed

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
