"""Client access to pluglog's plugins: partitioners and serializers by name.

The client loads the IPartitioner and ISerializer providers the CLI loads
(built-ins plus third-party ``pluglog`` entry points; the broker never
partitions: that is the client's job, as in Kafka), so a
producer using ``partitioner="murmur2"`` places keys as the CLI and every
Kafka client do. A provider object may be passed instead of a name, and for
serializers a plain callable too (aiokafka's ``value_serializer=fn`` /
``value_deserializer=fn``). Serializers built by name see the client's
``schema.registry.url`` (the ``avro`` serializer's registry).
"""

from twisted.internet.task import Clock
from zope.interface import implementer
from zope.interface.exceptions import Invalid
from zope.interface.verify import verifyObject

from pluglog.config import BrokerConfig
from pluglog.errors import ConfigError, PluginError
from pluglog.interfaces import ISerializer
from pluglog.registry import KINDS, Registry

_registry = None


def registry():
    global _registry
    if _registry is None:
        from pluglog.plugins import make_plugin_manager

        _registry = Registry(make_plugin_manager())
    return _registry


@implementer(ISerializer)
class CallableSerializer:
    """aiokafka's serializer callables as an ISerializer: ``fn(value) -> bytes``
    on the way out, ``fn(bytes) -> value`` on the way in."""

    def __init__(self, fn):
        self.fn = fn

    def serialize(self, topic, value):
        return self.fn(value)

    def deserialize(self, topic, data):
        return self.fn(data)


def build_serializer(name_or_provider, reactor=None, registry_url=None, is_key=False):
    """A serializer by plugin name, an ISerializer provider, or a callable.

    ``registry_url``: the client's ``schema.registry.url`` for providers that
    talk to a schema registry; ``is_key``: the provider serialises keys (the
    Avro serializer then uses the ``<topic>-key`` subject)."""
    if isinstance(name_or_provider, str):
        config = BrokerConfig()
        if registry_url:
            config = config.replace(plugin_sections={"schema_registry": {"url": registry_url}})
        try:
            provider = build("serializer", name_or_provider, reactor, config)
        except ConfigError:
            raise
        except ValueError as exc:  # e.g. the registry client refusing the URL
            raise ConfigError(f"serializer={name_or_provider!r}: {exc}") from None
        if is_key and hasattr(provider, "is_key"):
            provider.is_key = True
        return provider
    if not ISerializer.providedBy(name_or_provider) and callable(name_or_provider):
        return CallableSerializer(name_or_provider)
    return build("serializer", name_or_provider, reactor)


def build(kind, name_or_provider, reactor=None, config=None):
    """Build provider ``name`` of ``kind`` or verify a provider object."""
    interface = KINDS[kind][1]
    if not isinstance(name_or_provider, str):
        try:
            verifyObject(interface, name_or_provider)
        except Invalid as exc:
            raise ConfigError(
                f"{kind} {name_or_provider!r} does not provide {interface.__name__}: {exc}"
            ) from None
        return name_or_provider
    try:
        return registry().build(
            kind, name_or_provider, config or BrokerConfig(), reactor or Clock()
        )
    except PluginError as exc:
        raise ConfigError(f"{kind}={name_or_provider!r}: {exc}") from None
