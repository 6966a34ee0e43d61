"""JSON Schema: the registry's ``schemaType: JSON`` and a framed JSON serializer.

Optional: everything here needs the ``jsonschema`` package, imported only
when a JSON schema is met (:func:`available` says whether it is installed).

* :func:`check` validates a schema with jsonschema's own metaschema check
  (the draft its ``$schema`` names, else the newest draft).
* :func:`incompatibilities` applies the registry's levels to JSON schemas.
  "Reader reads writer's data" means the reader schema accepts every
  document the writer schema accepts. The rules are a conservative subset of
  Confluent's JSON Schema rules: types (``integer`` may widen to
  ``number``), ``enum``, ``required``, ``properties`` recursively,
  ``additionalProperties`` (a property added to an open content model is a
  change Confluent also refuses), ``items``, and the min/max bounds and
  ``pattern``. Any other difference in a keyword it does not model
  (``$ref``, ``oneOf``, ``anyOf``, ``allOf``, ``not``, ...) is refused
  rather than guessed.
* :class:`JsonSchemaSerializer` (ISerializer ``jsonschema``) writes
  Confluent's framing (magic 0x00, 4-byte schema id) around UTF-8 JSON and
  validates values against the schema both ways, as confluent-kafka's
  ``JSONSerializer`` / ``JSONDeserializer`` do; the bytes interoperate
  with them.
"""

import json

from zope.interface import implementer

from pluglog.interfaces import ISerializer
from pluglog.serialization.compatibility import by_level
from pluglog.serialization.framing import SerializationError, frame, unframe
from pluglog.serialization.registered import RegisteredSerializer
from pluglog.serialization.strategies import topic_name_strategy

SCHEMA_TYPE = "JSON"
_UPPER = ("maxLength", "maximum", "exclusiveMaximum", "maxItems", "maxProperties")
_LOWER = ("minLength", "minimum", "exclusiveMinimum", "minItems", "minProperties")
_HANDLED = frozenset(
    (
        "type",
        "enum",
        "required",
        "properties",
        "additionalProperties",
        "items",
        "pattern",
        "$schema",
        "$id",
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        *_UPPER,
        *_LOWER,
    )
)


def available():
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        return False
    return True


def _validator_class(schema):
    try:
        from jsonschema import validators
    except ImportError:
        raise SerializationError("JSON schemas need the jsonschema package") from None
    return validators.validator_for(schema)


def check(decoded):
    """Raise SerializationError unless ``decoded`` is a valid JSON schema."""
    if not isinstance(decoded, dict | bool):
        raise SerializationError("a JSON schema must be an object or a boolean")
    from jsonschema.exceptions import SchemaError

    try:
        _validator_class(decoded).check_schema(decoded)
    except SchemaError as exc:
        raise SerializationError(f"invalid JSON schema: {exc.message}") from None


def _types(schema):
    kind = schema.get("type")
    if kind is None:
        return None
    return {kind} if isinstance(kind, str) else set(kind)


def _accepts_all(schema):
    return (
        schema is True
        or schema == {}
        or (
            isinstance(schema, dict)
            and not (set(schema) - {"$schema", "$id", "title", "description"})
        )
    )


def reader_errors(reader, writer, path="#"):
    """Why ``reader`` may refuse a document ``writer`` accepts; [] if none."""
    if _accepts_all(reader) or writer is False:
        return []
    if reader is False:
        return [f"{path}: the schema accepts nothing"]
    if _accepts_all(writer):
        return [f"{path}: constraints added to a schema that accepted any value"]
    errors = []
    for key in sorted((set(reader) | set(writer)) - _HANDLED):
        if reader.get(key) != writer.get(key):
            errors.append(f"{path}: '{key}' changed (not checked, so refused)")
    r_types, w_types = _types(reader), _types(writer)
    if r_types is not None:
        if w_types is None:
            errors.append(f"{path}: type restricted to {sorted(r_types)}")
        else:
            lost = {t for t in w_types - r_types if not (t == "integer" and "number" in r_types)}
            if lost:
                errors.append(f"{path}: type {sorted(lost)} no longer allowed")
    if "enum" in reader:
        if "enum" not in writer:
            errors.append(f"{path}: enum added")
        else:
            gone = [v for v in writer["enum"] if v not in reader["enum"]]
            if gone:
                errors.append(f"{path}: enum values {gone} removed")
    added = set(reader.get("required", ())) - set(writer.get("required", ()))
    if added:
        errors.append(f"{path}: required properties {sorted(added)} added")
    errors += _property_errors(reader, writer, path)
    r_items, w_items = reader.get("items"), writer.get("items", True)
    if isinstance(r_items, dict | bool) and isinstance(w_items, dict | bool):
        errors += reader_errors(r_items, w_items, f"{path}/items")
    elif r_items != writer.get("items"):
        errors.append(f"{path}: 'items' changed (not checked, so refused)")
    for key in _UPPER:
        if key in reader and (key not in writer or writer[key] > reader[key]):
            errors.append(f"{path}: {key} lowered to {reader[key]}")
    for key in _LOWER:
        if key in reader and (key not in writer or writer[key] < reader[key]):
            errors.append(f"{path}: {key} raised to {reader[key]}")
    if "pattern" in reader and reader["pattern"] != writer.get("pattern"):
        errors.append(f"{path}: pattern changed to {reader['pattern']!r}")
    return errors


def _property_errors(reader, writer, path):
    errors = []
    r_props, w_props = reader.get("properties", {}), writer.get("properties", {})
    r_extra = reader.get("additionalProperties", True)
    w_extra = writer.get("additionalProperties", True)
    for name in sorted(set(r_props) | set(w_props)):
        where = f"{path}/properties/{name}"
        if name in r_props and name in w_props:
            errors += reader_errors(r_props[name], w_props[name], where)
        elif name in w_props:
            # The writer's documents may have it; the reader's extras decide.
            errors += reader_errors(r_extra, w_props[name], where)
        elif w_extra is not False and not _accepts_all(r_props[name]):
            # Open writer: its documents may hold anything under that name.
            errors.append(f"{where}: property added to an open content model")
    if w_extra is not False and r_extra is not True:
        if isinstance(w_extra, dict | bool) and isinstance(r_extra, dict | bool):
            errors += reader_errors(r_extra, w_extra, f"{path}/additionalProperties")
    return errors


def incompatibilities(level, new, existing):
    """Why ``new`` may not follow ``existing`` (oldest first) at ``level``."""
    return by_level(level, new, existing, reader_errors)


@implementer(ISerializer)
class JsonSchemaSerializer(RegisteredSerializer):
    """Framed JSON validated against a JSON schema in the registry.

    ``schema`` (JSON text) is registered (or looked up without
    ``auto_register``) under the topic's subject; without it the subject's
    latest version is the writer schema. Registries are any ISchemaRegistry
    whose ``register``/``lookup`` take ``schema_type`` (pluglog's own and
    :class:`~pluglog.serialization.client.RegistryClient`).
    """

    schema_type = SCHEMA_TYPE

    def __init__(
        self,
        registry,
        schema=None,
        is_key=False,
        subject_name_strategy=topic_name_strategy,
        auto_register=True,
    ):
        super().__init__(registry, schema, is_key, subject_name_strategy, auto_register)
        if self._text is not None:
            check(json.loads(self._text))
        # self._ids: subject -> (id, validator)
        self._validators = {}  # id -> validator

    @staticmethod
    def _validator(text):
        decoded = json.loads(text)
        return _validator_class(decoded)(decoded)

    def _writer_for(self, topic):
        subject = self.strategy(topic, self.is_key, None)
        cached = self._ids.get(subject)
        if cached is None:
            schema_id, text = self._registered(subject)
            cached = self._ids[subject] = (schema_id, self._validator(text))
            self._validators[schema_id] = cached[1]
        return cached

    def _check(self, validator, value, topic):
        from jsonschema.exceptions import ValidationError

        try:
            validator.validate(value)
        except ValidationError as exc:
            raise SerializationError(
                f"{topic}: value does not match its schema: {exc.message}"
            ) from None

    def serialize(self, topic, value):
        if value is None:
            return None
        schema_id, validator = self._writer_for(topic)
        self._check(validator, value, topic)
        return frame(schema_id, json.dumps(value, separators=(",", ":")).encode("utf-8"))

    def deserialize(self, topic, data):
        if data is None:
            return None
        schema_id, payload = unframe(data)
        validator = self._validators.get(schema_id)
        if validator is None:
            validator = self._validators[schema_id] = self._validator(
                self.registry.get_schema(schema_id)
            )
        try:
            value = json.loads(bytes(payload))
        except ValueError as exc:
            raise SerializationError(f"{topic}: schema id {schema_id}: not JSON: {exc}") from None
        self._check(validator, value, topic)
        return value
