"""Where a broker's time goes: GC pauses, reactor turns and fsyncs, from inside the process.

pluglog has no setting that reports any of these (its metrics count requests and
bytes; ``pluglog.service.tune_gc`` only sets the collector's threshold), so
bench/ starts the broker through this module instead of plain twistd::

    python3 -c "import sys; sys.path.insert(0, 'bench'); import broker_probe; \\
        broker_probe.install('/tmp/probe-%(pid)s.json'); \\
        from twisted.scripts.twistd import run; run()" -n pluglog ...

``install`` hooks ``gc.callbacks`` (the time from each collection's start to
its stop, by generation), wraps the epoll reactor's poller, so a reactor
turn is the time from one ``epoll_wait`` returning to the next one being
called (the work the reactor does between two waits, during which no other
request is read), and times ``os.fsync`` / ``os.fdatasync`` (what
``--fsync always`` adds to a turn): ``fsync`` counts those made on the
reactor thread, ``fsync_threads`` those of other threads (the checkpoint's
background sync), which hold no turn. SIGUSR2 writes what was seen since the
last SIGUSR2 to the file (JSON) and starts over, so the bench brackets each
load level with two signals. The hooks cost two clock reads per turn, collection and fsync.
"""

import gc
import json
import os
import signal
import threading
import time
from array import array


class Probe:
    def __init__(self, path):
        self.path = path
        self.reset()

    def reset(self):
        self.gc = {0: array("q"), 1: array("q"), 2: array("q")}
        self.turns = array("q")
        self.syncs = array("q")
        self.thread_syncs = array("q")
        self.collections = [g["collections"] for g in gc.get_stats()]
        self.since = time.monotonic()
        self._gc_start = 0
        self._returned = 0

    # -- gc.callbacks ----------------------------------------------------------

    def on_gc(self, phase, info):
        if phase == "start":
            self._gc_start = time.perf_counter_ns()
        elif self._gc_start:
            self.gc[info["generation"]].append(time.perf_counter_ns() - self._gc_start)

    # -- the poller ------------------------------------------------------------

    def wrap(self, poller):
        probe = self

        class Poller:
            def poll(self, *args, **kwargs):
                if probe._returned:
                    probe.turns.append(time.perf_counter_ns() - probe._returned)
                try:
                    return poller.poll(*args, **kwargs)
                finally:
                    probe._returned = time.perf_counter_ns()

            def __getattr__(self, name):
                return getattr(poller, name)

        return Poller()

    # -- os.fsync / os.fdatasync ----------------------------------------------

    def timed(self, function):
        probe = self
        loop = threading.get_ident()  # install() runs on the reactor's thread

        def call(*args):
            began = time.perf_counter_ns()
            try:
                return function(*args)
            finally:
                into = probe.syncs if threading.get_ident() == loop else probe.thread_syncs
                into.append(time.perf_counter_ns() - began)

        return call

    # -- SIGUSR2 ---------------------------------------------------------------

    def dump(self, _signum=None, _frame=None):
        out = {
            "seconds": round(time.monotonic() - self.since, 3),
            "gc": {str(gen): summary(v) for gen, v in self.gc.items()},
            "turns": summary(self.turns),
            "fsync": summary(self.syncs),
            "fsync_threads": summary(self.thread_syncs),
            # the interpreter's own count, a check on the callback's
            "collections": [
                g["collections"] - c for g, c in zip(gc.get_stats(), self.collections)
            ],
        }
        path = self.path % {"pid": os.getpid()}
        with open(path + ".tmp", "w") as handle:
            json.dump(out, handle)
        os.replace(path + ".tmp", path)
        self.reset()


def summary(values_ns):
    """count, total, p50/p99/p99.9/max (ms) and how many over 1, 10 and 100 ms."""
    if not values_ns:
        return {"count": 0}
    ordered = sorted(values_ns)
    last = len(ordered) - 1

    def at(q):
        return round(ordered[min(last, int(q * len(ordered)))] / 1e6, 3)

    return {
        "count": len(ordered),
        "total_ms": round(sum(ordered) / 1e6, 1),
        "p50": at(0.5),
        "p99": at(0.99),
        "p999": at(0.999),
        "max": round(ordered[-1] / 1e6, 3),
        "over_1ms": sum(1 for v in ordered if v > 1_000_000),
        "over_10ms": sum(1 for v in ordered if v > 10_000_000),
        "over_100ms": sum(1 for v in ordered if v > 100_000_000),
    }


def install(path):
    """Install the epoll reactor with a timed poller, the GC hook and SIGUSR2."""
    from twisted.internet import epollreactor

    epollreactor.install()
    from twisted.internet import reactor

    probe = Probe(path)
    reactor._poller = probe.wrap(reactor._poller)
    gc.callbacks.append(probe.on_gc)
    # the storage layer calls them as os.fsync / os.fdatasync, looked up per call
    os.fsync = probe.timed(os.fsync)
    os.fdatasync = probe.timed(os.fdatasync)
    signal.signal(signal.SIGUSR2, probe.dump)
    return probe


def read(path, pid, timeout=5.0):
    """The JSON a SIGUSR2 to ``pid`` wrote (the caller sent the signal)."""
    target = path % {"pid": pid}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(target) as handle:
                data = json.load(handle)
            os.unlink(target)
            return data
        except (OSError, ValueError):
            time.sleep(0.05)
    return None


def probe_brokers(probe_path):
    """Start every BrokerProcess of this (bench) process through the probe,
    which writes to ``probe_path`` (``%(pid)s`` is the broker's pid)."""
    import tests.broker_process

    here = os.path.dirname(os.path.abspath(__file__))
    tests.broker_process.TWISTD = (
        f"import sys; sys.path.insert(0, {here!r}); import broker_probe; "
        f"broker_probe.install({probe_path!r}); "
        "from twisted.scripts.twistd import run; run()"
    )
