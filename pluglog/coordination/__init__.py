"""Cluster coordination: the ``local`` and ``zookeeper`` ICoordinator providers.

Owns cluster metadata (brokers, topics, partition states, the controller),
Kafka's ZooKeeper layout, the controller's elections and reassignments, and
the stores of users, quotas, ACLs and dynamic configs. May import security,
client, serialization, storage, protocol and the layers below; never broker,
group, replication, server, web, service or tap: what it needs from above
(advertised URLs, listen addresses) comes in as values or from
:mod:`pluglog.addresses`.
"""
