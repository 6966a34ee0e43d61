"""A progress line with a rate for long produce/consume runs, on a TTY only.

``Progress(verb)`` rewrites one stderr line (``\\r``) at most every 0.2 s:
records so far, records/s and MB/s since the start. When stderr is not a
terminal (a pipe, a file, a test) it writes nothing, so scripted output stays
clean; :meth:`Progress.done` ends the line (and draws it for a run that
moved records faster than one interval).
"""

import sys
import time


class Progress:
    def __init__(self, verb, stream=None, clock=time.monotonic, interval=0.2):
        self.verb = verb
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self.clock = clock
        self.interval = interval
        self.started = clock()
        self.next_draw = self.started + interval
        self.records = 0
        self.bytes = 0
        self.drawn = False

    def add(self, records, nbytes=0):
        self.records += records
        self.bytes += nbytes
        if self.enabled:
            now = self.clock()
            if now >= self.next_draw:
                self.next_draw = now + self.interval
                self._draw(now)

    def line(self, now=None):
        elapsed = max((now if now is not None else self.clock()) - self.started, 1e-9)
        return (
            f"{self.verb} {self.records:,} records  {self.records / elapsed:,.0f} rec/s  "
            f"{self.bytes / elapsed / 1e6:.1f} MB/s"
        )

    def _draw(self, now):
        self.stream.write("\r\x1b[K" + self.line(now))
        self.stream.flush()
        self.drawn = True

    def done(self):
        # The final line also for a run shorter than one interval: on a
        # terminal the rate of what was moved is always worth a line.
        if self.enabled and (self.drawn or self.records):
            self._draw(self.clock())
            self.stream.write("\n")
            self.stream.flush()
