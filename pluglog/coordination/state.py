"""Cluster metadata records shared by every coordinator and the replica manager.

:class:`TopicMetadata` is a topic as the coordinator stores it (Kafka's
``/brokers/topics/<t>`` plus ``/config/topics/<t>``); ``assignment`` maps each
partition to its replica list, preferred leader first. :class:`PartitionState`
is Kafka's ``/brokers/topics/<t>/partitions/<p>/state`` znode plus its version:
who leads, in which leader epoch, which replicas are in sync, and which
controller epoch wrote it. Both are plain values; a change is a new object.

The coordinator contract around them (see :class:`pluglog.interfaces.ICoordinator`):

* Listeners (``add_listener(fn)``) are called on the reactor thread with
  ``fn(event, payload)``: ``"created"``, ``"changed"``, ``"deleted"`` with a
  TopicMetadata; ``"partition"`` with a :class:`PartitionChange`;
  ``"brokers"`` with the new ``brokers()`` list; ``"session"`` with
  ``"lost"`` (stop leading anything: another broker may take over) or
  ``"restored"`` (registered again; states are re-announced as ``"partition"``).
* ``alter_isr(topic, partition, state, new_isr)`` is the leader's conditional
  write (Kafka's AlterPartition / the ZooKeeper-era ISR update): it succeeds
  only while the stored state still has ``state.version`` and
  ``state.leader_epoch``, and fires with the new PartitionState; otherwise it
  fails with :class:`StaleStateError` and the caller waits for the
  ``"partition"`` event carrying the newer state (the ZooKeeper coordinator
  reads the winner at once and announces it before the failure fires).
"""

from dataclasses import dataclass, field

from pluglog.errors import PluglogError

NO_LEADER = -1

#: Kafka's client quota keys, as coordinators store them per user / client id
#: (enforced by :mod:`pluglog.broker.quotas`).
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)


class StaleStateError(PluglogError):
    """A conditional partition-state write lost to a newer state."""


@dataclass
class TopicMetadata:
    name: str
    num_partitions: int
    configs: dict = field(default_factory=dict)
    topic_id: str = ""
    internal: bool = False
    #: partition -> list of broker ids, preferred leader first.
    assignment: dict = field(default_factory=dict)

    def replicas(self, partition):
        return self.assignment.get(partition, [])


@dataclass(frozen=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: tuple
    controller_epoch: int = 0
    #: The storage version (ZooKeeper's znode version); -1 where there is none.
    version: int = -1

    def to_json(self):
        """Kafka's state znode body."""
        return {
            "controller_epoch": self.controller_epoch,
            "leader": self.leader,
            "version": 1,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
        }

    @classmethod
    def from_json(cls, data, version=-1):
        return cls(
            int(data["leader"]),
            int(data["leader_epoch"]),
            tuple(int(b) for b in data["isr"]),
            int(data.get("controller_epoch", 0)),
            version,
        )


@dataclass(frozen=True)
class PartitionChange:
    """Payload of a ``"partition"`` event."""

    topic: str
    partition: int
    replicas: tuple
    state: PartitionState
