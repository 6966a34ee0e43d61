"""Client access to pluglog's plugins: partitioners and serializers by name.

The client loads the same IPartitioner and ISerializer providers the broker
and the CLI load (built-ins plus third-party ``pluglog`` entry points), so a
producer using ``partitioner="murmur2"`` places keys as the CLI and every
Kafka client do. A provider object may be passed instead of a name.
"""

from twisted.internet.task import Clock
from zope.interface.exceptions import Invalid
from zope.interface.verify import verifyObject

from pluglog.config import BrokerConfig
from pluglog.errors import ConfigError, PluginError
from pluglog.registry import KINDS, Registry

_registry = None


def registry():
    global _registry
    if _registry is None:
        from pluglog.plugins import make_plugin_manager

        _registry = Registry(make_plugin_manager())
    return _registry


def build(kind, name_or_provider, reactor=None):
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
        return registry().build(kind, name_or_provider, BrokerConfig(), reactor or Clock())
    except PluginError as exc:
        raise ConfigError(f"{kind}={name_or_provider!r}: {exc}") from None
