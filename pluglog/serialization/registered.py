"""What the registry-backed serializers share: their options and writer schema.

:class:`RegisteredSerializer` is the base of
:class:`~pluglog.serialization.avro.AvroSerializer` and
:class:`~pluglog.serialization.json_schema.JsonSchemaSerializer`: the
registry, ``is_key``, the subject name strategy and ``auto_register``, the
writer schema as JSON text, and :meth:`~RegisteredSerializer._registered`,
which turns a subject into the writer's schema id the way confluent-kafka's
serializers do (register, look up, or take the latest version). Subclasses
keep only their format: parsing, writing and reading values.
"""

import json

from pluglog.serialization.strategies import topic_name_strategy


class RegisteredSerializer:
    """Options and writer-schema lookup of a serializer backed by a registry."""

    #: The registry's ``schemaType``; None for Avro, the default, which is
    #: not passed (registries that predate schema types take no such argument).
    schema_type = None

    def __init__(
        self,
        registry,
        schema=None,
        is_key=False,
        subject_name_strategy=topic_name_strategy,
        auto_register=True,
    ):
        self.registry = registry
        self.is_key = is_key
        self.strategy = subject_name_strategy
        self.auto_register = auto_register
        self._text = None
        if schema is not None:
            self._text = schema if isinstance(schema, str) else json.dumps(schema)
        self._ids = {}  # subject -> what the subclass caches for its writer

    def _registered(self, subject):
        """``(schema id, schema text)`` of the writer for ``subject``: the
        configured schema registered (or looked up without ``auto_register``),
        else the subject's latest version."""
        if self._text is None:
            schema_id, _version, text = self.registry.get_latest(subject)
            return schema_id, text
        kwargs = {} if self.schema_type is None else {"schema_type": self.schema_type}
        if self.auto_register:
            return self.registry.register(subject, self._text, **kwargs), self._text
        return self.registry.lookup(subject, self._text, **kwargs), self._text
