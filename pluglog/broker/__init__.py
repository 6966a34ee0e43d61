"""The broker core: partitions, the append and read path, and what guards it.

Owns :class:`~pluglog.broker.core.Broker` (storage, coordinator and the
partitions this broker hosts), :class:`~pluglog.broker.partition.Partition`,
produce validation, idempotent-producer state, quotas, dynamic config and the
log cleaner's scheduling. May import group, replication, coordination,
security, serialization, storage, protocol and the layers below them
(docs/architecture.rst, Layers); never server, web, service or tap.
"""
