"""One kafka-python consumer of a 10,000-partition topic, with and without fetch sessions.

Per run and mode a fresh broker (tests/broker_process.py) gets a topic of
``--partitions`` partitions and ``--records`` records of 200 B spread evenly
(loaded with multi-partition Produce requests from pluglog's blocking
client, so loading is cheap). Then one kafka-python consumer, assigned
every partition:

* ``catch-up``: reads everything from offset 0;
* ``live``: while caught up, a producer thread writes ``--live`` more
  records, one batch of 10 to a random partition every 2 ms, and the
  consumer reads them as they come;
* ``idle``: the consumer polls for 5 s with nothing new.

First, in process (no sockets, no client), the broker's work per Fetch of
``--partitions`` partitions: decode, handler, encode, for a sessionless
fetch of every partition and for incremental fetches (idle; 1 % of the
partitions with a new batch). ``--in-process`` stops there.

Modes: ``sessionless`` (``max.incremental.fetch.session.cache.slots=0``:
every fetch lists and answers every partition, pluglog's behaviour before
KIP-227) and ``sessions`` (the default). Modes alternate within each run.
Broker CPU comes from /proc/<pid>/stat; per message for catch-up and live,
per second and per Fetch request for idle (the Fetch count is the broker's
``pluglog_requests_total{api="Fetch"}`` from its ``/metrics``). The median
of ``--runs`` runs is printed.

In process, the cases also include a long poll (parked 500 ms, answered
empty) and a follower's idle incremental fetch (replica 1 of every
partition, caught up).

Before/after: ``--root before=/work/main --root after=.`` measures each
checkout in its own worker process (in process: its pluglog imported; live:
its broker started), alternating the order between runs.

Usage: ``python3 bench/fetch_sessions_bench.py [--partitions 10000] [--records 200000]
[--live 20000] [--runs 3] [--root LABEL=PATH ...] [--modes sessions] [--in-process]``.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
# A worker imports pluglog (and starts brokers) from the checkout it measures.
sys.path.insert(0, os.environ.get("FETCH_BENCH_ROOT") or os.path.dirname(HERE))

from pluglog import protocol as codec  # noqa: E402
from pluglog.client.blocking import BlockingClient  # noqa: E402
from pluglog.protocol.records import Record, build_batch  # noqa: E402
from tests.broker_process import BrokerProcess, free_port  # noqa: E402

TOPIC = "many"
MODES = {"sessionless": {"max.incremental.fetch.session.cache.slots": "0"}, "sessions": {}}


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fetches(url):
    """Fetch requests the broker has answered (its /metrics)."""
    with urllib.request.urlopen(url, timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith('pluglog_requests_total{api="Fetch"}'):
                return float(line.split()[-1])
    return 0.0


def produce(client, batches):
    """``batches``: [(partition, batch bytes)], sent 500 partitions per request."""
    for start in range(0, len(batches), 500):
        body = {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 30000,
            "topic_data": [
                {
                    "name": TOPIC,
                    "partition_data": [
                        {"index": p, "records": b} for p, b in batches[start : start + 500]
                    ],
                }
            ],
        }
        response = client.request(codec.PRODUCE, 8, body)
        for part in response["responses"][0]["partition_responses"]:
            if part["error_code"]:
                raise RuntimeError(f"produce failed with error {part['error_code']}")


def load(broker, partitions, records):
    from confluent_kafka.admin import AdminClient, NewTopic

    # Creating 10,000 partitions can outlast librdkafka's default timeouts
    # on a busy machine.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 300000})
    futures = admin.create_topics([NewTopic(TOPIC, partitions, 1)], request_timeout=300)
    futures[TOPIC].result(300)
    per = max(1, records // partitions)
    batch = build_batch([Record(value=os.urandom(200)) for _ in range(per)], base_timestamp=1)
    with BlockingClient.from_bootstrap(broker.bootstrap, timeout=120) as client:
        produce(client, [(p, batch) for p in range(partitions)])
    return per * partitions


def live_producer(broker, partitions, count, stop):
    batch = build_batch([Record(value=os.urandom(200)) for _ in range(10)], base_timestamp=1)
    rng = random.Random(1)
    with BlockingClient.from_bootstrap(broker.bootstrap) as client:
        for _ in range(count // 10):
            if stop.is_set():
                return
            produce(client, [(rng.randrange(partitions), batch)])
            time.sleep(0.002)


def consume(consumer, expected, timeout=600):
    got = 0
    deadline = time.monotonic() + timeout
    while got < expected and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500, max_records=100000).values():
            got += len(records)
    return got


def run_mode(mode, args, work):
    import kafka

    data = os.path.join(work, f"sessions-{mode}")
    shutil.rmtree(data, ignore_errors=True)
    http = free_port()
    broker = BrokerProcess(
        data, settings=MODES[mode], extra_args=["--http", f"tcp:{http}:interface=127.0.0.1"]
    ).start(timeout=120)
    url = f"http://127.0.0.1:{http}/metrics"
    out = {}
    try:
        loaded = load(broker, args.partitions, args.records)
        pid = broker.proc.pid
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=broker.bootstrap, enable_auto_commit=False
        )
        tps = [kafka.TopicPartition(TOPIC, p) for p in range(args.partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        got = consume(consumer, loaded)
        out["catch-up"] = (got, time.perf_counter() - t0, cpu_seconds(pid) - c0)
        stop = threading.Event()
        producer = threading.Thread(
            target=live_producer, args=(broker, args.partitions, args.live, stop)
        )
        c0, t0 = cpu_seconds(pid), time.perf_counter()
        producer.start()
        got = consume(consumer, args.live, timeout=300)
        stop.set()
        producer.join()
        out["live"] = (got, time.perf_counter() - t0, cpu_seconds(pid) - c0)
        f0, c0, t0 = fetches(url), cpu_seconds(pid), time.perf_counter()
        while time.perf_counter() - t0 < 5:
            consumer.poll(timeout_ms=500)
        cpu, seconds = cpu_seconds(pid) - c0, time.perf_counter() - t0
        # the scrape itself is not counted in the CPU: read after it
        out["idle"] = (fetches(url) - f0, seconds, cpu)
        consumer.close()
    finally:
        broker.stop(timeout=120)
        shutil.rmtree(data, ignore_errors=True)
    return out


def in_process(partitions, rounds=20):
    """The broker's work per Fetch, in process (no sockets, no client):
    decoding the request, the handler, encoding the answer. A sessionless
    fetch of every partition against an incremental one listing nothing
    (idle) and one listing 1 % of the partitions, each with one new batch."""
    import tempfile
    from types import SimpleNamespace

    from twisted.internet.task import Clock

    from pluglog.broker.core import Broker
    from pluglog.config import BrokerConfig
    from pluglog.plugins import make_plugin_manager
    from pluglog.registry import Registry
    from pluglog.server.handlers.common import RequestContext
    from pluglog.server.handlers.fetch import handle_fetch

    work = tempfile.mkdtemp(prefix="pluglog-fsess-")
    clock = Clock()
    clock.advance(1_700_000_000)
    config = BrokerConfig(data_dir=work, storage="memory", advertised_port=9092)
    broker = Broker(config, Registry(make_plugin_manager(autoload=False)), clock)
    broker.start()
    broker.create_topic(TOPIC, partitions)
    ctx = RequestContext(broker, SimpleNamespace(api_version=11), "bench")
    batch = build_batch([Record(value=os.urandom(200)) for _ in range(10)], base_timestamp=1)
    offsets = dict.fromkeys(range(partitions), 0)

    def body(session_id, epoch, listed):
        wants = [
            {
                "partition": p,
                "current_leader_epoch": -1,
                "fetch_offset": offsets[p],
                "log_start_offset": -1,
                "partition_max_bytes": 1 << 20,
            }
            for p in listed
        ]
        return {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 26,
            "isolation_level": 0,
            "session_id": session_id,
            "session_epoch": epoch,
            "topics": [{"topic": TOPIC, "partitions": wants}] if wants else [],
            "forgotten_topics_data": [],
            "rack_id": "",
        }

    def one(request):
        frame = memoryview(codec.encode_request(codec.FETCH, 11, 1, "bench", request))[4:]
        t0 = time.perf_counter()
        header = codec.parse_request_header(frame)
        response = handle_fetch(ctx, codec.decode_request(header, frame))
        b"".join(bytes(p) for p in codec.encode_response(codec.FETCH, 11, 1, response))
        return time.perf_counter() - t0

    changed = list(range(0, partitions, 100))

    def append():
        for p in changed:
            broker.partitions[(TOPIC, p)].append(batch, broker.now_ms())

    results = {}
    times = []
    for _ in range(rounds):
        append()
        times.append(one(body(0, -1, range(partitions))))
        for p in changed:
            offsets[p] += 10
    results["sessionless, every partition"] = statistics.median(times)
    session_id = handle_fetch(ctx, body(0, 0, range(partitions)))["session_id"]
    epoch = 1
    for label, listed, new_data in (
        ("incremental, idle", (), False),
        ("incremental, 1 % with data", changed, True),
    ):
        times = []
        for _ in range(rounds):
            if new_data:
                append()
            times.append(one(body(session_id, epoch, listed)))
            epoch += 1
            if new_data:
                for p in changed:
                    offsets[p] += 10
        results[label] = statistics.median(times)
    # A long poll: parked for 500 ms (nothing arrives), then answered empty.
    handle_fetch(ctx, body(session_id, epoch, changed))  # the client's offsets catch up
    epoch += 1
    times = []
    for _ in range(rounds):
        request = dict(body(session_id, epoch, ()), max_wait_ms=500)
        epoch += 1
        frame = memoryview(codec.encode_request(codec.FETCH, 11, 1, "bench", request))[4:]
        t0 = time.perf_counter()
        header = codec.parse_request_header(frame)
        d = handle_fetch(ctx, codec.decode_request(header, frame))
        clock.advance(0.5)
        got = [d]
        if not isinstance(d, dict):
            d.addCallback(got.append)
        assert got[-1]["responses"] == [], "the long poll should have had nothing to answer"
        b"".join(bytes(p) for p in codec.encode_response(codec.FETCH, 11, 1, got[-1]))
        times.append(time.perf_counter() - t0)
    results["incremental, parked 500 ms, answered empty"] = statistics.median(times)
    # A follower (replica 1) of every partition, caught up and idle.
    now = broker.now_ms()
    for p in range(partitions):
        part = broker.partitions[(TOPIC, p)]
        part.become_leader(part.leader_epoch + 1, (0, 1), (0, 1), now)
    ends = {p: broker.partitions[(TOPIC, p)].log.log_end_offset for p in range(partitions)}
    full = dict(body(0, 0, ()), replica_id=1)
    full["topics"] = body(0, 0, range(partitions))["topics"]
    for want in full["topics"][0]["partitions"]:
        want["fetch_offset"] = ends[want["partition"]]
    follower_id = handle_fetch(ctx, full)["session_id"]
    times = []
    for follower_epoch in range(1, rounds + 1):
        times.append(one(dict(body(follower_id, follower_epoch, ()), replica_id=1)))
    results["follower incremental, idle"] = statistics.median(times)
    shutil.rmtree(work, ignore_errors=True)
    return results


def worker(args):
    """One measurement in this process, printed as JSON (the parent runs
    one worker per checkout, so each imports its own pluglog)."""
    if args.worker == "in-process":
        out = in_process(args.partitions)
    else:
        out = run_mode(args.mode, args, args.work)
    print("RESULT " + json.dumps(out), flush=True)


def spawn(root, args, kind, mode=None):
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        kind,
        "--partitions",
        str(args.partitions),
        "--records",
        str(args.records),
        "--live",
        str(args.live),
        "--work",
        args.work,
    ]
    if mode:
        command += ["--mode", mode]
    env = dict(os.environ, FETCH_BENCH_ROOT=root)
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"worker {kind} {mode} in {root} failed:\n{done.stderr[-3000:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=10000)
    parser.add_argument("--records", type=int, default=200000)
    parser.add_argument("--live", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", default="/tmp/pluglog-bench")
    parser.add_argument("--in-process", action="store_true", help="only the in-process figures")
    parser.add_argument("--skip-in-process", action="store_true", help="only the live figures")
    parser.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="a checkout to measure (repeat to compare, e.g. before=/work/main); "
        "default: this one, as 'this'",
    )
    parser.add_argument(
        "--modes", default=",".join(MODES), help="comma-separated, of: " + ", ".join(MODES)
    )
    parser.add_argument("--worker", choices=("in-process", "live"), help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=tuple(MODES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    roots = dict(r.split("=", 1) for r in args.root) or {"this": os.path.dirname(HERE)}
    modes = [m for m in args.modes.split(",") if m]
    os.makedirs(args.work, exist_ok=True)
    # In process: checkouts alternate within each run, median over runs.
    timings = {label: [] for label in roots}
    for run in range(0 if args.skip_in_process else args.runs):
        for label in roots if run % 2 == 0 else reversed(list(roots)):
            timings[label].append(spawn(roots[label], args, "in-process"))
    for label in roots if timings[next(iter(roots))] else ():
        for case in timings[label][0]:
            ms = statistics.median(r[case] for r in timings[label]) * 1000
            print(
                f"in process, {args.partitions} partitions, {label:8s} {case:44s} "
                f"{ms:7.2f} ms per fetch (median of {len(timings[label])})",
                flush=True,
            )
    if args.in_process:
        return
    cases = [(label, mode) for label in roots for mode in modes]
    results = {case: [] for case in cases}
    for run in range(args.runs):
        for case in cases if run % 2 == 0 else reversed(cases):
            results[case].append(spawn(roots[case[0]], args, "live", case[1]))
            print(f"run {run} {case}: {results[case][-1]}", flush=True)
    for phase in ("catch-up", "live", "idle"):
        for case in cases:
            name = f"{case[0]}/{case[1]}"
            rows = [r[phase] for r in results[case]]
            if phase == "idle":
                cpu = statistics.median(c / s for _n, s, c in rows)
                rate = statistics.median(n / s for n, s, _c in rows)
                per = statistics.median(c / n * 1000 for n, _s, c in rows if n)
                print(
                    f"{phase:8s} {name:20s} {rate:5.1f} fetches/s, broker CPU "
                    f"{cpu * 1000:6.1f} ms/s, {per:6.2f} ms per fetch"
                )
                continue
            rate = statistics.median(n / s for n, s, _c in rows)
            per = statistics.median(c / n * 1e6 for n, _s, c in rows if n)
            got = min(n for n, _s, _c in rows)
            print(
                f"{phase:8s} {name:20s} {got} msgs, {rate:9.0f} msgs/s, "
                f"broker CPU {per:6.2f} us/msg (median of {len(rows)})"
            )


if __name__ == "__main__":
    main()
