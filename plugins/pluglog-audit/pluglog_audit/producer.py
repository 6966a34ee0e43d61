"""AuditingProducer: confluent-kafka's Producer that counts what it published.

Each produced record gets an explicit CreateTime timestamp; on a successful
delivery report the record is counted under ``(topic, window of that
timestamp)``. :meth:`AuditingProducer.flush` delivers outstanding records and
then publishes the new counts to the audit topic (and waits for those too);
counts are also published every ``publish_interval_s`` from :meth:`poll`.
Records that fail delivery are not counted: the audit compares what the
broker acknowledged with what consumers got.
"""

import os
import socket
import threading
import time
import uuid
from collections import Counter

from confluent_kafka import Producer

from pluglog_audit import counts


class AuditingProducer:
    """Wraps ``confluent_kafka.Producer(config)``; same produce/poll/flush calls."""

    def __init__(
        self,
        config,
        window_ms=60_000,
        audit_topic=counts.AUDIT_TOPIC,
        producer_name=None,
        publish_interval_s=10.0,
    ):
        self.producer = Producer(config)
        self.window_ms = int(window_ms)
        self.audit_topic = audit_topic
        self.name = producer_name or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.publish_interval_s = publish_interval_s
        self._pending = Counter()  # (topic, window start) -> delivered, not yet published
        self._lock = threading.Lock()
        self._last_publish = time.monotonic()
        self.failed = 0

    def produce(self, topic, value=None, key=None, on_delivery=None, **kwargs):
        timestamp = kwargs.pop("timestamp", None) or int(time.time() * 1000)
        start = counts.window_start(timestamp, self.window_ms)

        def delivered(err, msg):
            if err is None:
                with self._lock:
                    self._pending[(topic, start)] += 1
            else:
                self.failed += 1
            if on_delivery is not None:
                on_delivery(err, msg)

        self.producer.produce(
            topic, value=value, key=key, timestamp=timestamp, on_delivery=delivered, **kwargs
        )

    def poll(self, timeout=0):
        served = self.producer.poll(timeout)
        if time.monotonic() - self._last_publish >= self.publish_interval_s:
            self.publish_counts()
        return served

    def publish_counts(self):
        """Produce the delivered-but-unpublished counts to the audit topic."""
        with self._lock:
            pending, self._pending = self._pending, Counter()
        self._last_publish = time.monotonic()
        for (topic, start), count in sorted(pending.items()):
            key, value = counts.encode(self.name, topic, start, self.window_ms, count)
            self.producer.produce(self.audit_topic, key=key, value=value)
        return sum(pending.values())

    def flush(self, timeout=30.0):
        """Deliver every record, publish their counts, deliver those; returns
        the number of messages still queued (0 when everything went out)."""
        left = self.producer.flush(timeout)
        if left:
            return left
        self.publish_counts()
        return self.producer.flush(timeout)
