"""The plugin manager: hookspecs, then built-ins, then entry points.

Order matters: built-in providers register first through the very hooks
third-party packages use, then setuptools entry points of the group
``pluglog`` are loaded (unless ``PLUGLOG_DISABLE_PLUGIN_AUTOLOAD`` is set),
and ``check_pending`` rejects hook implementations with misspelled names.
The manager is built inside ``makeService`` (never at import time) so a broken
third-party plugin cannot break ``twistd --help``, and importing this module
imports no provider.
"""

import importlib
import os

import pluggy

from pluglog import PROJECT_NAME, hookspecs
from pluglog.errors import PluginError

ENTRY_POINT_GROUP = "pluglog"
#: pluglog's own providers, loaded by module name as third-party ones are by
#: entry point (pytest loads its default plugins the same way). The manager
#: is the bottom of the plugin system and knows no provider; ``builtin`` is
#: a composition root at the top of the layers (docs/architecture.rst).
BUILTIN_PLUGINS = ("pluglog.builtin",)
DISABLE_AUTOLOAD_ENV = "PLUGLOG_DISABLE_PLUGIN_AUTOLOAD"


def make_plugin_manager(extra_plugins=(), autoload=None):
    """Return a ready pluggy.PluginManager for pluglog.

    ``extra_plugins`` are modules or objects registered after the built-ins
    (tests, embedding applications). ``autoload`` overrides the environment
    variable switch for entry-point loading.
    """
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    for name in BUILTIN_PLUGINS:
        manager.register(importlib.import_module(name), name=name)
    for plugin in extra_plugins:
        manager.register(plugin)
    if autoload is None:
        autoload = not os.environ.get(DISABLE_AUTOLOAD_ENV)
    if autoload:
        try:
            manager.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        except Exception as exc:  # a broken third-party package must be named
            name, reason = _name_broken_entry_point(exc)
            raise PluginError(name, f"entry point group {ENTRY_POINT_GROUP!r}", reason) from exc
    try:
        manager.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(exc.plugin, "hookspecs", str(exc)) from exc
    return manager


def _name_broken_entry_point(exc):
    """``(name, reason)`` for the entry point that does not load: pluggy's
    error (often a bare ImportError) names neither it nor its package.
    Installed plugins are refused rather than skipped: one may be the
    authorizer or authenticator the operator relies on."""
    from importlib import metadata

    for dist in metadata.distributions():
        for entry in dist.entry_points:
            if entry.group != ENTRY_POINT_GROUP:
                continue
            try:
                entry.load()
            except Exception as err:
                return entry.name, (
                    f"entry point '{entry.name} = {entry.value}' of the installed package "
                    f"{dist.metadata['Name']!r} failed to load: {err} (fix or uninstall that "
                    f"package, or set {DISABLE_AUTOLOAD_ENV}=1 to load no entry points)"
                )
    return getattr(exc, "plugin_name", "entry point"), f"failed to load: {exc}"
