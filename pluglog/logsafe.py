"""Log hygiene for client-supplied text: escaping and rate limiting.

Client ids, topic names, group and member ids reach log lines; a control
character in one could forge a line (``\\n``), rewrite a terminal (``ESC``)
or hide text (``\\r``). :func:`escape` turns C0/C1 control characters, DEL
and the Unicode line/paragraph separators into ``\\xNN`` / ``\\uNNNN``
escapes (and doubles backslashes so an escape cannot be faked); printable
text, the common case, is returned as is. :class:`SafeLogger` is a Twisted
``Logger`` that escapes every string field of an event, so modules that log
client text use it instead of ``Logger`` and no call site can forget.

:class:`Throttle` limits a flood of similar warnings (one per bad
connection): ``burst`` lines per ``window`` seconds are written, the rest
are counted and summarised once the window ends as "N similar ... suppressed".
"""

from twisted.logger import Logger

_log = Logger()  # the summary line has no client text

_ESCAPES = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))}
_ESCAPES.update({0x2028: "\\u2028", 0x2029: "\\u2029", ord("\\"): "\\\\"})


def escape(value):
    """``value`` as a string safe to put in one log line."""
    if not isinstance(value, str):
        value = str(value)
    if value.isprintable() and "\\" not in value:
        return value
    return value.translate(_ESCAPES)


class SafeLogger(Logger):
    """A ``Logger`` whose events' string fields are :func:`escape` d.

    Fields named ``log_*`` (Twisted's own: format, failure, namespace...)
    are left alone, so tracebacks keep their lines.
    """

    def emit(self, level, format=None, **kwargs):
        for key, value in kwargs.items():
            if isinstance(value, str) and not key.startswith("log_"):
                kwargs[key] = escape(value)
        super().emit(level, format, **kwargs)


class Throttle:
    """At most ``burst`` emits per ``window`` seconds, the rest counted.

    ``clock`` provides ``seconds()`` and ``callLater`` (the reactor, or a
    ``task.Clock`` in tests). ``what`` names the suppressed lines.
    """

    def __init__(self, clock, what, burst=20, window=10.0):
        self.clock = clock
        self.what = what
        self.burst = burst
        self.window = window
        self._window_end = None
        self._emitted = 0
        self.suppressed = 0
        self.total_suppressed = 0
        self._flush_call = None

    def __call__(self, emit, *args, **kwargs):
        """Call ``emit(*args, **kwargs)`` unless the window's burst is spent."""
        now = self.clock.seconds()
        if self._window_end is None or now >= self._window_end:
            self._window_end = now + self.window
            self._emitted = 0
        if self._emitted < self.burst:
            self._emitted += 1
            emit(*args, **kwargs)
            return True
        self.suppressed += 1
        self.total_suppressed += 1
        if self._flush_call is None:
            self._flush_call = self.clock.callLater(self._window_end - now, self._flush)
        return False

    def _flush(self):
        self._flush_call = None
        count, self.suppressed = self.suppressed, 0
        if count:
            _log.warn(
                "{count} similar {what} suppressed in the last {window:.0f} s",
                count=count,
                what=self.what,
                window=self.window,
            )

    def cancel(self):
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        self._flush_call = None
