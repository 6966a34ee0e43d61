"""What the remote tier knows of one uploaded segment, and where its objects go.

A :class:`RemoteSegment` is KIP-405's RemoteLogSegmentMetadata: which
offsets and timestamps the segment holds, its size, the leader epochs it
spans, and its upload state. States follow Kafka's
(``RemoteLogSegmentState``): ``COPY_SEGMENT_STARTED`` is written before the
first byte is uploaded and ``COPY_SEGMENT_FINISHED`` only once every object
is stored; deletion goes through ``DELETE_SEGMENT_STARTED`` and
``DELETE_SEGMENT_FINISHED``. Only a finished copy is ever read, so a crash
in the middle of an upload leaves nothing visible, and the next leader
removes the orphaned objects (docs/storage.rst, "Remote tier").

The value encodes as one JSON object (the value of a
``__remote_log_metadata`` record; the key is ``topic``, ``partition`` and
``segment_id``, so compaction keeps each segment's newest state).
Pure values and functions: safe on any thread.
"""

import dataclasses
import json
import uuid
from dataclasses import dataclass

COPY_SEGMENT_STARTED = "COPY_SEGMENT_STARTED"
COPY_SEGMENT_FINISHED = "COPY_SEGMENT_FINISHED"
DELETE_SEGMENT_STARTED = "DELETE_SEGMENT_STARTED"
DELETE_SEGMENT_FINISHED = "DELETE_SEGMENT_FINISHED"
STATES = (
    COPY_SEGMENT_STARTED,
    COPY_SEGMENT_FINISHED,
    DELETE_SEGMENT_STARTED,
    DELETE_SEGMENT_FINISHED,
)

#: The parts of a segment and the suffix of each object.
PART_SUFFIXES = {
    "log": ".log",
    "index": ".index",
    "timeindex": ".timeindex",
    "txnindex": ".txnindex",
    "leader_epoch": ".leader-epoch-checkpoint",
}


@dataclass(frozen=True)
class RemoteSegment:
    """One segment copy in the remote tier (immutable; ``with_state`` copies)."""

    topic: str
    partition: int
    segment_id: str
    base_offset: int
    #: The last offset the segment holds (inclusive), as Kafka's endOffset.
    end_offset: int
    max_timestamp: int
    size_bytes: int
    #: ``((epoch, start offset), ...)`` of the epochs the segment spans.
    leader_epochs: tuple = ()
    state: str = COPY_SEGMENT_STARTED
    #: When the state was written (ms, the broker's reactor clock).
    event_ms: int = -1
    #: The broker that wrote the state.
    broker_id: int = -1
    #: The segment's aborted-transaction index entries, ``((producer id,
    #: first offset, last offset, last stable offset), ...)``: kept in the
    #: metadata so read_committed fetches of remote offsets need no GET.
    aborted_txns: tuple = ()

    @classmethod
    def new(
        cls,
        topic,
        partition,
        base_offset,
        end_offset,
        max_timestamp,
        size_bytes,
        epochs,
        aborted_txns=(),
    ):
        """A fresh upload's metadata, with a new unique segment id."""
        return cls(
            topic,
            partition,
            uuid.uuid4().hex,
            base_offset,
            end_offset,
            max_timestamp,
            size_bytes,
            tuple((int(e), int(o)) for e, o in epochs),
            aborted_txns=tuple(tuple(int(v) for v in entry) for entry in aborted_txns),
        )

    def with_state(self, state, event_ms, broker_id):
        if state not in STATES:
            raise ValueError(f"unknown remote segment state {state!r}")
        return dataclasses.replace(self, state=state, event_ms=event_ms, broker_id=broker_id)

    @property
    def next_offset(self):
        return self.end_offset + 1

    def object_key(self, part):
        """The object's name under the provider's prefix:
        ``<topic>-<partition>/<20-digit base offset>-<segment id><suffix>``."""
        suffix = PART_SUFFIXES[part]
        return f"{self.topic}-{self.partition}/{self.base_offset:020d}-{self.segment_id}{suffix}"

    def key_bytes(self):
        """The ``__remote_log_metadata`` record key."""
        return record_key(self.topic, self.partition, self.segment_id)

    def to_json(self):
        data = dataclasses.asdict(self)
        data["leader_epochs"] = [list(pair) for pair in self.leader_epochs]
        data["aborted_txns"] = [list(entry) for entry in self.aborted_txns]
        data["version"] = 1
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw):
        data = json.loads(raw)
        data.pop("version", None)
        data["leader_epochs"] = tuple(tuple(pair) for pair in data.get("leader_epochs", ()))
        data["aborted_txns"] = tuple(tuple(entry) for entry in data.get("aborted_txns", ()))
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})


def record_key(topic, partition, segment_id):
    return json.dumps(["segment", topic, partition, segment_id], separators=(",", ":")).encode()


def start_key(topic, partition):
    """Key of the partition's remote log start offset record (DeleteRecords)."""
    return json.dumps(["start", topic, partition], separators=(",", ":")).encode()


def parse_key(raw):
    """``("segment", topic, partition, segment_id)`` or ``("start", topic, partition)``."""
    return tuple(json.loads(raw))


def epochs_in_range(entries, base_offset, next_offset):
    """The leader-epoch entries ``[(epoch, start)]`` that cover offsets
    ``[base_offset, next_offset)``: the last one starting at or before
    ``base_offset`` (its start moved up to it) and every later one below
    ``next_offset``."""
    out = []
    for epoch, start in entries:
        if start <= base_offset:
            out = [(epoch, base_offset)]
        elif start < next_offset:
            out.append((epoch, start))
    return out


def epoch_checkpoint_bytes(epochs):
    """The leader-epoch slice as Kafka's checkpoint file text."""
    lines = ["0", str(len(epochs))] + [f"{epoch} {start}" for epoch, start in epochs]
    return ("\n".join(lines) + "\n").encode()
