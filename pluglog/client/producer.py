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

Back-pressure: records waiting for an answer count against
``buffer.memory``; past it ``send()`` parks the record (it enters the buffer
as acknowledgements free room, or fails after ``max.block.ms``) and
:meth:`Producer.wait_for_room` gives a loop something to wait on.
"""

from collections import deque
from typing import NamedTuple

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from pluglog.client import plugins
from pluglog.client.cluster import ClusterClient, TopicPartition
from pluglog.client.config import PRODUCER, client_config, ms
from pluglog.client.errors import (
    REFRESH_METADATA,
    BrokerResponseError,
    KafkaClientError,
    KafkaConnectionError,
    RequestTimedOutError,
)
from pluglog.errors import ConfigError
from pluglog.protocol.api_keys import INIT_PRODUCER_ID, PRODUCE
from pluglog.protocol.records import CODEC_NAMES, build_batch_from_encoded, encode_record_fields
from pluglog.serializers import BytesSerializer

log = Logger()

PRODUCE_VERSION = 8
DUPLICATE_SEQUENCE_NUMBER = 46
_BATCH_OVERHEAD = 61


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


class _Batch:
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
    )

    def __init__(self, tp, base_ts, now):
        self.tp = tp
        self.records = []
        self.deferreds = []
        self.size = _BATCH_OVERHEAD
        self.base_ts = base_ts
        self.max_ts = base_ts
        self.created = now
        self.built = None
        self.base_sequence = -1
        self.attempts = 0
        self.not_before = 0.0  # a retried batch waits retry.backoff.ms


class Producer:
    """Kafka producer on the reactor (aiokafka's AIOKafkaProducer, with Deferreds).

    ``Producer(reactor, bootstrap_servers="host:9092", acks="all", **kafka_config)``
    where config keys are Kafka's (``linger_ms=5`` or ``**{"linger.ms": 5}``).
    """

    def __init__(self, reactor, bootstrap_servers=None, acks=None, **kafka_config):
        explicit_idempotence = any(
            k.replace("_", ".") == "enable.idempotence" for k in kafka_config
        )
        self.config = config = client_config(
            PRODUCER, kafka_config, bootstrap_servers=bootstrap_servers, acks=acks
        )
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
        self.key_serializer = plugins.build("serializer", config["key.serializer"], reactor)
        self.value_serializer = plugins.build("serializer", config["value.serializer"], reactor)
        self.client = ClusterClient(reactor, config)
        self.client.allow_auto_topic_creation = True
        self.producer_id = -1
        self.producer_epoch = -1
        self._sequences = {}
        self._open = {}  # tp -> the batch records go into
        self._queued = {}  # tp -> deque of closed batches waiting to be sent
        self._in_flight = set()  # tps with a batch on the wire
        self._node_requests = {}  # node id -> Produce requests in flight
        self._timer = None
        self._retry_timer = None
        self._retry_refresh = False
        self._parked = deque()
        self._lookups = {}  # topic -> records waiting for its metadata
        self._tps = {}
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

    # -- lifecycle --------------------------------------------------------

    @defer.inlineCallbacks
    def start(self):
        """Bootstrap (metadata) and, with idempotence, get a producer id."""
        if self._started is None:
            self._started = True
            yield self.client.start()
            if self.idempotent:
                yield self._init_producer_id()
            self._drain()
        return self

    @defer.inlineCallbacks
    def _init_producer_id(self):
        body = {"transactional_id": None, "transaction_timeout_ms": 2147483647}
        response = yield self.client.send(None, INIT_PRODUCER_ID, 1, body)
        if response["error_code"]:
            raise BrokerResponseError(response["error_code"], where="InitProducerId")
        self.producer_id = response["producer_id"]
        self.producer_epoch = response["producer_epoch"]

    @defer.inlineCallbacks
    def stop(self):
        """Send everything buffered, wait for the answers, close connections."""
        if self._stopped:
            return
        try:
            yield self.flush()
        finally:
            self._stopped = True
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
        d = defer.Deferred()
        self.unacked += 1
        parts = self.client.partitions.get(topic)
        if parts is not None and (partition is not None or now < self.client.fresh_until):
            if partition is None and len(parts) == 1 and not self._parked:
                # The common case inline (one call per record is what it
                # costs): an open batch the encoded record fits in.
                batch = self._open.get(self._tps.get((topic, parts[0])))
                if batch is not None:
                    records = batch.records
                    encoded = encode_record_fields(
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
                        return d
            self._place(parts, topic, partition, key, value, headers, timestamp_ms, d)
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
        tp = self._tps.get((topic, partition))
        if tp is None:
            tp = self._tps[(topic, partition)] = TopicPartition(topic, partition)
        if self._parked or not self._has_room(key, value):
            timer = self.reactor.callLater(ms(self.config["max.block.ms"]), self._park_expired, d)
            self._parked.append((tp, key, value, headers, timestamp_ms, d, timer))
            return
        self._append(tp, key, value, headers, timestamp_ms, d)

    def _append(self, tp, key, value, headers, timestamp_ms, d):
        batch = self._open.get(tp)
        if batch is None:
            batch = self._open[tp] = _Batch(tp, timestamp_ms, self.reactor.seconds())
            if self._timer is None:
                self._timer = self.reactor.callLater(
                    ms(self.config["linger.ms"]), self._linger_expired
                )
        encoded = encode_record_fields(
            key, value, headers, timestamp_ms - batch.base_ts, len(batch.records)
        )
        size = len(encoded)
        if size + _BATCH_OVERHEAD > self._max_request_size:
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

    # -- drain --------------------------------------------------------------

    def _drain(self):
        """Send every queued batch whose partition has nothing in flight."""
        if self._started is None or self._stopped:
            return
        if self.idempotent and self.producer_id < 0:
            return
        by_node = {}
        limit = self.config["max.in.flight.requests.per.connection"]
        now = self.reactor.seconds()
        for tp, queue in list(self._queued.items()):
            if not queue or tp in self._in_flight or queue[0].not_before > now:
                continue
            node = self.client.leader_for(tp)
            if node < 0:
                self._schedule_retry(refresh=True)
                continue
            if self._node_requests.get(node, 0) >= limit and node not in by_node:
                continue
            batch = queue.popleft()
            if not queue:
                del self._queued[tp]
            self._in_flight.add(tp)
            by_node.setdefault(node, []).append(batch)
        for node, batches in by_node.items():
            self._send_request(node, batches)

    def _build(self, batch):
        if batch.built is None:
            if self.idempotent:
                seq = self._sequences.get(batch.tp, 0)
                batch.base_sequence = seq
                self._sequences[batch.tp] = (seq + len(batch.records)) & 0x7FFFFFFF
            batch.built = build_batch_from_encoded(
                batch.records,
                len(batch.records),
                len(batch.records) - 1,
                batch.base_ts,
                batch.max_ts,
                compression=self.compression,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=batch.base_sequence,
            )
        return batch.built

    def _send_request(self, node, batches):
        topics = {}
        for batch in batches:
            batch.attempts += 1
            topics.setdefault(batch.tp.topic, []).append(
                {"index": batch.tp.partition, "records": self._build(batch)}
            )
        body = {
            "transactional_id": None,
            "acks": self.acks,
            "timeout_ms": self.config["request.timeout.ms"],
            "topic_data": [
                {"name": topic, "partition_data": parts} for topic, parts in topics.items()
            ],
        }
        self._node_requests[node] = self._node_requests.get(node, 0) + 1
        d = self.client.send(node, PRODUCE, PRODUCE_VERSION, body, expect_response=self.acks != 0)
        d.addCallbacks(self._answered, self._failed, (node, batches), None, (node, batches))
        d.addErrback(lambda f: log.failure("producer bookkeeping failed", f))

    def _request_done(self, node):
        self._node_requests[node] -= 1

    def _answered(self, response, node, batches):
        self._request_done(node)
        if response is None:  # acks=0
            for batch in batches:
                self._complete(batch, -1, -1)
            self._drain()
            return
        results = {}
        for topic in response["responses"]:
            for part in topic["partition_responses"]:
                results[(topic["name"], part["index"])] = part
        refresh = False
        for batch in batches:
            part = results.get(batch.tp)
            if part is None:
                self._retry_or_fail(batch, KafkaClientError(f"no answer for {batch.tp}"))
                continue
            code = part["error_code"]
            if code == 0 or code == DUPLICATE_SEQUENCE_NUMBER:
                self._complete(batch, part["base_offset"], part.get("log_append_time_ms", -1))
                continue
            exc = BrokerResponseError(code, part.get("error_message"), f"{batch.tp}")
            refresh = refresh or code in REFRESH_METADATA
            self._retry_or_fail(batch, exc)
        if refresh:
            self._schedule_retry(refresh=True)
        self._drain()

    def _failed(self, failure, node, batches):
        self._request_done(node)
        failure.trap(KafkaConnectionError, RequestTimedOutError)
        for batch in batches:
            self._retry_or_fail(batch, failure.value)
        self._schedule_retry(refresh=True)

    def _retry_or_fail(self, batch, exc):
        self._in_flight.discard(batch.tp)
        expired = (self.reactor.seconds() - batch.created) > ms(self.config["delivery.timeout.ms"])
        retriable = getattr(exc, "retriable", True)
        if retriable and not expired and batch.attempts <= self.config["retries"]:
            # Back to the head of its partition's queue, same bytes and sequence.
            batch.not_before = self.reactor.seconds() + ms(self.config["retry.backoff.ms"])
            self._queued.setdefault(batch.tp, deque()).appendleft(batch)
            self._schedule_retry(refresh=False)
            return
        self._fail(batch, exc)

    def _schedule_retry(self, refresh):
        self._retry_refresh = self._retry_refresh or refresh
        if self._retry_timer is not None and self._retry_timer.active():
            return

        def retry():
            self._retry_timer = None
            refresh, self._retry_refresh = self._retry_refresh, False
            if refresh:
                d = self.client.refresh_metadata()
                d.addErrback(lambda f: log.info("metadata refresh failed: {f}", f=f.value))
                d.addBoth(lambda _: self._drain())
            else:
                self._drain()

        self._retry_timer = self.reactor.callLater(ms(self.config["retry.backoff.ms"]), retry)

    def _complete(self, batch, base_offset, append_time):
        self._in_flight.discard(batch.tp)
        topic, partition = batch.tp
        deferreds = batch.deferreds
        self._release(batch)
        if base_offset < 0:
            for d in deferreds:
                d.callback(RecordMetadata(topic, partition, -1, -1))
        else:
            ts = append_time if append_time is not None and append_time >= 0 else None
            for i, d in enumerate(deferreds):
                d.callback(
                    RecordMetadata(
                        topic, partition, base_offset + i, batch.base_ts if ts is None else ts
                    )
                )
        self._check_idle()

    def _fail(self, batch, exc):
        deferreds = batch.deferreds
        self._release(batch)
        for d in deferreds:
            d.errback(exc)
        self._check_idle()

    def _release(self, batch):
        self.buffered_bytes -= batch.size - _BATCH_OVERHEAD
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
