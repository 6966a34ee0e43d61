"""Network addresses read from the broker's settings.

The ``--listen``/``--http`` strport descriptions as the option parser reads
them, and the HTTP URL a broker advertises to the others. Pure functions of
the configuration, below every layer that needs them (the option parser,
the coordinator's registration, the web site, the serializers' registry
client, DescribeConfigs).
"""

import re

from twisted.python import usage


def listen_address(description):
    """Return ``(interface or None, port)`` of a tcp strport description."""
    parts = [p.replace("\\:", ":") for p in re.split(r"(?<!\\):", description)]
    interface = None
    port = None
    positional = []
    for part in parts[1:]:
        key, eq, val = part.partition("=")
        if eq and key == "interface":
            interface = val
        elif eq and key == "port":
            port = val
        elif not eq:
            positional.append(part)
    if port is None and positional:
        port = positional[0]
    try:
        return interface, int(port) if port is not None else 0
    except ValueError:
        raise usage.UsageError(f"--listen: bad port in {description!r}") from None


def advertised_url(config):
    """The ``http://host:port`` other brokers reach our ``--http`` listener at,
    or None without one (or with port 0). A wildcard interface is advertised as the broker's
    ``advertised.host.name`` (as Kafka advertises a wildcard listener)."""
    strport = getattr(config, "http", "")
    if not strport:
        return None
    interface, port = listen_address(strport)
    if not port:
        return None  # an ephemeral port is unknown until listening: not advertised
    host = interface if interface not in (None, "", "0.0.0.0", "::") else config.advertised_host
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"
