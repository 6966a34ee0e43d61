"""Built-in serializers: raw bytes, UTF-8 strings and JSON documents."""

import json

from zope.interface import implementer

from pluglog.interfaces import ISerializer


@implementer(ISerializer)
class BytesSerializer:
    """Values are bytes already."""

    def serialize(self, topic, value):
        return None if value is None else bytes(value)

    def deserialize(self, topic, data):
        return data


@implementer(ISerializer)
class StringSerializer:
    """Values are str, stored as UTF-8."""

    def serialize(self, topic, value):
        return None if value is None else value.encode("utf-8")

    def deserialize(self, topic, data):
        return None if data is None else bytes(data).decode("utf-8")


@implementer(ISerializer)
class JsonSerializer:
    """Values are JSON-serialisable objects, stored as compact UTF-8 JSON."""

    def serialize(self, topic, value):
        if value is None:
            return None
        return json.dumps(value, separators=(",", ":"), sort_keys=True).encode("utf-8")

    def deserialize(self, topic, data):
        return None if data is None else json.loads(bytes(data))


def make_bytes(config, reactor):
    return BytesSerializer()


def make_string(config, reactor):
    return StringSerializer()


def make_json(config, reactor):
    return JsonSerializer()
