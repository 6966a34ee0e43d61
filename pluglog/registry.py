"""Builds components chosen by name and checks they provide their interface.

Every component kind maps to one registration hook and one interface. The
registry asks each plugin's hook implementation for its ``{name: factory}``
so an error can name the plugin that offered a provider, refuses two plugins
claiming one name, builds with ``factory(config, reactor)`` and runs
``zope.interface.verify.verifyObject`` on the result.
"""

from zope.interface.exceptions import BrokenImplementation, BrokenMethodImplementation, Invalid
from zope.interface.verify import verifyObject

from pluglog import interfaces
from pluglog.errors import PluginError

# kind -> (hook name, interface)
KINDS = {
    "storage": ("pluglog_register_storage", interfaces.ILogStorage),
    "partitioner": ("pluglog_register_partitioners", interfaces.IPartitioner),
    "retention": ("pluglog_register_retention_policies", interfaces.IRetentionPolicy),
    "replica_selector": ("pluglog_register_replica_selectors", interfaces.IReplicaSelector),
    "serializer": ("pluglog_register_serializers", interfaces.ISerializer),
    "schema_registry": (
        "pluglog_register_schema_registries",
        interfaces.ISchemaRegistry,
    ),
    "coordinator": ("pluglog_register_coordinators", interfaces.ICoordinator),
    "sink": ("pluglog_register_sinks", interfaces.ISink),
    "authenticator": ("pluglog_register_authenticators", interfaces.IAuthenticator),
    "authorizer": ("pluglog_register_authorizers", interfaces.IAuthorizer),
    "remote_storage": ("pluglog_register_remote_storage", interfaces.IRemoteLogStorage),
}


class Registry:
    """Name -> factory tables for every component kind, from a plugin manager."""

    def __init__(self, manager):
        self.manager = manager
        self._tables = {}

    def _table(self, kind):
        if kind not in KINDS:
            raise PluginError(kind, "registry", f"unknown component kind {kind!r}")
        if kind in self._tables:
            return self._tables[kind]
        hook_name, interface = KINDS[kind]
        hook = getattr(self.manager.hook, hook_name)
        table = {}
        # pluggy calls the newest registration first; walk oldest first so
        # the table reads in registration order (built-ins first).
        for impl in reversed(hook.get_hookimpls()):
            try:
                offered = impl.function() or {}
            except Exception as exc:
                raise PluginError(
                    impl.plugin_name, interface, f"{hook_name} failed: {exc}"
                ) from exc
            if not isinstance(offered, dict):
                raise PluginError(
                    impl.plugin_name, interface, f"{hook_name} must return a dict of factories"
                )
            for name, factory in offered.items():
                if name in table:
                    raise PluginError(
                        name,
                        interface,
                        f"offered by both {table[name][1]!r} and {impl.plugin_name!r}",
                    )
                if not callable(factory):
                    raise PluginError(name, interface, "factory is not callable")
                table[name] = (factory, impl.plugin_name)
        self._tables[kind] = table
        return table

    def names(self, kind):
        """Return the provider names available for ``kind``."""
        return sorted(self._table(kind))

    def plugin_of(self, kind, name):
        """Return the name of the plugin that offers provider ``name``."""
        return self._table(kind)[name][1]

    def build(self, kind, name, config, reactor):
        """Build provider ``name`` of ``kind`` and verify its interface."""
        table = self._table(kind)
        interface = KINDS[kind][1]
        if name not in table:
            known = ", ".join(sorted(table)) or "none"
            raise PluginError(name, interface, f"no such {kind} provider (available: {known})")
        factory, plugin_name = table[name]
        try:
            provider = factory(config, reactor)
        except PluginError:
            raise
        except Exception as exc:
            raise PluginError(
                name, interface, f"factory from {plugin_name!r} failed: {exc}"
            ) from exc
        verify_provider(plugin_name, interface, provider, name)
        return provider


def verify_provider(plugin_name, interface, provider, name=None):
    """Run ``verifyObject`` (names, attributes and method signatures) and
    raise a one-line PluginError naming the plugin, the interface, each
    missing name, and for a method with the wrong signature the method and
    the signature the interface expects."""
    try:
        verifyObject(interface, provider)
    except Invalid as exc:
        what = f"provider {name!r} ({type(provider).__name__})" if name else repr(provider)
        raise PluginError(plugin_name, interface, f"{what} {describe_invalid(exc)}") from exc


def describe_invalid(exc):
    """One line for a zope.interface verification error."""
    errors = getattr(exc, "exceptions", None) or [exc]
    missing, wrong, other = [], [], []
    for error in errors:
        method = getattr(error, "method", None)
        if isinstance(error, BrokenMethodImplementation) and method is not None:
            signature = f"{method.__name__}{method.getSignatureString()}"
            wrong.append(f"method {method.__name__!r} must accept {signature}: {error.mess}")
            continue
        name = getattr(error, "name", None)
        # BrokenImplementation holds the name or the interface's Method.
        name = getattr(name, "__name__", name)
        if isinstance(error, BrokenImplementation) and isinstance(name, str):
            missing.append(repr(name))
        else:
            other.append(" ".join(str(error).split()))
    parts = []
    if missing:
        parts.append(f"lacks {', '.join(missing)}")
    parts += wrong + other
    return "does not provide it: " + "; ".join(parts)
