"""Subject name strategies: which registry subject a topic's keys or values use.

The names and results are Confluent's, so a subject registered by a
confluent-kafka producer is the one pluglog looks up:

* ``TopicNameStrategy`` (default): ``<topic>-key`` / ``<topic>-value``.
* ``RecordNameStrategy``: the record's full name (``namespace.Name``), so one
  topic can carry several record types.
* ``TopicRecordNameStrategy``: ``<topic>-<namespace.Name>``.
"""

from pluglog.serialization.framing import SerializationError


def _full_name(schema):
    if not isinstance(schema, dict) or "name" not in schema:
        raise SerializationError("RecordNameStrategy needs a named (record) schema")
    name = schema["name"]
    namespace = schema.get("namespace")
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def topic_name_strategy(topic, is_key, schema):
    return f"{topic}-{'key' if is_key else 'value'}"


def record_name_strategy(topic, is_key, schema):
    return _full_name(schema)


def topic_record_name_strategy(topic, is_key, schema):
    return f"{topic}-{_full_name(schema)}"


STRATEGIES = {
    "TopicNameStrategy": topic_name_strategy,
    "RecordNameStrategy": record_name_strategy,
    "TopicRecordNameStrategy": topic_record_name_strategy,
}


def strategy(name):
    """Return the strategy function called ``name``; SerializationError if unknown."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise SerializationError(
            f"unknown subject name strategy {name!r} (known: {', '.join(STRATEGIES)})"
        ) from None
