"""The Twisted producer: batching, partitioners, acks, compression, idempotence.

``send()`` serialises a record, picks its partition with an IPartitioner
plugin (murmur2 by default, Kafka's keyed placement), encodes it straight
into the open batch of that partition and returns a Deferred that fires with
a :class:`RecordMetadata` once the broker acknowledged it (``acks=0``: once
written, offset -1). A batch closes when the next record would pass
``batch.size``; one timer per producer sends whatever is open after
``linger.ms``. Batches of all partitions led by one broker travel in one
Produce request.

Ordering and retries: at most one batch per partition is in flight, so a
retried batch can never overtake a later one. With ``enable.idempotence``
(Kafka's default) the producer takes a producer id from InitProducerId and
numbers each partition's batches; a batch keeps its bytes and sequence across
retries, so the broker drops a resent duplicate. Retriable errors (a leader
moved, a timeout, a dropped connection) refresh metadata and retry after
``retry.backoff.ms`` until ``delivery.timeout.ms``.

Transactions: with ``transactional_id=`` the producer has Kafka's
transactional API (``init_transactions()``, ``begin_transaction()``,
``send_offsets_to_transaction()``, ``commit_transaction()``,
``abort_transaction()``, each a Deferred), run by
:mod:`pluglog.client.transactions`; ``send()`` is allowed only inside a
transaction, and ``stop()`` aborts a transaction left open.

Back-pressure: records waiting for an answer count against
``buffer.memory``; past it ``send()`` parks the record (it enters the buffer
as acknowledgements free room, or fails after ``max.block.ms``) and
:meth:`Producer.wait_for_room` gives a loop something to wait on.
"""

from collections import deque

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from pluglog.client import plugins
from pluglog.client.batches import (
    BATCH_OVERHEAD,
    Batch,
    FastSend,
    KafkaTimeoutError,
    RecordDeferred,
    RecordMetadata,
    RecordTooLargeError,
)
from pluglog.client.cluster import ClusterClient, TopicPartition
from pluglog.client.codec import encode_record
from pluglog.client.config import PRODUCER, client_config, ms
from pluglog.client.errors import (
    BrokerResponseError,
    KafkaClientError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionStateError,
)
from pluglog.client.sender import SenderMixin
from pluglog.client.transactions import TransactionManager
from pluglog.errors import ConfigError
from pluglog.protocol.codecs import CODEC_NAMES
from pluglog.serializers import BytesSerializer

log = Logger()

__all__ = [
    "KafkaTimeoutError",
    "Producer",
    "ProducerFencedError",
    "RecordMetadata",
    "RecordTooLargeError",
    "TransactionAbortedError",
    "TransactionStateError",
]


class Producer(SenderMixin):
    """Kafka producer on the reactor (aiokafka's AIOKafkaProducer, with Deferreds).

    ``Producer(reactor, bootstrap_servers="host:9092", acks="all", **kafka_config)``
    where config keys are Kafka's (``linger_ms=5`` or ``**{"linger.ms": 5}``);
    ``transactional_id="..."`` makes it a transactional producer.
    """

    def __init__(self, reactor, bootstrap_servers=None, acks=None, **kafka_config):
        explicit_idempotence = any(
            k.replace("_", ".") == "enable.idempotence" for k in kafka_config
        )
        self.config = config = client_config(
            PRODUCER, kafka_config, bootstrap_servers=bootstrap_servers, acks=acks
        )
        self.transactional_id = config["transactional.id"]
        if self.transactional_id is not None:
            # Kafka's rules: a transactional producer is idempotent, acks=all.
            if not config["enable.idempotence"]:
                raise ConfigError("transactional.id needs enable.idempotence=true")
            if config["acks"] != -1:
                raise ConfigError(f"transactional.id needs acks=all, got acks={config['acks']}")
        if config["acks"] != -1 and config["enable.idempotence"]:
            if explicit_idempotence:
                raise ConfigError(
                    f"enable.idempotence=true needs acks=all, got acks={config['acks']}"
                )
            config["enable.idempotence"] = False  # Kafka's rule when not set explicitly
        self.reactor = reactor
        self.acks = config["acks"]
        self.idempotent = config["enable.idempotence"]
        self.compression = CODEC_NAMES[config["compression.type"]]
        self.partitioner = plugins.build("partitioner", config["partitioner"], reactor)
        url = config["schema.registry.url"]
        self.key_serializer = plugins.build_serializer(
            config["key.serializer"], reactor, url, is_key=True
        )
        self.value_serializer = plugins.build_serializer(config["value.serializer"], reactor, url)
        self.client = ClusterClient(reactor, config)
        self.client.allow_auto_topic_creation = True
        self.producer_id = -1
        self.producer_epoch = -1
        self._sequences = {}
        self._open = {}  # tp -> the batch records go into
        self._queued = {}  # tp -> deque of closed batches waiting to be sent
        self._in_flight = {}  # tp -> batches on the wire
        self._node_requests = {}  # node id -> Produce requests in flight
        self._timer = None
        self._retry_timer = None
        self._retry_refresh = False
        self._parked = deque()
        self._lookups = {}  # topic -> records waiting for its metadata
        self._tps = {}
        self._lanes = {}  # topic -> its one partition's open batch (send's hot case)
        self._seconds = reactor.seconds
        self._batch_size = config["batch.size"]
        self._max_request_size = config["max.request.size"]
        self._buffer_memory = config["buffer.memory"]
        self._fast_batch_limit = min(self._batch_size, self._max_request_size)
        self._raw_keys = type(self.key_serializer) is BytesSerializer
        self._raw_values = type(self.value_serializer) is BytesSerializer
        self._room_waiters = []
        self._idle_waiters = []
        self.buffered_bytes = 0
        self.unacked = 0
        self._started = None
        self._stopped = False
        self._txn = None
        if self.transactional_id is not None:
            self._txn = TransactionManager(self)
        if FastSend is not None and type(self).send is Producer.send:
            # send(topic, value)'s common case in C (batches.FastSend); the
            # rest, same arguments, goes to the method below.
            # A transactional producer's lanes exist only inside a
            # transaction (the manager clears them when it leaves one), so
            # C's fast case needs no state check; the rest goes through it.
            fallback = self._send_in_transaction if self._txn else Producer.send.__get__(self)
            self.send = FastSend(self, fallback)
        elif self._txn is not None:
            self.send = self._send_in_transaction

    # -- lifecycle --------------------------------------------------------

    @defer.inlineCallbacks
    def start(self):
        """Bootstrap (metadata) and, with idempotence, get a producer id."""
        if self._started is None:
            self._started = True
            yield self.client.start()
            if self.idempotent and self._txn is None:
                yield self._init_producer_id()
            self._drain()
        return self

    @defer.inlineCallbacks
    def stop(self):
        """Send everything buffered, wait for the answers, close connections."""
        if self._stopped:
            return
        if self._txn is not None and self._txn.in_transaction():
            # Kafka's producer aborts a transaction still open at close.
            try:
                yield self._txn.abort_transaction()
            except Exception as exc:  # stopping anyway; the coordinator's timeout ends it
                log.info("abort at stop failed: {e}", e=exc)
        try:
            yield self.flush()
        finally:
            self._stopped = True
            self._lanes.clear()
            for timer in (self._timer, self._retry_timer):
                if timer is not None and timer.active():
                    timer.cancel()
            yield self.client.close()

    def flush(self):
        """A Deferred that fires once every record sent so far is answered."""
        for batch in list(self._open.values()):
            self._close_batch(batch)
        self._drain()
        if self.unacked == 0 and not self._parked:
            return defer.succeed(None)
        d = defer.Deferred()
        self._idle_waiters.append(d)
        return d

    # -- transactions ---------------------------------------------------------

    def init_transactions(self):
        """Deferred: register ``transactional.id`` with its coordinator (fencing
        an older producer with the same id and aborting what it left open)."""
        return self._transactional().addCallback(lambda txn: txn.init_transactions())

    def begin_transaction(self):
        """Deferred: start a transaction (records may be sent from now on)."""
        return self._transactional().addCallback(lambda txn: txn.begin_transaction())

    def send_offsets_to_transaction(self, offsets, group):
        """Deferred: commit ``offsets`` ({TopicPartition: offset}, the next
        offsets to read) for ``group`` (a group id or
        ``Consumer.group_metadata()``) with the transaction."""
        return self._transactional().addCallback(
            lambda txn: txn.send_offsets_to_transaction(offsets, group)
        )

    def commit_transaction(self):
        """Deferred: flush, then commit the transaction."""
        return self._transactional().addCallback(lambda txn: txn.commit_transaction())

    def abort_transaction(self):
        """Deferred: drop records not sent yet, then abort the transaction."""
        return self._transactional().addCallback(lambda txn: txn.abort_transaction())

    def _transactional(self):
        if self._txn is None:
            return defer.fail(TransactionStateError("the producer has no transactional.id"))
        if self._stopped:
            return defer.fail(KafkaClientError("producer is stopped"))
        return defer.succeed(self._txn)

    def _send_in_transaction(
        self, topic, value, key=None, partition=None, headers=None, timestamp_ms=None
    ):
        """``send()`` of a transactional producer: only inside a transaction."""
        error = self._txn.send_error()
        if error is not None:
            return defer.fail(error)
        return Producer.send(self, topic, value, key, partition, headers, timestamp_ms)

    def wait_for_room(self):
        """Fires when ``buffer.memory`` has room again (at once if it has)."""
        if self.buffered_bytes < self.config["buffer.memory"] and not self._parked:
            return defer.succeed(None)
        d = defer.Deferred()
        self._room_waiters.append(d)
        return d

    # -- send -------------------------------------------------------------

    def send(self, topic, value, key=None, partition=None, headers=None, timestamp_ms=None):
        """Queue one record; a Deferred fires with its :class:`RecordMetadata`.

        ``headers``: a list of ``(str, bytes)`` pairs.
        """
        lane = self._lanes.get(topic)
        if (
            lane is not None
            and key is None
            and partition is None
            and headers is None
            and timestamp_ms is None
            and type(value) is bytes
        ):
            # The hot case in as few steps as possible: a key-less record for
            # a one-partition topic whose open batch has room (a "lane",
            # dropped when that batch closes, records park or the producer
            # stops; key-less records may go to any partition, so a metadata
            # change while the batch is open does not matter).
            now = self._seconds()
            if now < self.client.fresh_until:
                d = lane.add(value, int(now * 1000), self)
                if d is not None:
                    return d
        if self._stopped:
            return defer.fail(KafkaClientError("producer is stopped"))
        try:
            # bytes through the "bytes" serializer need no call (and no copy).
            if key is not None and not (self._raw_keys and type(key) is bytes):
                key = self.key_serializer.serialize(topic, key)
            if not (self._raw_values and type(value) is bytes):
                value = self.value_serializer.serialize(topic, value)
        except Exception:
            return defer.fail()
        now = self.reactor.seconds()
        if timestamp_ms is None:
            timestamp_ms = int(now * 1000)
        headers = list(headers) if headers else ()
        d = RecordDeferred()
        self.unacked += 1
        parts = self.client.partitions.get(topic)
        if parts is not None and (partition is not None or now < self.client.fresh_until):
            if partition is None and len(parts) == 1 and not self._parked:
                # The common case inline (one call per record is what it
                # costs): an open batch the encoded record fits in.
                batch = self._open.get(self._tps.get((topic, parts[0])))
                if batch is not None:
                    records = batch.records
                    encoded = encode_record(
                        key, value, headers, timestamp_ms - batch.base_ts, len(records)
                    )
                    size = len(encoded)
                    if (
                        batch.size + size <= self._fast_batch_limit
                        and self.buffered_bytes + size <= self._buffer_memory
                    ):
                        records.append(encoded)
                        batch.deferreds.append(d)
                        batch.size += size
                        self.buffered_bytes += size
                        if timestamp_ms > batch.max_ts:
                            batch.max_ts = timestamp_ms
                        if self._raw_values and not self._stopped:
                            # A lane again (parking dropped it while this
                            # batch stayed open).
                            self._lanes[topic] = batch
                        return d
            self._place(parts, topic, partition, key, value, headers, timestamp_ms, d)
            if len(parts) == 1 and self._raw_values and not self._parked and not self._stopped:
                lane = self._open.get(self._tps.get((topic, parts[0])))
                if lane is not None:
                    self._lanes[topic] = lane
            return d
        key_bytes, value_bytes = key, value
        waiting = self._lookups.get(topic)
        if waiting is None:
            # One metadata lookup per topic, however many records wait on it.
            waiting = self._lookups[topic] = []
            lookup = self.client.partitions_for(topic)
            lookup.addBoth(self._looked_up, topic)
        waiting.append((partition, key_bytes, value_bytes, headers, timestamp_ms, d))
        return d

    def _looked_up(self, result, topic):
        waiting = self._lookups.pop(topic, [])
        for partition, key, value, headers, timestamp_ms, d in waiting:
            if isinstance(result, Failure):
                self._drop(d, result)
            else:
                self._place(result, topic, partition, key, value, headers, timestamp_ms, d)

    def _place(self, parts, topic, partition, key, value, headers, timestamp_ms, d):
        if partition is None:
            # One partition leaves a partitioner no choice: skip the call.
            partition = (
                parts[self.partitioner.partition(topic, key, len(parts))]
                if len(parts) > 1
                else parts[0]
            )
        elif partition not in parts:
            self._drop(d, BrokerResponseError(3, where=f"{topic}[{partition}]"))
            return
        if self._txn is not None and not self._txn.accepting():
            # Its metadata came after an abort began.
            self._drop(d, self._txn.error or TransactionAbortedError("transaction aborted"))
            return
        tp = self._tps.get((topic, partition))
        if tp is None:
            tp = self._tps[(topic, partition)] = TopicPartition(topic, partition)
        if self._parked or not self._has_room(key, value):
            self._lanes.clear()  # parked records go first: no overtaking
            timer = self.reactor.callLater(ms(self.config["max.block.ms"]), self._park_expired, d)
            self._parked.append((tp, key, value, headers, timestamp_ms, d, timer))
            return
        self._append(tp, key, value, headers, timestamp_ms, d)

    def _append(self, tp, key, value, headers, timestamp_ms, d):
        batch = self._open.get(tp)
        if batch is None:
            batch = self._open[tp] = Batch(
                tp, timestamp_ms, self.reactor.seconds(), self._fast_batch_limit
            )
            if self._timer is None:
                self._timer = self.reactor.callLater(
                    ms(self.config["linger.ms"]), self._linger_expired
                )
        encoded = encode_record(
            key, value, headers, timestamp_ms - batch.base_ts, len(batch.records)
        )
        size = len(encoded)
        if size + BATCH_OVERHEAD > self._max_request_size:
            self._drop(
                d,
                RecordTooLargeError(
                    f"record of {size} bytes is larger than max.request.size "
                    f"{self.config['max.request.size']}"
                ),
            )
            return
        if batch.records and batch.size + size > self._batch_size:
            self._close_batch(batch)
            self._append(tp, key, value, headers, timestamp_ms, d)
            self._drain()
            return
        batch.records.append(encoded)
        batch.deferreds.append(d)
        batch.size += size
        if timestamp_ms > batch.max_ts:
            batch.max_ts = timestamp_ms
        self.buffered_bytes += size
        if batch.size >= self._batch_size:
            self._close_batch(batch)
            self._drain()

    def _close_batch(self, batch):
        if self._open.get(batch.tp) is batch:
            del self._open[batch.tp]
        if self._lanes.get(batch.tp.topic) is batch:
            del self._lanes[batch.tp.topic]
        self._queued.setdefault(batch.tp, deque()).append(batch)

    def _linger_expired(self):
        self._timer = None
        for batch in list(self._open.values()):
            self._close_batch(batch)
        self._drain()

    def _park_expired(self, d):
        for i, item in enumerate(self._parked):
            if item[5] is d:
                del self._parked[i]
                self._drop(
                    d,
                    KafkaTimeoutError(
                        f"buffer.memory full for max.block.ms={self.config['max.block.ms']}"
                    ),
                )
                return

    def _release(self, batch):
        self.buffered_bytes -= batch.size - BATCH_OVERHEAD
        self.unacked -= len(batch.deferreds)
        batch.deferreds = []
        limit = self.config["buffer.memory"]
        while self._parked and self._has_room(self._parked[0][1], self._parked[0][2]):
            tp, key, value, headers, ts, d, timer = self._parked.popleft()
            if timer.active():
                timer.cancel()
            self._append(tp, key, value, headers, ts, d)
        if self.buffered_bytes < limit and not self._parked:
            waiters, self._room_waiters = self._room_waiters, []
            for w in waiters:
                w.callback(None)

    def _drop(self, d, exc):
        """Fail one record that never made it into a batch."""
        self.unacked -= 1
        d.errback(exc)
        self._check_idle()

    def _has_room(self, key, value):
        """Room in buffer.memory for a record (an empty buffer takes any)."""
        if not self.buffered_bytes:
            return True
        size = 16 + (len(key) if key else 0) + (len(value) if value else 0)
        return self.buffered_bytes + size <= self._buffer_memory

    def _check_idle(self):
        if self.unacked == 0 and not self._parked:
            waiters, self._idle_waiters = self._idle_waiters, []
            for w in waiters:
                w.callback(None)
