"""Long fuzz runs against a broker process; prints the figures for bench/RESULTS.md.

Usage::

    python3 bench/fuzz.py [--inputs 1000000] [--seed 0] [--minutes 0] [--work DIR]

Starts ``twistd -n pluglog`` (this checkout) behind a recording proxy,
captures a seed corpus from confluent-kafka and kafka-python, then runs
rounds of the suite's campaign (tests/fuzz: Hypothesis requests for every
advertised API version, mutated captures, random frames, raw streams) until
``--inputs`` inputs were sent or ``--minutes`` passed, with a verification
producer acknowledging records between rounds. It keeps going after a hang
(counted) and stops at a crash. At the end it reads the verification topic
back, restarts the broker on the same data and prints: inputs by kind,
answered/closed, crashes, hangs, max RSS, max fds, acked, lost, and whether
the restart worked.
"""

import argparse
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.broker_process import BrokerProcess, free_port  # noqa: E402
from tests.fuzz.capture import RecordingProxy, capture_corpus  # noqa: E402
from tests.fuzz.harness import Target, Verifier  # noqa: E402
from tests.fuzz.runner import run_campaign  # noqa: E402
from tests.fuzz.strategies import PROTECTED_TOPIC, advertised  # noqa: E402
from tests.integration.clients import create_topic  # noqa: E402

# One round: per_pair structured inputs per advertised pair plus these.
MUTATED, RANDOM, RAW, PER_PAIR = 3000, 1500, 100, 5


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--minutes", type=float, default=0, help="stop after this long (0: never)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default="/tmp/pluglog-bench/fuzz")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    proxy_port = free_port()
    proc = BrokerProcess(
        os.path.join(args.work, "data"),
        extra_args=["--advertised-listener", f"127.0.0.1:{proxy_port}"],
    ).start()
    proxy = RecordingProxy(proxy_port, ("127.0.0.1", proc.port))
    per_round = PER_PAIR * len(advertised()) + MUTATED + RANDOM + RAW
    rounds = max(1, -(-args.inputs // per_round))
    try:
        corpus = capture_corpus(proxy)
        print(f"captured {len(corpus)} real client requests; {rounds} rounds of {per_round}")
        create_topic(f"127.0.0.1:{proxy_port}", PROTECTED_TOPIC, partitions=1)
        target = Target("127.0.0.1", proc.port, proc.proc.pid)
        verifier = Verifier(f"127.0.0.1:{proxy_port}")

        def progress(index, stats):
            target.sample()
            print(
                f"round {index + 1}/{rounds}: inputs {target.inputs}, hangs {stats.hangs}, "
                f"RSS {target.max_rss_kb // 1024} MB, fds {target.max_fds}, "
                f"acked {len(verifier.acked)}",
                flush=True,
            )

        stats = run_campaign(
            target,
            verifier,
            corpus,
            rounds,
            per_pair=PER_PAIR,
            mutated=MUTATED,
            random_frames=RANDOM,
            raw=RAW,
            seed=args.seed,
            progress=progress,
            stop_after_s=args.minutes * 60 or None,
        )
    finally:
        proxy.close()
        alive = proc.alive()
        proc.stop()
    log = proc.log()
    restarted = True
    try:
        proc.start()
    except RuntimeError:
        restarted = False
    finally:
        proc.stop()
    print(stats.line())
    print(f"broker alive at the end: {alive}; restart on the same data: {restarted}")
    print(f"log: {len(log)} bytes, Tracebacks: {log.count('Traceback')}")
    for failure in stats.failures[:10]:
        print("failure:", failure)
    return 0 if alive and restarted and not stats.lost and not stats.crashes else 1


if __name__ == "__main__":
    t0 = time.monotonic()
    code = main()
    print(f"wall time {time.monotonic() - t0:.0f} s")
    sys.exit(code)
