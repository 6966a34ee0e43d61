"""The broker's own lag history for the group page's chart.

:class:`LagSamples` keeps, per consumer group this broker coordinates, a
ring of the last :data:`KEEP` ``(time ms, total lag)`` samples. The web
layer calls :meth:`LagSamples.sample` on a reactor timer
(``console.lag.sample.interval.ms``); each call reads the same figures the
group page shows (high watermark minus committed offset, over the
partitions hosted here) and costs one pass over the groups' committed
offsets. Groups that are gone lose their ring, and at most
:data:`MAX_GROUPS` groups are kept, so memory stays bounded whatever the
cluster holds. Nothing leaves the process: no external time-series store.

:func:`chart` turns one ring into the coordinates of an inline SVG
polyline (the template draws it; no script, no front-end build).
"""

import collections

from pluglog.console import state

#: Samples kept per group: an hour at the default 10 s interval.
KEEP = 360
#: Groups sampled at most (the first ones by id).
MAX_GROUPS = 2000
WIDTH, HEIGHT = 600, 160
PAD = 4


class LagSamples:
    """Rings of ``(ms, lag)`` per group id; ``now_ms()`` is the broker's clock."""

    def __init__(self, broker, keep=KEEP, max_groups=MAX_GROUPS):
        self.broker = broker
        self.keep = keep
        self.max_groups = max_groups
        self.rings = {}

    def sample(self):
        """Take one sample of every group's total lag."""
        now = self.broker.now_ms()
        lags = state.group_lags(self.broker, self.max_groups)
        for gone in self.rings.keys() - lags.keys():
            del self.rings[gone]
        for group_id, lag in lags.items():
            ring = self.rings.get(group_id)
            if ring is None:
                ring = self.rings[group_id] = collections.deque(maxlen=self.keep)
            ring.append((now, lag))

    def of(self, group_id):
        return list(self.rings.get(group_id, ()))


def chart(samples):
    """The chart of ``samples`` for the template, or None with fewer than two.

    ``points`` is the SVG polyline's ``x,y`` list in a WIDTH x HEIGHT box
    (time left to right, lag bottom to top, 0 at the bottom)."""
    if len(samples) < 2:
        return None
    first, last = samples[0][0], samples[-1][0]
    span = max(last - first, 1)
    top = max(lag for _t, lag in samples) or 1
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    points = " ".join(
        f"{PAD + (t - first) * inner_w / span:.1f},{PAD + inner_h - lag * inner_h / top:.1f}"
        for t, lag in samples
    )
    return {
        "points": points,
        "width": WIDTH,
        "height": HEIGHT,
        "max": top,
        "count": len(samples),
        "first_ms": first,
        "last_ms": last,
        "latest": samples[-1][1],
        "minimum": min(lag for _t, lag in samples),
    }
