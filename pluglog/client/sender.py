"""The producer's sending half: Produce requests, answers, retries, idempotence.

:class:`SenderMixin` is mixed into :class:`pluglog.client.producer.Producer`
and owns everything after a batch is closed: it takes a producer id from
InitProducerId (``enable.idempotence``), numbers each partition's batches,
sends the batches of all partitions led by one broker in one Produce request,
and on the answer fires the records' Deferreds or puts the batch back into
its queue in send order (same bytes, same sequence) after
``retry.backoff.ms``, until ``delivery.timeout.ms``.

In flight per partition: one batch without idempotence (a retry could
otherwise overtake a later batch); with it up to
``max.in.flight.requests.per.connection`` (Kafka's rule: the broker's
sequence check keeps them in order), so the broker appends batch N+1 while
the application fills N+2. A retried batch goes out alone; a later batch the
broker refused as OUT_OF_ORDER_SEQUENCE_NUMBER behind it is retried too.
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
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
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
        """Send queued batches: up to ``max.in.flight.requests.per.connection``
        requests per broker and, per partition, one batch in flight (or that
        many with idempotence, whose sequence numbers keep them in order; a
        retried batch goes out alone, so it cannot be overtaken)."""
        if self._started is None or self._stopped:
            return
        if self.idempotent and self.producer_id < 0:
            return
        by_node = {}  # node -> requests, each at most one batch per partition
        limit = self.config["max.in.flight.requests.per.connection"]
        per_partition = limit if self.idempotent else 1
        in_flight = self._in_flight
        txn = self._txn
        now = self.reactor.seconds()
        for tp, queue in list(self._queued.items()):
            if txn is not None and tp not in txn.added:
                txn.need(tp)  # AddPartitionsToTxn first (kicked below)
                continue
            node = -2
            round_ = 0
            while queue and in_flight.get(tp, 0) < per_partition:
                head = queue[0]
                if head.not_before > now or (head.attempts and in_flight.get(tp, 0)):
                    break
                if node == -2:
                    node = self.client.leader_for(tp)
                    if node < 0:
                        self._schedule_retry(refresh=True)
                        break
                requests = by_node.setdefault(node, [])
                if round_ == len(requests):
                    if self._node_requests.get(node, 0) + len(requests) >= limit:
                        break
                    requests.append([])
                requests[round_].append(queue.popleft())
                round_ += 1
                in_flight[tp] = in_flight.get(tp, 0) + 1
            if not queue:
                del self._queued[tp]
        for node, requests in by_node.items():
            for batches in requests:
                self._send_request(node, batches)
        if txn is not None:
            txn.kick()

    def _landed(self, tp):
        """One batch of ``tp`` is no longer on the wire."""
        left = self._in_flight.get(tp, 0) - 1
        if left > 0:
            self._in_flight[tp] = left
        else:
            self._in_flight.pop(tp, None)

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
                is_transactional=self._txn is not None,
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
            "transactional_id": self.transactional_id,
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
                self._landed(batch.tp)
            self._drain()
            for batch in batches:
                self._complete(batch, -1, -1)
            return
        results = {}
        for topic in response["responses"]:
            for part in topic["partition_responses"]:
                results[(topic["name"], part["index"])] = part
        refresh = False
        done = []
        for batch in batches:
            part = results.get(batch.tp)
            if part is None:
                self._retry_or_fail(batch, KafkaClientError(f"no answer for {batch.tp}"))
                continue
            code = part["error_code"]
            if code == 0 or code == DUPLICATE_SEQUENCE_NUMBER:
                self._landed(batch.tp)
                done.append((batch, part))
                continue
            exc = BrokerResponseError(code, part.get("error_message"), f"{batch.tp}")
            if code == OUT_OF_ORDER_SEQUENCE_NUMBER and self._behind_a_retry(batch):
                exc.retriable = True  # its predecessor failed and goes again first
            refresh = refresh or code in REFRESH_METADATA
            self._retry_or_fail(batch, exc)
        if refresh:
            self._schedule_retry(refresh=True)
        # The next batches go out before the acks fire: an application that
        # sends more from its callbacks (or from wait_for_room) runs while the
        # broker already has work.
        self._drain()
        for batch, part in done:
            self._complete(batch, part["base_offset"], part.get("log_append_time_ms", -1))

    def _behind_a_retry(self, batch):
        queue = self._queued.get(batch.tp)
        return bool(queue) and queue[0].order < batch.order

    def _failed(self, failure, node, batches):
        self._request_done(node)
        failure.trap(KafkaConnectionError, RequestTimedOutError)
        for batch in batches:
            self._retry_or_fail(batch, failure.value)
        self._schedule_retry(refresh=True)

    def _retry_or_fail(self, batch, exc):
        self._landed(batch.tp)
        expired = (self.reactor.seconds() - batch.created) > ms(self.config["delivery.timeout.ms"])
        retriable = getattr(exc, "retriable", True)
        if retriable and not expired and batch.attempts <= self.config["retries"]:
            # Back into its partition's queue in send order (ahead of later
            # batches, behind an earlier one that failed too), same bytes and
            # sequence.
            batch.not_before = self.reactor.seconds() + ms(self.config["retry.backoff.ms"])
            queue = self._queued.setdefault(batch.tp, deque())
            at = 0
            while at < len(queue) and queue[at].order < batch.order:
                at += 1
            queue.insert(at, batch)
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
        if self._txn is not None:
            exc = self._txn.batch_failed(exc)
        deferreds = batch.deferreds
        self._release(batch)
        for d in deferreds:
            d.errback(exc)
        self._check_idle()

    def _drop_unsent(self, exc):
        """Fail every record not sent yet (an abort): open batches, queued
        batches never sent (a retried one keeps its place: it has a sequence
        number) and records waiting for room."""
        self._lanes.clear()
        for batch in list(self._open.values()):
            self._close_batch(batch)
        for tp, queue in list(self._queued.items()):
            keep = [b for b in queue if b.built is not None]
            for batch in queue:
                if batch.built is None:
                    self._fail(batch, exc)
            if keep:
                self._queued[tp] = type(queue)(keep)
            else:
                del self._queued[tp]
        while self._parked:
            _tp, _key, _value, _headers, _ts, d, timer = self._parked.popleft()
            if timer.active():
                timer.cancel()
            self._drop(d, exc)

    def _fail_queued(self, tps, exc):
        """Fail the queued batches of ``tps`` (their partitions could not be
        added to the transaction)."""
        for tp in tps:
            for batch in self._queued.pop(tp, ()):
                self._fail(batch, exc)
