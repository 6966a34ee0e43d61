"""One fuzz campaign against a broker process: the part the suite and bench/fuzz.py share.

A campaign is a sequence of rounds; each round sends a share of each input
kind and then has the :class:`~tests.fuzz.harness.Verifier` produce a few
acknowledged records:

* ``structured``: Hypothesis-generated requests for every advertised
  (api key, version) pair, at least ``per_pair`` each per round;
* ``mutated``: :func:`~tests.fuzz.harness.mutations` of the captured corpus;
* ``random``: random bodies behind valid api keys and versions;
* ``raw``: unframed byte streams on throwaway connections.

:class:`Stats` holds the figures bench/RESULTS.md reports.
"""

import time
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, given, settings

from tests.fuzz import harness
from tests.fuzz.strategies import advertised, frames


@dataclass
class Stats:
    inputs: int = 0
    structured: int = 0
    mutated: int = 0
    random: int = 0
    raw: int = 0
    answered: int = 0
    closed: int = 0
    parked: int = 0
    crashes: int = 0
    hangs: int = 0
    acked: int = 0
    lost: int = 0
    max_rss_mb: int = 0
    max_fds: int = 0
    seconds: float = 0.0
    failures: list = field(default_factory=list)

    def line(self):
        return (
            f"inputs {self.inputs} (structured {self.structured}, mutated {self.mutated}, "
            f"random {self.random}, raw {self.raw}); answered {self.answered}, "
            f"closed {self.closed}, parked {self.parked}; "
            f"crashes {self.crashes}, hangs {self.hangs}; "
            f"acked {self.acked}, lost {self.lost}; max RSS {self.max_rss_mb} MB, "
            f"max fds {self.max_fds}; {self.seconds:.0f} s"
        )


def _structured(target, pairs, examples, stats):
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(frames(pairs))
    def send(drawn):
        api_key, version, frame = drawn
        target.send(frame, f"api {api_key} v{version}")
        stats.structured += 1

    send()


def run_campaign(
    target,
    verifier,
    corpus,
    rounds,
    per_pair=1,
    mutated=200,
    random_frames=100,
    raw=20,
    seed=0,
    progress=None,
    stop_after_s=None,
):
    """Run ``rounds`` rounds; return :class:`Stats`. Raises harness.BrokenPromiseError on
    a hang or a crash unless ``progress`` is given (bench: count and go on)."""
    stats = Stats()
    rng = harness.seeded(seed)
    started = time.monotonic()
    pairs = advertised()
    for round_index in range(rounds):
        try:
            for pair in pairs:
                _structured(target, [pair], per_pair, stats)
            for _ in range(mutated if corpus else 0):
                frame = harness.mutations(rng.choice(corpus), rng)
                target.send(frame, "mutated capture")
                stats.mutated += 1
            for _ in range(random_frames):
                target.send(harness.random_frame(rng), "random frame")
                stats.random += 1
            for _ in range(raw):
                target.send_raw(harness.raw_stream(rng))
                stats.raw += 1
            target.check_alive()
        except harness.BrokenPromiseError as exc:
            if progress is None:
                raise
            stats.failures.append(str(exc))
            if "is gone" in str(exc):
                stats.crashes += 1
                break
            stats.hangs += 1
        verifier.produce()
        stats.inputs = target.inputs
        if progress is not None:
            progress(round_index, stats)
        if stop_after_s is not None and time.monotonic() - started > stop_after_s:
            break
    target.close()
    stats.inputs = target.inputs
    stats.answered = target.answered
    stats.closed = target.closed
    stats.parked = target.parked
    stats.lost = verifier.lost() if not stats.crashes else len(verifier.acked)
    stats.acked = len(verifier.acked)
    target.sample()
    stats.max_rss_mb = target.max_rss_kb // 1024
    stats.max_fds = target.max_fds
    stats.seconds = time.monotonic() - started
    return stats
