"""Schema-aware serialization: Confluent framing, Avro, subjects, the schema registry.

* :mod:`~pluglog.serialization.framing` owns the wire framing shared with
  Confluent's serializers (magic byte 0x00, big-endian u32 schema id).
* :mod:`~pluglog.serialization.avro` turns values into framed Avro and back
  with fastavro (an ISerializer provider).
* :mod:`~pluglog.serialization.strategies` names subjects (TopicNameStrategy,
  RecordNameStrategy, TopicRecordNameStrategy).
* :mod:`~pluglog.serialization.compatibility` decides Avro schema
  compatibility (NONE, BACKWARD, FORWARD, FULL and the transitive forms).
* :mod:`~pluglog.serialization.registry` is the registry's state machine
  (subjects, versions, ids, configs) rebuilt from the ``_schemas`` topic, and
  :mod:`~pluglog.serialization.store` reads and appends that topic.
* :mod:`~pluglog.serialization.client` is an HTTP client of the registry's
  REST API (the CLI, Spark and any process outside the broker).

It may import storage, protocol, plugins and below (docs/architecture.rst,
Layers); the web layer serves its registry.
"""
