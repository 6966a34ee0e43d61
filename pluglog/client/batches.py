"""The producer's records in waiting: batches, their Deferreds, their results.

A :class:`Batch` collects one partition's encoded records (bytes from the C
codec, :mod:`pluglog.client.codec`) and one :class:`RecordDeferred` per
record until it is sent; :func:`fire_acks` fires a whole batch's Deferreds
with their :class:`RecordMetadata` once the broker answers.

Why this much care for a Deferred: the issue asks for a Deferred per record
that fires on ack, and at a million records their construction, firing and
the cyclic garbage collector walking the ~150k of them a full
``buffer.memory`` holds were most of the producer's CPU (bench/RESULTS.md).
So, with pluglog._producerbuffer built:

- ``Batch.add`` (pluglog/_producerbuffer.c) is ``send()``'s common case in one
  call, and :data:`FastSend`, the ``send`` attribute of a Producer, makes
  that call without a Python frame when the arguments are a topic and a
  bytes value (anything else goes to ``Producer.send``). ``add`` makes the
  record's RecordDeferred with ``object.__new__`` (no ``__init__``, no
  callback list: :attr:`RecordDeferred._callbacks` makes one when Twisted
  first asks for it) and takes it off the garbage collector's lists while it
  waits in the buffer.
- Off those lists it is visited by no collection; it goes back on them
  (:func:`track`) the moment a callback list is made for it (every way of
  adding a callback, chaining, awaiting or cancelling goes through
  ``_callbacks``) and before it gets its result, so one that could be part
  of a reference cycle is always tracked.
- :func:`fire_acks` gives a Deferred with an empty callback chain its result
  the way ``callback()`` would leave it (``called`` set, ``result``
  stored): running an empty chain does nothing else. One without callbacks
  that only the batch still holds (no other reference, no weak reference)
  cannot be seen by anyone and is not fired at all: it is freed with the
  batch's list. A
  Deferred with callbacks, a paused or cancelled one or one under Deferred
  debugging goes through ``callback()``.

To everyone who holds it a RecordDeferred is a plain Deferred;
tests/unit/test_client_batches.py holds both paths to ``callback()``'s
behaviour. Without that C module the same classes run in Python (tracked, and
every Deferred fired).
"""

from typing import NamedTuple

from twisted.internet import defer

from pluglog.client.codec import encode_record
from pluglog.client.errors import KafkaClientError

try:
    from pluglog import _producerbuffer
except ImportError:  # pragma: no cover - the install script builds it
    _producerbuffer = None  # type: ignore[assignment]  # the Python path serves

BATCH_OVERHEAD = 61  # a magic-2 batch header

# Making a Deferred without __init__ relies on what __init__ sets (Twisted
# 22-26: these two attributes); if that changes, the Python path (every
# Deferred through __init__) is used.
_COMPATIBLE = set(vars(defer.Deferred())) == {"_callbacks", "_canceller"}


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

    _chain = None  # the callback list, made on first use
    _canceller = None

    def __init__(self):
        if self.debug or not _COMPATIBLE:
            super().__init__()

    @property
    def _callbacks(self):
        chain = self._chain
        if chain is None:
            track(self)  # callbacks can make cycles: back under the collector
            chain = self._chain = []
        return chain

    @_callbacks.setter
    def _callbacks(self, chain):
        track(self)
        self._chain = chain


def py_fire_acks(deferreds, topic, partition, base_offset, timestamp, meta_cls):
    """Fire each record's Deferred with its RecordMetadata: offsets count up
    from ``base_offset`` (-1 for all under acks=0). The Python version of
    the C ``fire_acks``, which also skips Deferreds nobody else holds."""
    new = tuple.__new__
    offset = base_offset
    for d in deferreds:
        meta = new(meta_cls, (topic, partition, offset, timestamp))
        if base_offset >= 0:
            offset += 1
        if not d._chain and not d.paused and not d.called and not d.debug:
            # What callback() leaves behind when the chain is empty.
            d.called = True
            d.result = meta
        else:
            d.callback(meta)


class PyRecordBuffer:
    """The Python version of the C ``RecordBuffer`` (Batch's base)."""

    __slots__ = ("records", "deferreds", "base_ts", "max_ts", "size", "limit")

    def add(self, value, timestamp_ms, producer):
        """``send()``'s common case: a key-less, header-less bytes record;
        None if it does not fit."""
        records = self.records
        encoded = encode_record(None, value, None, timestamp_ms - self.base_ts, len(records))
        size = len(encoded)
        if (
            self.size + size > self.limit
            or producer.buffered_bytes + size > producer._buffer_memory
        ):
            return None
        d = RecordDeferred()
        records.append(encoded)
        self.deferreds.append(d)
        self.size += size
        producer.buffered_bytes += size
        producer.unacked += 1
        if timestamp_ms > self.max_ts:
            self.max_ts = timestamp_ms
        return d


if _producerbuffer is not None and _COMPATIBLE:
    _producerbuffer.set_deferred_type(RecordDeferred)
    track = _producerbuffer.track
    _fire_acks = _producerbuffer.fire_acks
    _RecordBuffer = _producerbuffer.RecordBuffer
    FastSend = _producerbuffer.FastSend
else:  # pragma: no cover - the install script builds pluglog._producerbuffer
    FastSend = None  # type: ignore[assignment, misc]  # send() checks for None

    def track(obj):
        pass

    _fire_acks = py_fire_acks
    _RecordBuffer = PyRecordBuffer  # type: ignore[assignment, misc]  # same attributes


def fire_acks(deferreds, topic, partition, base_offset, timestamp):
    """Fire each record's Deferred with its RecordMetadata: offsets count up
    from ``base_offset`` (-1 for all under acks=0). ``deferreds``: a list
    the caller hands over (reads no more): a Deferred that only this list
    holds and that has no callbacks is not fired (nobody can see it)."""
    _fire_acks(deferreds, topic, partition, base_offset, timestamp, RecordMetadata)


# The base is chosen at import (the C RecordBuffer or PyRecordBuffer), which
# a static checker cannot follow.
class Batch(_RecordBuffer):  # type: ignore[valid-type, misc]
    """One partition's records on their way: encoded bytes, Deferreds and
    the state a retry keeps (bytes, sequence). ``add()`` (from the record
    buffer base) is ``send()``'s common case; records, deferreds, size,
    base_ts, max_ts and limit (``add()`` refuses a record past it) are the
    base's."""

    __slots__ = (
        "tp",
        "created",
        "built",
        "base_sequence",
        "attempts",
        "not_before",
        "order",
    )

    _created = 0

    def __init__(self, tp, base_ts, now, limit):
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
        self.limit = limit
        self.created = now
        self.built = None
        self.base_sequence = -1
        self.attempts = 0
        self.not_before = 0.0  # a retried batch waits retry.backoff.ms
