"""Several in-process ZooKeeperCoordinators on a private reactor thread, for tests.

Each :class:`CoordinatorNode` is one broker's coordinator (its own
BrokerConfig broker id, data dir and kazoo session) on a real ZooKeeper. The
reactor is a private SelectReactor (not the global one) running in a daemon
thread, so these tests leave the global reactor alone; test code calls into
it with :meth:`ReactorThread.call`, which waits for Deferreds.
"""

import queue
import threading
import time

from twisted.internet import defer
from twisted.python import failure

from pluglog.config import BrokerConfig


class ReactorThread:
    def __init__(self):
        from twisted.internet.selectreactor import SelectReactor

        self.reactor = SelectReactor()
        self.thread = threading.Thread(
            target=self.reactor.run, kwargs={"installSignalHandlers": False}, daemon=True
        )
        self.thread.start()

    def call(self, fn, *args, timeout=30, **kwargs):
        """Run ``fn`` on the reactor; wait for its result (a Deferred's too)."""
        answer = queue.Queue()

        def run():
            d = defer.maybeDeferred(fn, *args, **kwargs)
            d.addBoth(answer.put)

        self.reactor.callFromThread(run)
        try:
            result = answer.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"{fn!r} did not finish within {timeout}s") from None
        if isinstance(result, failure.Failure):
            result.raiseException()
        return result

    def wait(self, predicate, timeout=20, interval=0.05):
        """Poll ``predicate()`` (run on the reactor) until true.

        A predicate that raises (``partition_state(...).isr`` while the state
        is still None, a znode not written yet) counts as not yet true: under
        load the state it reads can arrive after the first polls. The last
        exception is named if the wait times out.
        """
        deadline = time.monotonic() + timeout
        last_error = None
        while True:
            try:
                value = self.call(predicate)
            except Exception as exc:  # noqa: BLE001 - reported on timeout
                value, last_error = None, exc
            if value:
                return value
            if time.monotonic() > deadline:
                why = f" (last raised {last_error!r})" if last_error is not None else ""
                raise AssertionError(f"condition {predicate!r} not met within {timeout}s{why}")
            time.sleep(interval)

    def stop(self):
        self.reactor.callFromThread(self.reactor.stop)
        self.thread.join(10)


class CoordinatorNode:
    """One broker's ZooKeeperCoordinator, recording the events it emits."""

    def __init__(self, rt, zk_connect, broker_id, base_dir, **settings):
        from pluglog.coordination.zookeeper import make_zookeeper

        self.rt = rt
        self.broker_id = broker_id
        changes = {
            "broker_id": broker_id,
            "coordinator": "zookeeper",
            "zookeeper_connect": zk_connect,
            "zookeeper_session_timeout_ms": 4000,
            "zookeeper_connection_timeout_ms": 10000,
            "data_dir": str(base_dir / f"broker-{broker_id}"),
            "advertised_host": "127.0.0.1",
            "advertised_port": 19000 + broker_id,
            "controlled_shutdown_timeout_ms": 10000,
            "leader_imbalance_check_interval_seconds": 300,
        }
        changes.update(settings)
        self.config = BrokerConfig().replace(**changes)
        self.co = make_zookeeper(self.config, rt.reactor)
        self.events = []
        rt.call(self.co.add_listener, lambda event, payload: self.events.append((event, payload)))

    def start(self):
        self.rt.call(self.co.start)
        return self

    def stop(self):
        self.rt.call(self.co.stop)

    def call(self, name, *args, **kwargs):
        return self.rt.call(getattr(self.co, name), *args, **kwargs)

    def state(self, topic, partition):
        return self.rt.call(self.co.partition_state, topic, partition)

    def events_of(self, kind):
        return self.rt.call(lambda: [p for e, p in self.events if e == kind])
