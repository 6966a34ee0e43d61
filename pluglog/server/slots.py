"""Per-request pieces of a connection: response slots, the authorization gate, bad input.

:class:`pluglog.server.protocol.KafkaServerProtocol` keeps one :class:`_Slot`
per request in arrival order (answers leave strictly in that order);
:func:`_checked` runs a handler through the per-API authorization once the
connection's SASL session is authenticated (ApiVersions and the SASL APIs
come before that); :func:`bad_input_throttle` is the one "closing
connection" warning throttle per reactor, so a flood of bad frames costs one
log line a period.
"""

import weakref

from pluglog.logsafe import Throttle
from pluglog.security.sasl import _Authorizing
from pluglog.server.api_checks import checked

# One "closing connection" warning throttle per reactor (i.e. per broker).
_THROTTLES = weakref.WeakKeyDictionary()


def bad_input_throttle(reactor):
    throttle = _THROTTLES.get(reactor)
    if throttle is None:
        throttle = _THROTTLES[reactor] = Throttle(reactor, "closed-connection warnings")
    return throttle


class _Slot:
    __slots__ = ("ready", "parts", "stats", "arrived")

    def __init__(self, stats=None, arrived=0):
        self.ready = False
        self.parts = None
        # The request's ApiStats and arrival time: observed once it is written.
        self.stats = stats
        self.arrived = arrived


def _authorizing(session):
    return _Authorizing(session)


def _checked(ctx, api_key, request, handler):
    if ctx.session is None or not ctx.session.authenticated:
        return handler(ctx, request)  # ApiVersions / SASL during authentication
    return checked(ctx, api_key, request, handler)
