"""One partition as the broker sees it: its log, high watermark, producers, waiters.

Single-node today: the high watermark is the log end offset after every
append (acks=1 and acks=all are the same with one replica). Long-polling
fetches register a waiter that is called once on the next append; nothing
polls.
"""

from pluglog.broker.producer_state import ProducerStateTable, producer_fields
from pluglog.errors import InvalidRecordError, NotEnoughReplicasError

_HEADER_SIZE = 61


class DuplicateAppend:
    """The answer for a retried idempotent batch that is already stored."""

    __slots__ = ("first_offset", "last_offset", "log_append_time", "log_start_offset")

    def __init__(self, first_offset, last_offset, log_append_time, log_start_offset):
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset


class Partition:
    """A topic-partition led by this broker."""

    def __init__(self, topic, index, log, topic_config, leader_epoch=0):
        self.topic = topic
        self.index = index
        self.log = log
        self.config = topic_config
        self.leader_epoch = leader_epoch
        self.high_watermark = log.log_end_offset
        self.producers = ProducerStateTable()
        self._waiters = []
        self._producers_loaded = False

    def _load_producers(self):
        # Rebuild idempotence state from the newest batch headers only: the
        # last five batches per producer are all that is kept anyway.
        self._producers_loaded = True
        infos = self.log.segment_infos()
        if infos:
            self.producers.rebuild(self.log.batch_headers(infos[-1].base_offset))

    @property
    def isr_size(self):
        """In-sync replicas; one (this broker) until replication lands."""
        return 1

    def append(self, records, now_ms, acks=1):
        """Append the records of one produce request (one v2 batch)."""
        if acks == -1 and self.isr_size < self.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.index}: {self.isr_size} in-sync replica(s), "
                f"min.insync.replicas is {self.config.min_insync_replicas}"
            )
        if len(records) < _HEADER_SIZE:
            raise InvalidRecordError(f"record batch of {len(records)} bytes is too short")
        producer_id, epoch, first_seq, last_seq = producer_fields(records)
        if producer_id >= 0:
            # Loaded on the first idempotent batch only: plain producers never
            # pay for the header scan, and a later load still sees every batch.
            if not self._producers_loaded:
                self._load_producers()
            dup = self.producers.check(producer_id, epoch, first_seq, last_seq)
            if dup is not None:
                return DuplicateAppend(dup[0], dup[1], dup[2], self.log.log_start_offset)
        info = self.log.append(records, now_ms, self.leader_epoch)
        if producer_id >= 0:
            self.producers.update(
                producer_id,
                epoch,
                first_seq,
                last_seq,
                info.first_offset,
                info.last_offset,
                info.log_append_time,
            )
        self.high_watermark = self.log.log_end_offset
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                waiter(self)
        return info

    def add_waiter(self, waiter):
        self._waiters.append(waiter)

    def remove_waiter(self, waiter):
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass
