"""pluglog.client: a Kafka client on the Twisted reactor, and a blocking one.

``from pluglog.client import Producer, Consumer, AdminClient`` gives
aiokafka-like classes whose methods return Deferreds; they share
:class:`~pluglog.client.cluster.ClusterClient` (metadata, connections) and
:mod:`pluglog.client.connection` (one connection, pipelined requests) with
pluglog's own sans-IO codec. :mod:`pluglog.client.blocking` is the
one-request-at-a-time client for scripts.

It may import serialization, storage, protocol, plugins and the layers below
(docs/architecture.rst, Layers); nothing of the broker.
"""

from pluglog.client.admin import AdminClient, ConfigResource, NewTopic
from pluglog.client.cluster import TopicPartition
from pluglog.client.consumer import Consumer
from pluglog.client.errors import (
    ProducerFencedError,
    TransactionAbortedError,
    TransactionStateError,
)
from pluglog.client.fetcher import ConsumerRecord
from pluglog.client.offsets import ConsumerGroupMetadata
from pluglog.client.producer import Producer, RecordMetadata

__all__ = [
    "AdminClient",
    "ConfigResource",
    "NewTopic",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "Producer",
    "ProducerFencedError",
    "RecordMetadata",
    "TopicPartition",
    "TransactionAbortedError",
    "TransactionStateError",
]
