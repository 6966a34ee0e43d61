"""The consumer's offset requests: ListOffsets, OffsetFetch, OffsetCommit.

:class:`OffsetsMixin` is part of :class:`~pluglog.client.consumer.Consumer`
(split out to keep modules small): looking up offsets by timestamp, the
group's committed offsets, and committing (explicitly, or every
``auto.commit.interval.ms`` with ``enable.auto.commit``).
"""

from typing import NamedTuple

from twisted.internet import defer
from twisted.logger import Logger

from pluglog.client.cluster import TopicPartition
from pluglog.client.config import ms
from pluglog.client.errors import BrokerResponseError, KafkaClientError
from pluglog.protocol.api_keys import LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH

log = Logger()


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's group identity (Kafka's ConsumerGroupMetadata), for
    :meth:`Producer.send_offsets_to_transaction`: with the generation and
    member id the group coordinator fences a consumer that lost its
    partitions (KIP-447)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class OffsetsMixin:
    """Offset lookups and commits; needs ``client``, ``config``, ``group_id``,
    ``isolation``, ``_states``, ``_group``, ``_running``, ``reactor``."""

    @defer.inlineCallbacks
    def list_offsets(self, tps, timestamp):
        """``{tp: offset}`` for a timestamp (-2 earliest, -1 latest) via ListOffsets."""
        by_node = {}
        for tp in tps:
            node = self.client.leader_for(tp)
            if node < 0:
                yield self.client.refresh_metadata()
                node = self.client.leader_for(tp)
            by_node.setdefault(node, []).append(tp)
        out = {}
        for node, group in by_node.items():
            topics = {}
            for tp in group:
                topics.setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "timestamp": timestamp}
                )
            body = {
                "replica_id": -1,
                "isolation_level": self.isolation,
                "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
            }
            response = yield self.client.send(node, LIST_OFFSETS, 5, body)
            for topic in response["topics"]:
                for part in topic["partitions"]:
                    tp = TopicPartition(topic["name"], part["partition_index"])
                    if part["error_code"]:
                        raise BrokerResponseError(part["error_code"], where=f"ListOffsets {tp}")
                    out[tp] = part["offset"]
        return out

    def group_metadata(self):
        """This consumer's :class:`ConsumerGroupMetadata` (its generation and
        member id as of the last rebalance)."""
        if self.group_id is None:
            raise KafkaClientError("group_metadata() needs a group_id")
        if self._group is None:
            return ConsumerGroupMetadata(self.group_id)
        generation, member_id, instance_id = self._group.identity()
        return ConsumerGroupMetadata(self.group_id, generation, member_id, instance_id)

    @defer.inlineCallbacks
    def committed_offsets(self, tps):
        """``{tp: committed offset or None}`` for the consumer's group."""
        node = yield self._coordinator()
        topics = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = {
            "group_id": self.group_id,
            "topics": [{"name": t, "partition_indexes": p} for t, p in topics.items()],
        }
        response = yield self.client.send(node, OFFSET_FETCH, 5, body, purpose="group")
        if response.get("error_code"):
            if self._group is not None:
                self._group.coordinator_error(response["error_code"])
            raise BrokerResponseError(response["error_code"], where="OffsetFetch")
        out = {}
        for topic in response["topics"]:
            for part in topic["partitions"]:
                tp = TopicPartition(topic["name"], part["partition_index"])
                offset = part["committed_offset"]
                out[tp] = offset if offset >= 0 else None
        return out

    @defer.inlineCallbacks
    def committed(self, partition):
        """Deferred: the group's committed offset of ``partition`` (or None)."""
        offsets = yield self.committed_offsets([TopicPartition(*partition)])
        return offsets.get(TopicPartition(*partition))

    def _coordinator(self):
        if self._group is not None:
            return self._group.coordinator()
        return self.client.find_coordinator(self.group_id)

    @defer.inlineCallbacks
    def commit(self, offsets=None):
        """Commit ``offsets`` ({tp: offset}) or every position; Deferred."""
        if self.group_id is None:
            raise KafkaClientError("commit() needs a group_id")
        if offsets is None:
            offsets = {tp: s.position for tp, s in self._states.items() if s.position is not None}
        if not offsets:
            return
        generation, member_id, instance_id = -1, "", None
        if self._group is not None:
            generation, member_id, instance_id = self._group.identity()
        topics = {}
        for tp, offset in offsets.items():
            tp = TopicPartition(*tp)
            topics.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": int(offset),
                    "committed_metadata": "",
                }
            )
        body = {
            "group_id": self.group_id,
            "generation_id_or_member_epoch": generation,
            "member_id": member_id,
            "group_instance_id": instance_id,
            "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
        }
        node = yield self._coordinator()
        response = yield self.client.send(node, OFFSET_COMMIT, 7, body, purpose="group")
        for topic in response["topics"]:
            for part in topic["partitions"]:
                if part["error_code"]:
                    if self._group is not None:
                        self._group.coordinator_error(part["error_code"])
                    raise BrokerResponseError(
                        part["error_code"], where=f"OffsetCommit {topic['name']}"
                    )

    def _commit_quietly(self):
        d = self.commit()
        d.addErrback(lambda f: log.info("auto commit failed: {e}", e=f.value))
        return d

    def _auto_commit_tick(self):
        self._auto_commit = None
        if not self._running:
            return
        d = self._commit_quietly()

        def again(_):
            if self._running:
                interval = ms(self.config["auto.commit.interval.ms"])
                self._auto_commit = self.reactor.callLater(interval, self._auto_commit_tick)

        d.addBoth(again)
