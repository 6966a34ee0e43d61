"""Factories the built-in plugin registers for serializers and registries.

``factory(config, reactor)`` is the registration hooks' contract; the
registry's address comes from the broker config's ``[schema_registry]``
section (``url = http://host:8081``), else the ``--http`` listener of a
broker on this host, else Confluent's default ``http://localhost:8081``.
"""

from pluglog.addresses import listen_address

DEFAULT_URL = "http://localhost:8081"


def registry_url(config):
    section = config.plugin_section("schema_registry")
    if section.get("url"):
        return section["url"]
    if getattr(config, "http", ""):
        interface, port = listen_address(config.http)
        host = interface if interface not in (None, "", "0.0.0.0", "::") else "localhost"
        return f"http://{host}:{port}"
    return DEFAULT_URL


def make_http_registry(config, reactor):
    """A blocking REST client (for tools and threads, not the reactor)."""
    from pluglog.serialization.client import RegistryClient

    return RegistryClient(registry_url(config))


def make_avro(config, reactor):
    """Framed Avro values through the registry client; the writer schema is
    each subject's latest version (``use.latest.version``)."""
    from pluglog.serialization.avro import AvroSerializer

    return AvroSerializer(make_http_registry(config, reactor))


def make_jsonschema(config, reactor):
    """Framed JSON validated against the subject's JSON schema (needs the
    jsonschema package); the writer schema is the latest version."""
    from pluglog.serialization.json_schema import JsonSchemaSerializer

    return JsonSchemaSerializer(make_http_registry(config, reactor))
