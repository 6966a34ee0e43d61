"""A follower's own work per Fetch of many partitions (issue 24), in process.

One LeaderFetcher (pluglog/replication/fetcher.py) follows ``--partitions``
partitions of one leader. The leader is a stand-in connection that answers
at once: a session id, and records (10 bytes) for the partitions given news
that round; the follower's partitions are stand-ins whose appends only move
their log end. So what is timed is the follower's side alone, one pass of
the fetcher's loop: picking the partitions to fetch, building the request
(``FetchSessionClient``), applying the answer. Cases: idle (an incremental
fetch with nothing new) and 1 % of the partitions with data each round.
The median over ``--rounds`` rounds is printed, in ms.

Before/after: ``--root before=/work/main --root after=.`` runs one worker
process per checkout (each imports its own pluglog), alternating the order
between ``--runs`` runs.

Usage: ``python3 bench/follower_fetch_bench.py [--partitions 10000] [--rounds 50]
[--runs 3] [--root LABEL=PATH ...]``.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("FOLLOWER_BENCH_ROOT") or os.path.dirname(HERE))


def measure(partitions, rounds):
    from types import SimpleNamespace

    from twisted.internet import defer
    from twisted.internet.task import Clock

    from pluglog.replication.fetcher import LeaderFetcher
    from pluglog.replication.throttle import UNLIMITED, ReplicationThrottle

    class Log:
        log_end_offset = 0
        log_start_offset = 0

    class Part:
        def __init__(self, index):
            self.topic, self.index, self.leader_epoch = "t", index, 0
            self.log, self.isr, self.fetch_sessions = Log(), (0, 1), {}

        def append_replicated(self, records, hw, now):
            self.log.log_end_offset += len(records)

    news = set()

    class Leader:
        def request(self, api, version, body):
            out = [
                {
                    "partition_index": index,
                    "error_code": 0,
                    "high_watermark": 0,
                    "log_start_offset": 0,
                    "records": b"x" * 10,
                }
                for index in sorted(news)
            ]
            return defer.succeed(
                {
                    "error_code": 0,
                    "session_id": 1,
                    "responses": [{"topic": "t", "partitions": out}],
                }
            )

    config = SimpleNamespace(
        replica_fetch_max_bytes=1 << 20, replica_fetch_wait_max_ms=500, replica_fetch_backoff_ms=1
    )
    broker = SimpleNamespace(node_id=1, now_ms=lambda: 0)
    manager = SimpleNamespace(
        broker=broker,
        reactor=Clock(),
        config=config,
        follower_throttle=ReplicationThrottle(UNLIMITED),
    )
    fetcher = LeaderFetcher(manager, 0)
    fetcher.running = True  # driven by hand: one pass of its loop at a time
    for index in range(partitions):
        fetcher.add(Part(index))
    fresh = hasattr(fetcher, "_fetchable")
    for key, entry in fetcher.partitions.items():  # as after truncation
        if fresh:
            fetcher._truncated(key)
        else:
            entry[1] = False
    leader = Leader()

    def one_pass():
        # What LeaderFetcher._run does per fetch, for the checkout measured.
        t0 = time.perf_counter()
        if fresh:
            if fetcher._truncating:
                raise AssertionError("nothing should need truncation")
            fetcher._fetch(leader, fetcher._fetchable)
        else:
            pending = [k for k, e in fetcher.partitions.items() if e[1]]
            assert not pending
            wanted = [k for k, e in fetcher.partitions.items() if not e[1]]
            fetcher._fetch(leader, wanted)
        return time.perf_counter() - t0

    one_pass()  # the full fetch
    one_pass()
    results = {}
    for label, changed in (("idle", ()), ("1 % with data", range(0, partitions, 100))):
        times = []
        for _ in range(rounds):
            news.clear()
            news.update(changed)
            times.append(one_pass())
        results[label] = statistics.median(times) * 1000
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--root", action="append", default=[], help="LABEL=PATH")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(measure(args.partitions, args.rounds)), flush=True)
        return
    roots = [r.split("=", 1) for r in args.root] or [["this", os.path.dirname(HERE)]]
    found = {label: [] for label, _ in roots}
    for run in range(args.runs):
        order = roots if run % 2 == 0 else roots[::-1]
        for label, path in order:
            env = dict(os.environ, FOLLOWER_BENCH_ROOT=os.path.abspath(path))
            command = [sys.executable, os.path.abspath(__file__), "--worker"]
            command += ["--partitions", str(args.partitions), "--rounds", str(args.rounds)]
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")][-1]
            found[label].append(json.loads(line[len("RESULT ") :]))
    print(
        f"follower's work per fetch, {args.partitions} partitions (median ms of {args.runs} runs)"
    )
    for label, results in found.items():
        for case in results[0]:
            value = statistics.median(r[case] for r in results)
            print(f"  {label:>8} {case:<16} {value:8.3f} ms")


if __name__ == "__main__":
    main()
