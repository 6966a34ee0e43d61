"""The ZooKeeper coordinator's pipelined partition-state traffic: a leader's
ISR writes and the state reads its watches set off.

At 10,000 partitions these come in thousands at once (a follower rejoining
every ISR, the watches those writes fire). One synchronous round trip each
on the coordinator's ``io`` worker made about 70 partitions/s under load,
and a controller's change for a partition waited behind that queue. As
Kafka's ``KafkaZkClient.retryRequestsUntilConnected`` sends many async
requests and then awaits them all, the ``io`` worker here takes every queued
ISR write (or every queued state read), sends them as kazoo async requests
(``set_async`` / ``get_async``), and then collects the answers.

What stays as it was, per partition:

* An ISR write is a conditional ``setData`` of the partition's state znode
  at the version the leader saw. Each is its own request (not one multi-op,
  where one failed version check would fail them all): a lost one fails
  alone with StaleStateError, after the winning state has been read and
  delivered to the reactor (the leader follows a new epoch at once).
* A partition's writes go out in the order ``alter_isr`` was called, on one
  session, and ZooKeeper applies a session's requests in order.
* A write cut off by a lost connection or an expired session is run again
  once a session is back (kazoo's command retry), as a single write.
* Results reach the reactor thread in the order the writes were queued,
  the winning states of lost writes before any result of their batch (in
  calls of up to :data:`DELIVER` results, so the reactor's turns stay short).
"""

import threading
from collections import deque

from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.protocol.states import EventType
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python import failure

from pluglog.coordination import zkdata as z
from pluglog.coordination.state import StaleStateError
from pluglog.coordination.zkbridge import DISCONNECTED
from pluglog.errors import ConfigError

log = Logger()

#: Requests in flight per round: a bound on one job's memory, and jobs
#: queued meanwhile (a controller's refresh) get their turn between rounds.
BATCH = 1000
#: Results per call on the reactor thread: each may set off a partition's
#: leadership or ISR change there, and other work gets turns in between.
DELIVER = 100


class PipelineMixin:
    """``alter_isr`` and the partition-state reads of
    :class:`pluglog.coordination.zookeeper.ZooKeeperCoordinator`."""

    def _init_pipeline(self):
        self._pipe_lock = threading.Lock()
        self._isr_writes = deque()
        self._writes_posted = False
        #: (topic, partition) keys whose watch fired, in order, deduplicated
        self._state_reads = {}
        self._reads_posted = False

    # -- the leader's ISR write (reactor thread) --------------------------------

    def alter_isr(self, topic, partition, state, new_isr):
        current = self._states.get((topic, partition))
        if current is not None and (current.version, current.leader_epoch) != (
            state.version,
            state.leader_epoch,
        ):
            return defer.fail(StaleStateError(f"{topic}-{partition}: state moved on"))
        if not self.io.started:
            return defer.fail(ConfigError("the ZooKeeper coordinator is not running"))
        new = type(state)(
            state.leader, state.leader_epoch, tuple(new_isr), state.controller_epoch, -1
        )

        def stored(result):
            self._set_state(topic, partition, result)
            return result

        d = defer.Deferred()
        d.addCallback(stored)
        with self._pipe_lock:
            self._isr_writes.append((topic, partition, state.version, new, d))
            if self._writes_posted:
                return d
            self._writes_posted = True
        self.io.post(self._write_isrs)
        return d

    # -- ISR writes (io thread) -------------------------------------------------

    def _take(self, queue_name, flag_name):
        """Up to BATCH queued items; the job is posted again for the rest."""
        with self._pipe_lock:
            queue = getattr(self, queue_name)
            if isinstance(queue, dict):
                keys = list(queue)[:BATCH]
                for key in keys:
                    del queue[key]
                batch = keys
            else:
                batch = [queue.popleft() for _ in range(min(BATCH, len(queue)))]
            more = bool(queue)
            if not more:
                setattr(self, flag_name, False)
        return batch, more

    def _write_isrs(self):
        batch, more = self._take("_isr_writes", "_writes_posted")
        if more:
            self.io.post(self._write_isrs)
        try:
            sent = [self.client.set_async(*self._write_args(item)) for item in batch]
        except Exception:
            why = failure.Failure()
            self.io.deliver(self._fire, [(item[4], False, why) for item in batch])
            return
        #: per item: (True, znode stat) or (False, Failure); None while lost
        outcome = [None] * len(batch)
        lost, again = [], []
        for n, pending in enumerate(sent):
            try:
                outcome[n] = (True, pending.get())
            except (BadVersionError, NoNodeError):
                lost.append(n)
            except DISCONNECTED:
                again.append(n)
            except Exception:
                outcome[n] = (False, failure.Failure())
        for n in again:
            # Cut off by the connection: that write alone, through kazoo's
            # command retry (it waits for the session to come back); a
            # write that had landed before the cut now meets its own
            # version and is lost, its winner (itself) read as any other.
            try:
                outcome[n] = (
                    True,
                    self.client.retry(self.client.set, *self._write_args(batch[n])),
                )
            except (BadVersionError, NoNodeError):
                lost.append(n)
            except Exception:
                outcome[n] = (False, failure.Failure())
        winners = self._read_winners([batch[n] for n in sorted(lost)])
        fired = []
        for (topic, partition, version, new, d), found in zip(batch, outcome):
            if found is None:
                stale = StaleStateError(
                    f"{topic}-{partition}: state changed since version {version}"
                )
                fired.append((d, False, stale))
            elif found[0]:
                stored = type(new)(
                    new.leader, new.leader_epoch, new.isr, new.controller_epoch, found[1].version
                )
                fired.append((d, True, stored))
            else:
                fired.append((d, False, found[1]))
        for start in range(0, len(winners), DELIVER):
            self.io.deliver(self._set_states, winners[start : start + DELIVER])
        for start in range(0, len(fired), DELIVER):
            self.io.deliver(self._fire, fired[start : start + DELIVER])

    def _write_args(self, item):
        topic, partition, version, new, _ = item
        return z.state_path(topic, partition), z.state_bytes(new), version

    def _read_winners(self, lost):
        """The stored states of the partitions whose write lost (read now:
        their watches' refreshes may queue behind thousands of writes while
        the new leader epoch is already out)."""
        sent = [
            (topic, partition, self.client.get_async(z.state_path(topic, partition)))
            for topic, partition, *_ in lost
        ]
        winners = []
        for topic, partition, pending in sent:
            try:
                winners.append((topic, partition, z.state_from_znode(*pending.get())))
            except NoNodeError:
                pass  # deleted: the topic watch says so
            except DISCONNECTED:
                pass  # a session restore or reconnect reads every state again
            except Exception:
                # Unreadable: the write still fails as lost.
                self.io.deliver(
                    log.failure,
                    "reading the state of {t}-{p}",
                    failure.Failure(),
                    t=topic,
                    p=partition,
                )
        return winners

    # -- results (reactor thread) -----------------------------------------------

    @staticmethod
    def _fire(fired):
        for d, ok, value in fired:
            if not d.called:  # a caller's timeout may have cancelled it
                (d.callback if ok else d.errback)(value)

    def _set_states(self, states):
        for topic, partition, state in states:
            self._set_state(topic, partition, state)

    # -- state reads (io thread, and kazoo's event thread) ----------------------

    def _state_watcher(self, topic, partition):
        key = ("state", topic, partition)
        watcher = self._watchers.get(key)
        if watcher is None:

            def watcher(event):
                if event.type != EventType.NONE and not self.stopping:
                    self._queue_read(topic, partition)

            self._watchers[key] = watcher
        return watcher

    def _queue_read(self, topic, partition):
        with self._pipe_lock:
            self._state_reads[(topic, partition)] = None
            if self._reads_posted:
                return
            self._reads_posted = True
        self.io.post(self._safely, self._read_queued)

    def _read_queued(self):
        keys, more = self._take("_state_reads", "_reads_posted")
        if more:
            self.io.post(self._safely, self._read_queued)
        self.read_states(keys)

    def read_states(self, keys):
        """Read and watch the state znodes of ``keys`` ((topic, partition)),
        pipelined; deliver them to the reactor and tell the controller."""
        keys = [key for key in keys if key[0] in self._io_topics]
        for start in range(0, len(keys), BATCH):
            chunk = keys[start : start + BATCH]
            sent = [
                (key, self.client.get_async(z.state_path(*key), watch=self._state_watcher(*key)))
                for key in chunk
            ]
            states, missing = [], []
            for key, pending in sent:
                try:
                    state = z.state_from_znode(*pending.get())
                except NoNodeError:
                    missing.append(key)
                    continue
                except DISCONNECTED:
                    raise  # the session restore or reconnect reads everything again
                except Exception:
                    self.io.deliver(
                        log.failure, "reading the state of {key}", failure.Failure(), key=key
                    )
                    continue
                states.append((*key, state))
            states.extend(self._read_missing(missing))
            for first in range(0, len(states), DELIVER):
                self.io.deliver(self._set_states, states[first : first + DELIVER])
            self.controller.post(self.controller.on_states_changed, [s[:2] for s in states])

    def _read_missing(self, keys):
        """States of ``keys`` whose znode was not there (a new topic's, before
        the controller creates them): watch each for its creation, and read
        those that appeared in between; both pipelined."""
        watches = {key: self._state_watcher(*key) for key in keys}
        sent = [
            (key, self.client.exists_async(z.state_path(*key), watch=watches[key])) for key in keys
        ]
        there = [key for key, pending in sent if pending.get() is not None]
        sent = [
            (key, self.client.get_async(z.state_path(*key), watch=watches[key])) for key in there
        ]
        states = []
        for key, pending in sent:
            try:
                states.append((*key, z.state_from_znode(*pending.get())))
            except NoNodeError:
                pass  # created and deleted in between: the topic is going
        return states
