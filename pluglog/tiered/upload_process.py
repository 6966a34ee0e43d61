"""Segment uploads in child processes, off the broker's GIL.

An upload through boto3 is mostly Python (botocore builds, signs and checks
every part request; its CRC32 of a 5 MiB part holds the GIL ~1.2 ms). Run in
the broker's upload threads it keeps the GIL from the reactor for
milliseconds at a time: on a quiet 2-core machine a stop-and-wait producer's
p99 went from 0.21 ms to 1.6 ms while segments went up, with CPU to spare
(bench/RESULTS.md, "Produce p99 with uploads"). The same uploads run by a
separate process cost the reactor almost nothing. So the upload threads hand
each copy to a child process here and wait for it, the GIL released.

:class:`ProcessUploader` owns ``remote.log.copy.processes`` children
(``spawn``ed: a Twisted process with threads must not fork). Each child
builds the same provider the broker built, by name, through the plugin
registry (entry-point plugins included), and runs ``copy_segment`` on the
paths the broker gives it; the objects it writes are the ones the broker's
provider would write. An error comes back as the provider raised it; a
child that died (killed, out of memory) fails that copy with one line, and
the pool is rebuilt for the next one. The broker's provider still does the
start-up check, the remote reads and the deletes.

Priority: an upload is background work, so a child yields its core to the
broker. :data:`BACKGROUND` children run ``SCHED_IDLE``: the broker's
reactor preempts them the moment it wakes, where a nice +10 child can
still hold a contended core for a scheduler slice (bench/RESULTS.md,
"Produce p99 with uploads"). An idle-priority
process gets almost no CPU while the broker keeps every core busy, and
local retention cannot delete a segment before its upload; so once
uploads hold local data beyond ``local.retention.*`` the manager hands
copies to :data:`CATCH_UP` children (nice +10, ``SCHED_BATCH``), which
always get a share. The disk then stays bounded by what the user set.
Neither needs a privilege (an unprivileged process may not leave
``SCHED_IDLE``, hence two pools rather than one child switching).
"""

import concurrent.futures
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures.process import BrokenProcessPool

from pluglog.errors import RemoteStorageError
from pluglog.plugins import make_plugin_manager
from pluglog.registry import Registry

#: the provider a child built (set by :func:`_start`, in the child)
_storage = None
#: how often a child checks that the broker that started it is alive
PARENT_CHECK_S = 0.5
#: added to a catch-up child's nice value (see the module doc)
UPLOAD_NICE = 10
#: children that run only on a core the broker leaves idle
BACKGROUND = "background"
#: children that keep a small share of a busy core (uploads behind local retention)
CATCH_UP = "catch-up"


def _start(name, config, autoload, priority=CATCH_UP):
    """In a child: build the provider (SIGINT is the parent's business) and
    watch the parent."""
    global _storage
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _yield_cpu(priority)
    threading.Thread(target=_exit_with, args=(os.getppid(),), daemon=True).start()
    _storage = Registry(make_plugin_manager(autoload=autoload)).build(
        "remote_storage", name, config, None
    )


def _yield_cpu(priority):
    """In a child: run as background work. ``BACKGROUND``: SCHED_IDLE, any
    runnable broker thread preempts it. ``CATCH_UP``: a higher nice value
    gives the reactor the larger share, and SCHED_BATCH tells the scheduler
    the child need not preempt on wake-up. Neither is a privilege, so
    neither can fail here."""
    if priority == BACKGROUND:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    else:
        os.nice(UPLOAD_NICE)
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


def _exit_with(parent):
    """In a child: exit once the broker is gone. A SIGKILLed broker closes
    nothing the pool's worker waits on (it holds both ends of its queue's
    pipe), so without this the child would outlive it, possibly mid-upload
    (harmless to the data: an unfinished copy is deleted by the next leader
    pass, but a leaked process)."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(0)


def _copy(segment, parts):
    """In a child: one segment upload."""
    _storage.copy_segment(segment, parts)


class ProcessUploader:
    """``copy_segment`` of provider ``name`` in ``processes`` child processes
    of scheduling ``priority`` (:data:`BACKGROUND` or :data:`CATCH_UP`),
    started at the first copy.

    Thread-safe: the broker's upload threads call :meth:`copy_segment`, which
    blocks until the child is done."""

    def __init__(self, name, config, processes, autoload=None, priority=BACKGROUND):
        self.priority = priority
        self._args = (name, config, autoload, priority)
        self._processes = processes
        self._lock = threading.Lock()
        self._pool = None
        self._stopped = False

    def _executor(self):
        with self._lock:
            if self._stopped:
                raise RemoteStorageError("the broker is stopping")
            if self._pool is None:
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    self._processes,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_start,
                    initargs=self._args,
                )
            return self._pool

    def copy_segment(self, segment, parts):
        pool = self._executor()
        try:
            return pool.submit(_copy, segment, parts).result()
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise RemoteStorageError(
                f"the upload process died while copying segment {segment.segment_id}"
            ) from None

    def stop(self):
        """Stop the children; a copy in flight is abandoned (the next leader
        pass deletes an unfinished copy, as after a crash)."""
        with self._lock:
            self._stopped = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
