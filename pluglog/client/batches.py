"""The producer's records in waiting: batches, their Deferreds, their results.

A :class:`Batch` collects one partition's encoded records (bytes from the C
codec, :mod:`pluglog.client.codec`) and one :class:`RecordDeferred` per
record until it is sent; :func:`fire_acks` fires a whole batch's Deferreds
with their :class:`RecordMetadata` once the broker answers.

Why a Deferred subclass: the issue asks for a Deferred per record that fires
on ack, and at a million records a Deferred's construction and
``callback()`` (about 1 and 4 µs under load) are most of the producer's
per-record cost. A RecordDeferred is a plain Deferred to everyone who holds
it; it only skips the debugging check in ``__init__``, and
:func:`fire_acks` gives a Deferred that nobody has added a callback to its
result the way ``callback()`` would end up (``called`` set, ``result``
stored): running an empty callback chain does nothing else. A Deferred with
callbacks, a paused one or one under Deferred debugging goes through
``callback()``. tests/unit/test_client_batches.py holds both paths to
``callback()``'s behaviour.
"""

from typing import NamedTuple

from twisted.internet import defer

from pluglog.client.errors import KafkaClientError

BATCH_OVERHEAD = 61  # a magic-2 batch header

# The fast path relies on these Deferred attributes (Twisted 22-26); without
# them every record's Deferred fires through callback().
_FAST = all(hasattr(defer.Deferred(), name) for name in ("_callbacks", "_canceller", "paused"))


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed (aiokafka's RecordMetadata)."""

    topic: str
    partition: int
    offset: int
    timestamp: int = -1


class KafkaTimeoutError(KafkaClientError):
    """A record could not be buffered or delivered in time
    (``max.block.ms`` / ``delivery.timeout.ms``)."""


class RecordTooLargeError(KafkaClientError):
    """One record is larger than ``max.request.size``."""


class RecordDeferred(defer.Deferred):
    """The Deferred :meth:`Producer.send` returns (see the module docstring)."""

    def __init__(self):
        if self.debug or not _FAST:
            super().__init__()
        else:
            self._callbacks = []
            self._canceller = None


def fire_acks(deferreds, topic, partition, base_offset, timestamp):
    """Fire each record's Deferred with its RecordMetadata: offsets count up
    from ``base_offset`` (-1 for all under acks=0)."""
    new = tuple.__new__
    offset = base_offset
    for d in deferreds:
        meta = new(RecordMetadata, (topic, partition, offset, timestamp))
        if base_offset >= 0:
            offset += 1
        if _FAST and not d._callbacks and not d.paused and not d.called and not d.debug:
            # What callback() leaves behind when the chain is empty.
            d.called = True
            d.result = meta
        else:
            d.callback(meta)


class Batch:
    """One partition's records on their way: encoded bytes, Deferreds and
    the state a retry keeps (bytes, sequence)."""

    __slots__ = (
        "tp",
        "records",
        "deferreds",
        "size",
        "base_ts",
        "max_ts",
        "created",
        "built",
        "base_sequence",
        "attempts",
        "not_before",
        "order",
    )

    _created = 0

    def __init__(self, tp, base_ts, now):
        # Creation order: a partition's batches are sent, and put back after a
        # failure, in this order.
        Batch._created += 1
        self.order = Batch._created
        self.tp = tp
        self.records = []
        self.deferreds = []
        self.size = BATCH_OVERHEAD
        self.base_ts = base_ts
        self.max_ts = base_ts
        self.created = now
        self.built = None
        self.base_sequence = -1
        self.attempts = 0
        self.not_before = 0.0  # a retried batch waits retry.backoff.ms
