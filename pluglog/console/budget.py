"""How much of the reactor the console may take: a fifth of it, on average.

The console renders on the reactor thread, the same thread that answers
Kafka requests, so a flood of page requests would delay producers and
consumers by the pages' rendering time. :class:`RenderBudget` is a token
bucket of reactor time: it holds up to :data:`BURST` seconds, refills at
:data:`SHARE` seconds per second (of the reactor's clock), and each console
request spends the time it took. While it is empty the console answers
``503`` with ``Retry-After: 1`` without rendering anything. An operator's
page views (and a first page that compiles its templates) never meet the
limit; a script that floods the console gets refusals instead of slowing
the Kafka listener for more than a fifth of its time
(bench/console_flood.py).
"""

#: Seconds of reactor time per second console requests may take on average.
SHARE = 0.2
#: Seconds of reactor time the console may take at once after a quiet spell.
BURST = 1.0


class RenderBudget:
    """A bucket of reactor time; ``seconds()`` is the reactor's clock."""

    def __init__(self, seconds, share=SHARE, burst=BURST):
        self.seconds = seconds
        self.share = share
        self.burst = burst
        self._tokens = burst
        self._at = seconds()
        #: requests refused since start (for tests)
        self.refused = 0

    def _refill(self):
        now = self.seconds()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.share)
        self._at = now

    def allow(self):
        """Whether a console request may run now; counts a refusal if not."""
        self._refill()
        if self._tokens > 0:
            return True
        self.refused += 1
        return False

    def spend(self, elapsed):
        """Take ``elapsed`` seconds of reactor time spent on a console request."""
        self._refill()
        self._tokens -= elapsed
