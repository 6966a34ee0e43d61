"""The controller's creation of first partition states, pipelined.

A new topic (or new partitions of one) needs a state znode per partition,
``/brokers/topics/<t>/partitions/<p>/state``. One synchronous round trip
after another (``ensure_path`` of the partition's znode, then the fenced
create) made 10,000 partitions take most of a minute. As Kafka's
``KafkaZkClient.createTopicPartitionStatesRaw`` does, the controller's
worker sends them all as kazoo async requests and then collects the answers,
in rounds of :data:`BATCH`.

What stays as it was, per partition:

* The state is created by its own fenced transaction: a multi of a
  ``check`` of ``/controller_epoch`` at the version this controller won and
  the ``create``, as Kafka's ``CreateRequest`` with a ``zkVersionCheck``.
  That multi is one partition's (not one across partitions, where a state
  already there would fail them all): a fence that fails means a newer
  controller, and this one steps down (ControllerMovedError), whatever the
  other partitions' answers.
* The partition's parent znodes are created by plain creates sent before
  its transaction on the same session; ZooKeeper applies a session's
  requests in order, so they are there when the transaction runs. One
  already there is fine (NodeExists), as ``ensure_path`` allowed.
* A state already there (NodeExists: a create that landed before a cut, or
  an earlier controller's) is left as it is.
* A request cut off by a lost connection or an expired session is run
  again once a session is back, through kazoo's command retry, one
  partition at a time: a create that had landed meets NodeExists and is
  left, so each state is written exactly once.
"""

from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError

from pluglog.coordination import zkdata as z
from pluglog.coordination.state import PartitionState
from pluglog.coordination.zkbridge import DISCONNECTED

#: Partitions in flight per round: a bound on memory and on how long the
#: controller's other events wait for their turn.
BATCH = 1000


class StateCreationMixin:
    """``create_states`` of :class:`pluglog.coordination.controller.Controller`."""

    def create_states(self, wanted):
        """First states for ``wanted`` ((topic, partition, replicas,
        offline replicas)): leader the first live replica not offline, ISR
        the live ones, epoch 0. Returns ``{(t, p): state}`` of those created
        here; a partition with no live replica gets none (it stays offline
        until one comes back). Raises ControllerMovedError."""
        plans = []
        for topic, partition, replicas, offline in wanted:
            live = [r for r in replicas if r in self.live and r not in offline]
            if live:
                state = PartitionState(live[0], 0, tuple(live), self.epoch)
                plans.append((topic, partition, state))
        created = {}
        for start in range(0, len(plans), BATCH):
            created.update(self._create_round(plans[start : start + BATCH]))
        return created

    def _create_round(self, plans):
        client = self.client
        parents = []
        for topic in dict.fromkeys(topic for topic, _, _ in plans):
            parents.append(client.create_async(z.partitions_path(topic)))
        sent = []
        for topic, partition, state in plans:
            parents.append(client.create_async(f"{z.partitions_path(topic)}/{partition}"))
            sent.append(self._fenced_create(topic, partition, state).commit_async())
        for pending in parents:
            try:
                pending.get()
            except (NodeExistsError, NoNodeError):
                pass  # there already / the topic is gone: its create tells
            except DISCONNECTED:
                pass  # the creates cut off are redone, parents first
        created, again, moved = {}, [], None
        for plan, pending in zip(plans, sent):
            try:
                fence, result = pending.get()
            except DISCONNECTED:
                again.append(plan)
                continue
            if isinstance(fence, Exception) and not isinstance(fence, RolledBackError):
                moved = fence
            elif not isinstance(result, Exception):
                created[plan[:2]] = plan[2]
        if moved is not None:
            self._commit_results([moved, None])  # steps down and raises
        for topic, partition, state in again:
            (result,) = self._commit_results(
                client.retry(self._create_again, topic, partition, state)
            )
            if not isinstance(result, Exception):
                created[(topic, partition)] = state
        return created

    def _fenced_create(self, topic, partition, state):
        tx = self.client.transaction()
        tx.check(z.CONTROLLER_EPOCH, self.epoch_version)
        tx.create(z.state_path(topic, partition), z.state_bytes(state))
        return tx

    def _create_again(self, topic, partition, state):
        """One partition's parents and fenced create, synchronously (run
        under kazoo's retry: a cut-off attempt is made again whole)."""
        # Not ensure_path: that would make the topic's znode again if the
        # topic was deleted meanwhile.
        for path in (z.partitions_path(topic), f"{z.partitions_path(topic)}/{partition}"):
            try:
                self.client.create(path)
            except (NodeExistsError, NoNodeError):
                pass  # there already / the topic is gone: the create tells
        return self._fenced_create(topic, partition, state).commit()
