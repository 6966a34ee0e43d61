"""Run ``twistd`` (the arguments given) with a cProfile switched by signals: bench-only.

SIGUSR1 starts profiling; SIGUSR2 stops it and writes the stats to the path
named in the file that ``PLUGLOG_BENCH_PROFILE`` points to (so one
environment serves many brokers). Used by bench/replication_partitions_bench.py
``--profile``; read the output with ``python3 -m pstats FILE``.
"""

import cProfile
import os
import signal
import sys

from twisted.scripts.twistd import run

_profile = None


def _start(_signum, _frame):
    global _profile
    _profile = cProfile.Profile()
    _profile.enable()


def _stop(_signum, _frame):
    global _profile
    if _profile is None:
        return
    _profile.disable()
    with open(os.environ["PLUGLOG_BENCH_PROFILE"]) as handle:
        target = handle.read().strip()
    _profile.dump_stats(target + ".tmp")
    os.rename(target + ".tmp", target)
    _profile = None


signal.signal(signal.SIGUSR1, _start)
signal.signal(signal.SIGUSR2, _stop)
sys.argv = ["twistd", *sys.argv[1:]]
run()
