"""The producer's sending half: Produce requests, answers, retries, idempotence.

:class:`SenderMixin` is mixed into :class:`pluglog.client.producer.Producer`
and owns everything after a batch is closed: it takes a producer id from
InitProducerId (``enable.idempotence``), numbers each partition's batches,
sends the batches of all partitions led by one broker in one Produce request
(at most one batch per partition in flight, so a retry never overtakes a
later batch), and on the answer fires the records' Deferreds or puts the
batch back at the head of its queue (same bytes, same sequence) after
``retry.backoff.ms``, until ``delivery.timeout.ms``.
"""

from collections import deque

from twisted.internet import defer
from twisted.logger import Logger

from pluglog.client.batches import fire_acks
from pluglog.client.config import ms
from pluglog.client.errors import (
    REFRESH_METADATA,
    BrokerResponseError,
    KafkaClientError,
    KafkaConnectionError,
    RequestTimedOutError,
)
from pluglog.protocol.api_keys import INIT_PRODUCER_ID, PRODUCE
from pluglog.protocol.records import build_batch_from_encoded

log = Logger()

PRODUCE_VERSION = 8
DUPLICATE_SEQUENCE_NUMBER = 46


class SenderMixin:
    """Closed batches to Produce requests and back (see the module docstring)."""

    @defer.inlineCallbacks
    def _init_producer_id(self):
        body = {"transactional_id": None, "transaction_timeout_ms": 2147483647}
        response = yield self.client.send(None, INIT_PRODUCER_ID, 1, body)
        if response["error_code"]:
            raise BrokerResponseError(response["error_code"], where="InitProducerId")
        self.producer_id = response["producer_id"]
        self.producer_epoch = response["producer_epoch"]

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
            fire_acks(deferreds, topic, partition, -1, -1)
        else:
            ts = append_time if append_time is not None and append_time >= 0 else batch.base_ts
            fire_acks(deferreds, topic, partition, base_offset, ts)
        self._check_idle()

    def _fail(self, batch, exc):
        deferreds = batch.deferreds
        self._release(batch)
        for d in deferreds:
            d.errback(exc)
        self._check_idle()
