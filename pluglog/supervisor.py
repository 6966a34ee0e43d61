"""Several broker processes on one host, run as one unit: ``twistd pluglog --workers N``.

A Python broker uses one core. With ``--workers N`` the ``twistd`` process
becomes a supervisor of N broker processes, each a member of the same
ZooKeeper cluster with its own broker id (``--broker-id`` + i), port (the
``--listen`` port + i, and likewise ``--advertised-listener`` and
``--http``) and data dir (``<data-dir>/worker-<i>``). Kafka clients spread
the load themselves: they send each partition's requests to its leader, and
the controller spreads leaderships over the workers.

The supervisor owns the workers' lifecycle: it starts them, forwards each
line they log into its own log (prefixed ``worker <i>``), restarts a worker
that exits or dies (after 1 s, doubling to 30 s while it keeps failing,
back to 1 s once it has run a minute), and on its own stop sends each
worker SIGTERM (the broker's controlled shutdown) and waits for all of them,
SIGKILLing any still running after ``stop_timeout`` seconds.
"""

import os

from twisted.application import service
from twisted.internet import defer, error, protocol
from twisted.logger import Logger

log = Logger()

FIRST_DELAY_S = 1.0
MAX_DELAY_S = 30.0
HEALTHY_AFTER_S = 60.0


class _Worker(protocol.ProcessProtocol):
    """One worker process: its output into the supervisor's log, its end reported."""

    def __init__(self, supervisor, number):
        self.supervisor = supervisor
        self.number = number
        self.started_at = supervisor.reactor.seconds()
        self._partial = {1: b"", 2: b""}
        self.ended = defer.Deferred()

    def childDataReceived(self, fd, data):  # noqa: N802 - Twisted name
        lines = (self._partial.get(fd, b"") + data).split(b"\n")
        self._partial[fd] = lines.pop()
        for line in lines:
            if line.strip():
                log.info("worker {n}: {line}", n=self.number, line=line.decode("utf-8", "replace"))

    def processEnded(self, reason):  # noqa: N802 - Twisted name
        value = reason.value
        code = getattr(value, "exitCode", None)
        signal = getattr(value, "signal", None)
        self.ended.callback(None)
        self.supervisor.worker_ended(self, code, signal)


class WorkerSupervisor(service.Service):
    """Runs ``commands`` (one argv per worker) and keeps them running."""

    stop_timeout = 60.0

    def __init__(self, commands, reactor=None, env=None):
        from twisted.internet import reactor as default_reactor

        self.commands = list(commands)
        self.reactor = reactor or default_reactor
        self.env = env
        self.workers = {}
        self.delays = dict.fromkeys(range(len(self.commands)), FIRST_DELAY_S)
        self.restarts = dict.fromkeys(range(len(self.commands)), 0)
        self._pending = {}
        self.stopping = False

    def startService(self):  # noqa: N802 - Twisted name
        super().startService()
        log.info("supervising {n} broker workers", n=len(self.commands))
        for number in range(len(self.commands)):
            self._spawn(number)

    def _spawn(self, number):
        self._pending.pop(number, None)
        if self.stopping:
            return
        worker = _Worker(self, number)
        argv = self.commands[number]
        env = os.environ if self.env is None else self.env
        self.reactor.spawnProcess(worker, argv[0], argv, env=env)
        self.workers[number] = worker
        log.info("worker {n} started (pid {pid})", n=number, pid=worker.transport.pid)

    def worker_ended(self, worker, code, signal):
        number = worker.number
        if self.workers.get(number) is worker:
            del self.workers[number]
        how = f"signal {signal}" if signal is not None else f"exit code {code}"
        if self.stopping:
            log.info("worker {n} stopped ({how})", n=number, how=how)
            return
        ran = self.reactor.seconds() - worker.started_at
        if ran >= HEALTHY_AFTER_S:
            self.delays[number] = FIRST_DELAY_S
        delay = self.delays[number]
        self.delays[number] = min(delay * 2, MAX_DELAY_S)
        self.restarts[number] += 1
        log.warn(
            "worker {n} ended ({how}) after {ran:.1f} s; restarting it in {delay:.0f} s",
            n=number,
            how=how,
            ran=ran,
            delay=delay,
        )
        self._pending[number] = self.reactor.callLater(delay, self._spawn, number)

    def stopService(self):  # noqa: N802 - Twisted name
        super().stopService()
        self.stopping = True
        for call in self._pending.values():
            if call.active():
                call.cancel()
        self._pending.clear()
        running = list(self.workers.values())
        for worker in running:
            _signal(worker, "TERM")
        done = defer.DeferredList([w.ended for w in running])
        killer = self.reactor.callLater(self.stop_timeout, self._kill, running)
        done.addBoth(lambda _: killer.cancel() if killer.active() else None)
        return done

    def _kill(self, running):
        for worker in running:
            if not worker.ended.called:
                log.warn("worker {n} ignored SIGTERM; killing it", n=worker.number)
                _signal(worker, "KILL")


def _signal(worker, name):
    try:
        worker.transport.signalProcess(name)
    except error.ProcessExitedAlready:
        pass
