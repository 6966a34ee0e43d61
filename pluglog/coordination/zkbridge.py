"""The kazoo <-> reactor bridge: blocking ZooKeeper work off the reactor thread.

kazoo is a threaded client: its calls block and its watches fire on its own
threads. The reactor thread never calls it. Instead each piece of ZooKeeper
work runs as a job on a :class:`SerialWorker`, one thread that runs jobs in
submission order (so a topic is announced before its partition states, and
the controller handles one event at a time, like Kafka's controller event
thread). Results come back to the reactor with ``reactor.callFromThread``,
as Deferreds (:meth:`SerialWorker.submit`) or plain calls
(:meth:`SerialWorker.deliver`).

:func:`connect` starts a KazooClient, logging one line per retry, and gives
up with a ConfigError after ``zookeeper.connection.timeout.ms``.
"""

import time

from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python import failure
from twisted.python.threadpool import ThreadPool

from pluglog.errors import ConfigError

log = Logger()

#: Errors of a job while the session is gone: the session restore redoes it.
DISCONNECTED = (ConnectionLoss, SessionExpiredError, ConnectionClosedError)


class SerialWorker:
    """One thread, jobs in order; safe to post to from any thread."""

    def __init__(self, reactor, name):
        self.reactor = reactor
        self.pool = ThreadPool(minthreads=1, maxthreads=1, name=name)
        self.started = False

    def start(self):
        if not self.started:
            self.pool.start()
            self.started = True

    def stop(self):
        if self.started:
            self.started = False
            self.pool.stop()

    def post(self, fn, *args, **kwargs):
        """Run ``fn`` on the worker; exceptions are logged, not raised."""
        if self.started:
            self.pool.callInThread(self._guarded, fn, args, kwargs)

    def _guarded(self, fn, args, kwargs):
        try:
            fn(*args, **kwargs)
        except Exception:
            self.deliver(log.failure, "ZooKeeper job {job} failed", failure.Failure(), job=fn)

    def submit(self, fn, *args, **kwargs):
        """Run ``fn`` on the worker; a Deferred that fires on the reactor."""
        if not self.started:
            return defer.fail(ConfigError("the ZooKeeper coordinator is not running"))
        d = defer.Deferred()

        def fire(ok, result):
            if not d.called:  # a caller's timeout may have cancelled it
                (d.callback if ok else d.errback)(result)

        def done(ok, result):
            self.reactor.callFromThread(fire, ok, result)

        self.pool.callInThreadWithCallback(done, fn, *args, **kwargs)
        return d

    def deliver(self, fn, *args, **kwargs):
        """Call ``fn`` on the reactor thread (from the worker or kazoo's threads)."""
        self.reactor.callFromThread(fn, *args, **kwargs)


def connect(connect_string, session_timeout_ms, connection_timeout_ms, say):
    """Start and return a connected KazooClient (blocking; call off the reactor).

    ``say(message)`` logs one line per retry. Gives up with ConfigError once
    ``connection_timeout_ms`` (0: the session timeout) has passed."""
    from kazoo.client import KazooClient
    from kazoo.retry import KazooRetry

    budget = (connection_timeout_ms or session_timeout_ms) / 1000.0
    # client.retry(fn) (the coordinator's writes): a call cut off by a lost
    # connection or an expired session is redone once a session is back,
    # within the session timeout, as Kafka's ZooKeeperClient waits for its
    # connection rather than failing the request.
    command_retry = KazooRetry(
        max_tries=-1, delay=0.1, max_delay=1.0, deadline=session_timeout_ms / 1000.0
    )
    client = KazooClient(
        hosts=connect_string,
        timeout=session_timeout_ms / 1000.0,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
        command_retry=command_retry,
    )
    stopped = getattr(client, "_stopped", None)  # set by client.stop()
    if stopped is not None:
        command_retry.interrupt = stopped.is_set
    started = time.monotonic()
    event = client.start_async()
    attempt = 0
    while True:
        remaining = budget - (time.monotonic() - started)
        if event.wait(timeout=max(0.0, min(1.0, remaining))) and client.connected:
            return client
        if time.monotonic() - started >= budget:
            client.stop()
            client.close()
            raise ConfigError(
                f"could not connect to ZooKeeper at zookeeper.connect={connect_string} "
                f"within zookeeper.connection.timeout.ms={int(budget * 1000)}"
            )
        attempt += 1
        say(
            f"ZooKeeper at {connect_string} not reachable yet (attempt {attempt}, "
            f"{budget - (time.monotonic() - started):.1f}s left); retrying"
        )
