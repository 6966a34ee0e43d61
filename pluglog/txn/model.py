"""Transaction metadata and its records in ``__transaction_state``.

One :class:`TxnMetadata` per transactional id, as Kafka's TransactionMetadata:
the producer id and epoch, the timeout, the state, the partitions in the
transaction and its start and last-update times.

States and their codes (Kafka's TransactionState):
``Empty`` 0, ``Ongoing`` 1, ``PrepareCommit`` 2, ``PrepareAbort`` 3,
``CompleteCommit`` 4, ``CompleteAbort`` 5, ``Dead`` 6, ``PrepareEpochFence`` 7.

Records (Kafka's TransactionLogKey/Value, version 0, big-endian, strings
int16 length + UTF-8):

* key: ``version int16 (0), transactional_id string``
* value: ``version int16 (0), producer_id int64, producer_epoch int16,
  timeout_ms int32, state int8, partitions [topic string, [int32]],
  last_update_ms int64, start_ms int64``; a null value deletes the id.

The topic is compacted, so the newest value of each id is its state.
"""

import struct

EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
DEAD = "Dead"
PREPARE_EPOCH_FENCE = "PrepareEpochFence"

STATES = (
    EMPTY,
    ONGOING,
    PREPARE_COMMIT,
    PREPARE_ABORT,
    COMPLETE_COMMIT,
    COMPLETE_ABORT,
    DEAD,
    PREPARE_EPOCH_FENCE,
)
STATE_CODES = {name: code for code, name in enumerate(STATES)}

TXN_TOPIC = "__transaction_state"
#: Kafka's TransactionLog topic configs (min.insync.replicas set from
#: transaction.state.log.min.isr when the topic is created).
TXN_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "compression.type": "producer",
    "unclean.leader.election.enable": "false",
}

_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, state
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TIMES = struct.Struct(">qq")


class TxnMetadata:
    """The coordinator's view of one transactional id."""

    __slots__ = (
        "transactional_id",
        "producer_id",
        "producer_epoch",
        "last_producer_epoch",
        "timeout_ms",
        "state",
        "partitions",
        "start_ms",
        "last_update_ms",
        "pending",
    )

    def __init__(self, transactional_id, producer_id, producer_epoch, timeout_ms, now_ms):
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        #: The epoch before the last bump: a retried InitProducerId of the
        #: same producer (KIP-360) is recognised by it.
        self.last_producer_epoch = -1
        self.timeout_ms = timeout_ms
        self.state = EMPTY
        self.partitions = set()
        self.start_ms = -1
        self.last_update_ms = now_ms
        #: A state change being written to the log, or None: requests that
        #: would change the state meanwhile get CONCURRENT_TRANSACTIONS.
        self.pending = None

    def __repr__(self):
        return (
            f"TxnMetadata({self.transactional_id!r}, pid={self.producer_id}, "
            f"epoch={self.producer_epoch}, {self.state}, {sorted(self.partitions)})"
        )

    def topics(self):
        """``{topic: [partition, ...]}`` of the transaction."""
        out = {}
        for topic, index in sorted(self.partitions):
            out.setdefault(topic, []).append(index)
        return out


def _string(text):
    data = text.encode("utf-8")
    return _I16.pack(len(data)) + data


def txn_key(transactional_id):
    return _I16.pack(0) + _string(transactional_id)


def txn_value(meta):
    out = [
        _HEAD.pack(
            0, meta.producer_id, meta.producer_epoch, meta.timeout_ms, STATE_CODES[meta.state]
        )
    ]
    topics = meta.topics()
    out.append(_I32.pack(len(topics)))
    for topic, indexes in topics.items():
        out.append(_string(topic))
        out.append(_I32.pack(len(indexes)))
        out.extend(_I32.pack(i) for i in indexes)
    out.append(_TIMES.pack(meta.last_update_ms, meta.start_ms))
    return b"".join(out)


def parse_key(key):
    """The transactional id of a ``__transaction_state`` key."""
    (version,) = _I16.unpack_from(key, 0)
    if version != 0:
        raise ValueError(f"unknown transaction log key version {version}")
    (length,) = _I16.unpack_from(key, 2)
    return bytes(key[4 : 4 + length]).decode("utf-8")


def parse_value(transactional_id, value):
    """A TxnMetadata from a ``__transaction_state`` value."""
    version, pid, epoch, timeout, state = _HEAD.unpack_from(value, 0)
    if version not in (0, 1):
        raise ValueError(f"unknown transaction log value version {version}")
    pos = _HEAD.size
    meta = TxnMetadata(transactional_id, pid, epoch, timeout, -1)
    meta.state = STATES[state]
    (count,) = _I32.unpack_from(value, pos)
    pos += 4
    for _ in range(count):
        (length,) = _I16.unpack_from(value, pos)
        topic = bytes(value[pos + 2 : pos + 2 + length]).decode("utf-8")
        pos += 2 + length
        (n,) = _I32.unpack_from(value, pos)
        pos += 4
        for _ in range(n):
            meta.partitions.add((topic, _I32.unpack_from(value, pos)[0]))
            pos += 4
    meta.last_update_ms, meta.start_ms = _TIMES.unpack_from(value, pos)
    return meta
