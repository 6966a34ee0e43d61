"""The broker's work per sessionless Fetch of every partition, in process, by stage.

    python3 bench/sessionless_fetch.py [--partitions 10000] [--versions 11,16]
        [--storage memory,segments] [--runs 3] [--root before=/work/main --root after=.]

librdkafka opens no fetch sessions, so each of its Fetch requests (v16
against pluglog) lists every assigned partition, read_committed (its
default isolation level). Per case a fresh broker (in process, a Clock, no
sockets) gets a topic of ``--partitions`` partitions, each with one batch
of 10 records of 200 B, and answers the same request 15 times from offset
0: the request's decode, the handler and the response's encode are timed
apart. "first" is the first fetch (a read_committed one learns each
partition's last stable offset then); the stage figures are medians of the
other 14. With ``--root LABEL=PATH`` each checkout is measured in its own
worker process (its pluglog imported), alternating order between runs;
the medians over ``--runs`` are printed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("FETCH_BENCH_ROOT") or os.path.dirname(HERE))

ROUNDS = 15


def one_case(partitions, version, storage, committed):
    import shutil
    import tempfile
    import uuid

    from twisted.internet.task import Clock

    from pluglog import protocol as codec
    from pluglog.broker.core import Broker
    from pluglog.config import BrokerConfig
    from pluglog.plugins import make_plugin_manager
    from pluglog.protocol.records import Record, build_batch
    from pluglog.registry import Registry
    from pluglog.server.handlers.common import RequestContext
    from pluglog.server.handlers.fetch import handle_fetch

    work = tempfile.mkdtemp(prefix="pluglog-sessionless-")
    try:
        clock = Clock()
        clock.advance(1_700_000_000)
        config = BrokerConfig(data_dir=work, storage=storage, fsync="never")
        broker = Broker(config, Registry(make_plugin_manager(autoload=False)), clock)
        broker.start()
        broker.create_topic("many", partitions)
        batch = build_batch([Record(value=os.urandom(200)) for _ in range(10)], base_timestamp=1)
        for p in range(partitions):
            broker.partitions[("many", p)].append(batch, broker.now_ms())
        wants = [
            {
                "partition": p,
                "current_leader_epoch": 0,
                "fetch_offset": 0,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": 1 << 20,
            }
            for p in range(partitions)
        ]
        topic = {"topic": "many", "topic_id": uuid.UUID(broker.topic_ids.id_of("many"))}
        request = {
            "replica_id": -1,
            "max_wait_ms": 500,
            "min_bytes": 1,
            "max_bytes": 52428800,
            "isolation_level": 1 if committed else 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [dict(topic, partitions=wants)],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        frame = memoryview(codec.encode_request(codec.FETCH, version, 1, "bench", request))[4:]
        stages = []
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            header = codec.parse_request_header(frame)
            body = codec.decode_request(header, frame)
            t1 = time.perf_counter()
            response = handle_fetch(RequestContext(broker, header, "bench"), body)
            t2 = time.perf_counter()
            parts = codec.encode_response(codec.FETCH, version, 1, response)
            t3 = time.perf_counter()
            assert codec.frame_size(parts) > partitions * 200, "records were not all answered"
            stages.append((t1 - t0, t2 - t1, t3 - t2))
        out = {"first": sum(stages[0])}
        for i, name in enumerate(("decode", "handler", "encode")):
            out[name] = statistics.median(s[i] for s in stages[1:])
        out["total"] = out["decode"] + out["handler"] + out["encode"]
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cases(args):
    for storage in args.storage.split(","):
        for version in (int(v) for v in args.versions.split(",")):
            for committed in (True, False):
                yield storage, version, committed


def worker(args):
    out = {}
    for storage, version, committed in cases(args):
        key = f"{storage} v{version} {'read_committed' if committed else 'read_uncommitted'}"
        out[key] = one_case(args.partitions, version, storage, committed)
    print("RESULT " + json.dumps(out), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10000)
    parser.add_argument("--versions", default="11,16")
    parser.add_argument("--storage", default="memory,segments")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--root", action="append", default=[], metavar="LABEL=PATH")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    roots = dict(r.split("=", 1) for r in args.root) or {"this": os.path.dirname(HERE)}
    results = {label: [] for label in roots}
    for run in range(args.runs):
        for label in roots if run % 2 == 0 else reversed(list(roots)):
            command = [sys.executable, os.path.abspath(__file__), "--worker"]
            command += ["--partitions", str(args.partitions), "--versions", args.versions]
            command += ["--storage", args.storage]
            env = dict(os.environ, FETCH_BENCH_ROOT=os.path.abspath(roots[label]))
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
            if not lines:
                raise SystemExit(f"worker for {label} failed:\n{done.stderr[-3000:]}")
            results[label].append(json.loads(lines[0][7:]))
            # Each run as it comes (a long run cut short still says something).
            print(f"run {run + 1} {label}: {lines[0][7:]}", flush=True)
    print(f"{args.partitions} partitions, ms per fetch, medians of {args.runs} run(s)")
    print(f"{'case':40s} {'checkout':9s} first  decode handler encode  total")
    for case in results[next(iter(roots))][0]:
        for label in roots:
            med = {
                k: 1000 * statistics.median(r[case][k] for r in results[label])
                for k in ("first", "decode", "handler", "encode", "total")
            }
            print(
                f"{case:40s} {label:9s} {med['first']:6.1f} {med['decode']:6.1f} "
                f"{med['handler']:7.1f} {med['encode']:6.1f} {med['total']:6.1f}"
            )


if __name__ == "__main__":
    main()
