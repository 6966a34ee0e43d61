"""``pluglog produce``'s sending: idempotent, and riding out a failover.

With ``--acks -1`` (the default) the producer asks for a producer id
(InitProducerId) and numbers its batches per partition, as Kafka's
idempotent producer does, so a batch sent again after a lost answer is
written once. A batch whose leader moved or died (NOT_LEADER_OR_FOLLOWER,
NOT_ENOUGH_REPLICAS, a dropped connection, ...) is sent again, unchanged, to
the new leader, for up to :data:`RETRY_FOR_S` seconds; other errors stop the
command with the Kafka error's name.

:func:`read_lines` yields stdin's lines as they come, and ``None`` when
nothing arrived for ``linger`` seconds, so a slow writer's lines are sent
within ``--linger-ms`` instead of waiting for a full batch.
"""

import os
import select
import time

from pluglog import errors
from pluglog import protocol as codec
from pluglog.cli.common import CliError, check, error_name
from pluglog.cli.routing import CONNECTION_ERRORS, NoLeaderError, router
from pluglog.protocol.records import build_batch

#: How long a batch is retried before the command gives up (Kafka's
#: delivery.timeout.ms is 120 s; a console producer gives up sooner).
RETRY_FOR_S = 60.0
BACKOFF_S = 0.5
RETRIABLE = {
    errors.UNKNOWN_TOPIC_OR_PARTITION,
    errors.LEADER_NOT_AVAILABLE,
    errors.NOT_LEADER_OR_FOLLOWER,
    errors.REQUEST_TIMED_OUT,
    errors.NOT_ENOUGH_REPLICAS,
    20,  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    errors.FENCED_LEADER_EPOCH,
    errors.UNKNOWN_LEADER_EPOCH,
}


class Sender:
    """Sends one topic's batches; see the module docstring."""

    def __init__(self, client, topic, acks, compression):
        self.client = client
        self.router = router(client)
        self.topic = topic
        self.acks = acks
        self.compression = compression
        self.producer_id, self.epoch = -1, -1
        self.sequences = {}
        if acks == -1:
            self.producer_id, self.epoch = self._producer_id()

    def _producer_id(self):
        resp = self.client.request(
            codec.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 60000}
        )
        if resp["error_code"]:
            return -1, -1  # not idempotent, still retried
        return resp["producer_id"], resp["producer_epoch"]

    def _batch(self, partition, records):
        sequence = -1
        if self.producer_id >= 0:
            sequence = self.sequences.get(partition, 0)
        return build_batch(
            records,
            compression=self.compression,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=sequence,
            base_timestamp=records[0].timestamp,
        )

    def send(self, pending):
        """Send ``{partition: [Record]}``, retrying retriable failures; empties it."""
        batches = {p: self._batch(p, records) for p, records in pending.items()}
        counts = {p: len(records) for p, records in pending.items()}
        deadline = time.monotonic() + RETRY_FOR_S
        failure = None
        while batches:
            try:
                for leader, partitions in self.router.by_leader(self.topic, sorted(batches)):
                    failure = self._send(leader, partitions, batches, counts) or failure
            except (*CONNECTION_ERRORS, NoLeaderError) as exc:
                failure = str(getattr(exc, "strerror", None) or exc)
            if not batches:
                break
            if time.monotonic() > deadline:
                raise CliError(
                    f"{self.topic}-{min(batches)}: not written in {RETRY_FOR_S:.0f}s: {failure}"
                )
            self.router.reset()
            time.sleep(BACKOFF_S)
        pending.clear()

    def _send(self, leader, partitions, batches, counts):
        body = {
            "transactional_id": None,
            "acks": self.acks,
            "timeout_ms": 30000,
            "topic_data": [
                {
                    "name": self.topic,
                    "partition_data": [{"index": p, "records": batches[p]} for p in partitions],
                }
            ],
        }
        resp = leader.request(codec.PRODUCE, 8, body, expect_response=self.acks != 0)
        answers = (
            resp["responses"][0]["partition_responses"]
            if resp is not None
            else [{"index": p, "error_code": 0} for p in partitions]
        )
        failure = None
        for part in answers:
            partition, code = part["index"], part["error_code"]
            if code in (0, errors.DUPLICATE_SEQUENCE_NUMBER):  # written (maybe before)
                del batches[partition]
                if self.producer_id >= 0:
                    sequence = self.sequences.get(partition, 0) + counts[partition]
                    self.sequences[partition] = sequence
            elif code in RETRIABLE:
                failure = f"{error_name(code)} ({code})"
            else:
                check(code, f"{self.topic}-{partition}", part.get("error_message"))
        return failure


def read_lines(stream, linger):
    """Lines of ``stream`` (without their newline) as they arrive; ``None``
    after ``linger`` seconds without one."""
    fd = stream.fileno()
    buffer = b""
    while True:
        ready, _, _ = select.select([fd], [], [], linger)
        if not ready:
            yield None
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        *lines, buffer = (buffer + chunk).split(b"\n")
        yield from lines
    if buffer:
        yield buffer
