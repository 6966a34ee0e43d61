"""How much of the reactor the console may take: a share of each second.

The console renders on the reactor thread, the same thread that answers
Kafka requests, so a flood of page requests would delay producers and
consumers by the pages' rendering time. :class:`RenderBudget` measures the
time spent on console requests in each second (of the reactor's clock)
and, once :data:`SHARE` of it is used, the console answers ``503`` with
``Retry-After: 1`` without rendering anything until the next second. A
browser's single page view never meets the limit; a script that floods the
console gets refusals instead of slowing the Kafka listener
(bench/console_flood.py).
"""

#: Fraction of each second console requests may spend on the reactor.
SHARE = 0.2


class RenderBudget:
    """``share`` of each second of ``seconds()`` for console requests."""

    def __init__(self, seconds, share=SHARE):
        self.seconds = seconds
        self.share = share
        self._window = None
        self._spent = 0.0
        #: requests refused since start (for the log line and tests)
        self.refused = 0

    def _roll(self):
        window = int(self.seconds())
        if window != self._window:
            self._window = window
            self._spent = 0.0

    def allow(self):
        """Whether a console request may run now; counts a refusal if not."""
        self._roll()
        if self._spent < self.share:
            return True
        self.refused += 1
        return False

    def spend(self, elapsed):
        """Count ``elapsed`` seconds of reactor time spent on a console request."""
        self._roll()
        self._spent += elapsed
