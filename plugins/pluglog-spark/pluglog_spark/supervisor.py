"""SupervisedProcess: an IService that keeps one child process running.

The child is spawned with ``reactor.spawnProcess`` when the service starts.
When it exits while the service runs, it is started again after a delay that
doubles from ``min_delay`` up to ``max_delay``; a run that lasted longer than
``stable_after`` seconds resets the delay. ``stopService`` sends SIGTERM,
SIGKILL after ``stop_timeout`` seconds, and returns a Deferred that fires once
the child and everything holding its output pipes (Spark's JVM) are gone, so
the broker does not exit under a running query.

Output lines from the child go to the broker's twisted log, tagged with the
service name. Lines that are JSON objects carrying ``batchId`` are progress
reports and are logged as such; ``last_progress`` keeps the latest one.
Time is read only through the reactor (``IReactorTime.seconds``), so the
restart policy runs under ``task.Clock`` in tests.
"""

import json
import signal

from twisted.application import service
from twisted.internet import defer, error, protocol
from twisted.logger import Logger

log = Logger(namespace="pluglog_spark.supervisor")


class _ChildProtocol(protocol.ProcessProtocol):
    def __init__(self, owner):
        self.owner = owner
        self.buffers = {1: b"", 2: b""}
        self.ended = defer.Deferred()

    def childDataReceived(self, fd, data):
        buffered = self.buffers.get(fd, b"") + data
        *lines, self.buffers[fd] = buffered.split(b"\n")
        for line in lines:
            self.owner.line_received(line.decode("utf-8", "replace").rstrip("\r"))

    def processEnded(self, reason):
        for rest in self.buffers.values():
            if rest:
                self.owner.line_received(rest.decode("utf-8", "replace"))
        self.buffers = {1: b"", 2: b""}
        self.owner.child_ended(self, reason)
        self.ended.callback(None)


class SupervisedProcess(service.Service):
    """Run ``argv`` as a child and restart it with backoff until stopped."""

    def __init__(
        self,
        reactor,
        name,
        argv,
        env,
        min_delay=1.0,
        max_delay=60.0,
        stop_timeout=30.0,
        stable_after=60.0,
    ):
        self.reactor = reactor
        self.name = name
        self.argv = list(argv)
        self.env = dict(env)
        self.min_delay = min_delay
        self.max_delay = max_delay
        self.stop_timeout = stop_timeout
        self.stable_after = stable_after
        self.delay = min_delay
        self.child = None
        self.transport = None
        self.started_at = None
        self.restart_call = None
        self.starts = 0
        self.last_progress = None

    @property
    def pid(self):
        return self.transport.pid if self.transport is not None else None

    def startService(self):
        service.Service.startService(self)
        self._spawn()

    def _spawn(self):
        self.restart_call = None
        self.child = _ChildProtocol(self)
        self.started_at = self.reactor.seconds()
        self.starts += 1
        self.transport = self.reactor.spawnProcess(
            self.child, self.argv[0], self.argv, env=self.env
        )
        log.info(
            "{name}: started child pid {pid} (start #{starts})",
            name=self.name,
            pid=self.transport.pid,
            starts=self.starts,
        )

    def line_received(self, line):
        if not line.strip():
            return
        if line.startswith("{"):
            try:
                report = json.loads(line)
            except ValueError:
                report = None
            if isinstance(report, dict) and "batchId" in report:
                self.last_progress = report
                log.info(
                    "{name}: batch {batch} read {rows} rows, end offsets {end}",
                    name=self.name,
                    batch=report["batchId"],
                    rows=report.get("numInputRows"),
                    end=json.dumps(report.get("endOffsets"), sort_keys=True),
                    progress=report,
                )
                return
        log.info("{name}: {line}", name=self.name, line=line)

    def child_ended(self, child, reason):
        if child is not self.child:
            return
        ran = self.reactor.seconds() - self.started_at
        self.child = self.transport = None
        code = getattr(reason.value, "exitCode", None)
        sig = getattr(reason.value, "signal", None)
        if not self.running:
            log.info(
                "{name}: child stopped (exit {code}, signal {sig})",
                name=self.name,
                code=code,
                sig=sig,
            )
            return
        if ran >= self.stable_after:
            self.delay = self.min_delay
        wait = self.delay
        self.delay = min(self.delay * 2, self.max_delay)
        log.warn(
            "{name}: child exited (exit {code}, signal {sig}) after {ran:.1f}s; "
            "restarting in {wait:.1f}s",
            name=self.name,
            code=code,
            sig=sig,
            ran=ran,
            wait=wait,
        )
        self.restart_call = self.reactor.callLater(wait, self._spawn)

    def stopService(self):
        service.Service.stopService(self)
        if self.restart_call is not None and self.restart_call.active():
            self.restart_call.cancel()
        self.restart_call = None
        if self.child is None:
            return defer.succeed(None)
        ended = self.child.ended
        transport = self.transport
        self._signal(transport, signal.SIGTERM)
        killer = self.reactor.callLater(self.stop_timeout, self._signal, transport, signal.SIGKILL)

        def done(result):
            if killer.active():
                killer.cancel()
            return result

        return ended.addBoth(done)

    def _signal(self, transport, signum):
        try:
            transport.signalProcess(signum)
        except (error.ProcessExitedAlready, OSError):
            pass
