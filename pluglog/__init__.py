"""pluglog: a Kafka-protocol distributed commit log on Twisted, built from plugins.

This module owns the version string and the pluggy ``hookimpl`` marker that
plugins (built-in and third-party) use to register components.
"""

import pluggy

__version__ = "0.1.0"

PROJECT_NAME = "pluglog"

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

__all__ = ["__version__", "hookimpl", "PROJECT_NAME"]
