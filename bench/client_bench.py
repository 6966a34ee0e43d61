"""pluglog's Twisted client next to confluent-kafka, against one pluglog broker.

    python3 bench/client_bench.py                 # 1M records of 200 bytes, 1 run
    python3 bench/client_bench.py --n 200000 --runs 3

One broker (``twistd -n pluglog``, fresh data dir) serves every run. Each run
produces N records of ``--size`` bytes into a fresh one-partition topic and
then consumes them from the beginning, first with confluent-kafka
(librdkafka), then with ``pluglog.client`` (its own reactor), each client in
its own subprocess. Both producers use the same settings: acks=all,
linger.ms=5, batch.size=1000000, no compression, idempotence as given by
``--idempotence`` (default on for both). Printed per run and client:
records/s and MB/s for produce and consume, and the broker's CPU seconds per
million records (from /proc), and the client process's own CPU seconds per
million records (rusage), since client and broker share the machine and on
a loaded machine wall-clock rates favour multi-threaded librdkafka.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the clients (each runs in a subprocess) -----------------------------------


def confluent_produce(bootstrap, topic, n, size, idempotence):
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1000000,
            "enable.idempotence": idempotence,
            "queue.buffering.max.messages": 1000000,
        }
    )
    value = b"x" * size
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.001)
    assert producer.flush(120) == 0
    return time.perf_counter() - start


def confluent_consume(bootstrap, topic, n):
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    got = 0
    start = time.perf_counter()
    while got < n:
        msgs = consumer.consume(10000, 1.0)
        got += sum(1 for m in msgs if m.error() is None)
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def twisted_consume(bootstrap, topic, n):
    from twisted.internet import defer, task

    from pluglog.client import Consumer, TopicPartition

    @defer.inlineCallbacks
    def main(reactor):
        consumer = Consumer(
            reactor,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            max_poll_records=100000,
        )
        yield consumer.start()
        consumer.assign([TopicPartition(topic, 0)])
        got = 0
        start = time.perf_counter()
        while got < n:
            batches = yield consumer.getmany(timeout_ms=1000)
            for records in batches.values():
                got += len(records)
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
        yield consumer.stop()

    task.react(main)


ROLES = {
    "confluent-produce": lambda a: print(
        json.dumps({"seconds": confluent_produce(a.bootstrap, a.topic, a.n, a.size, a.idem)})
    ),
    "confluent-consume": lambda a: print(
        json.dumps({"seconds": confluent_consume(a.bootstrap, a.topic, a.n)})
    ),
    "twisted-consume": lambda a: twisted_consume(a.bootstrap, a.topic, a.n),
}


def _twisted_produce_role(a):
    from twisted.internet import defer, task

    from pluglog.client import Producer

    @defer.inlineCallbacks
    def main(reactor):
        producer = Producer(
            reactor,
            bootstrap_servers=a.bootstrap,
            acks="all",
            linger_ms=5,
            batch_size=1000000,
            enable_idempotence=a.idem,
        )
        yield producer.start()
        value = b"x" * a.size
        start = time.perf_counter()
        send = producer.send
        limit = producer.config["buffer.memory"] - 2 * a.size
        for _ in range(a.n):
            send(a.topic, value)
            if producer.buffered_bytes >= limit:
                yield producer.wait_for_room()
        yield producer.flush()
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
        yield producer.stop()

    task.react(main)


ROLES["twisted-produce"] = _twisted_produce_role


def run_role(role, bootstrap, topic, n, size, idem):
    cmd = [sys.executable, os.path.abspath(__file__), "--role", role, "--bootstrap", bootstrap]
    cmd += ["--topic", topic, "--n", str(n), "--size", str(size)]
    cmd += ["--idempotence", "on" if idem else "off"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{role} failed:\n{out.stderr[-3000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"], cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--idempotence", choices=["on", "off"], default="on")
    parser.add_argument("--work", default="/tmp/pluglog-bench")
    parser.add_argument("--role")
    parser.add_argument("--bootstrap")
    parser.add_argument("--topic")
    args = parser.parse_args()
    args.idem = args.idempotence == "on"
    if args.role:
        ROLES[args.role](args)
        return

    from tests.broker_process import BrokerProcess

    os.makedirs(args.work, exist_ok=True)
    broker = BrokerProcess(os.path.join(args.work, f"client-bench-{os.getpid()}")).start()
    rows = []
    try:
        from tests.integration.clients import create_topic

        for run in range(args.runs):
            for client in ("confluent", "twisted"):
                topic = f"bench-{client}-{run}"
                create_topic(broker.bootstrap, topic, partitions=1)
                row = {"run": run, "client": client}
                for phase in ("produce", "consume"):
                    cpu0 = cpu_seconds(broker.proc.pid)
                    seconds, client_cpu = run_role(
                        f"{client}-{phase}", broker.bootstrap, topic, args.n, args.size, args.idem
                    )
                    cpu = cpu_seconds(broker.proc.pid) - cpu0
                    row[phase] = args.n / seconds
                    row[f"{phase}_mb"] = args.n * args.size / seconds / 1e6
                    row[f"{phase}_broker_cpu"] = cpu * 1e6 / args.n
                    row[f"{phase}_client_cpu"] = client_cpu * 1e6 / args.n
                rows.append(row)
                print(
                    f"run {run} {client:9s} produce {row['produce']:>9,.0f} rec/s "
                    f"({row['produce_mb']:.1f} MB/s, broker {row['produce_broker_cpu']:.1f} "
                    f"client {row['produce_client_cpu']:.1f} CPU-s/M)  "
                    f"consume {row['consume']:>9,.0f} rec/s "
                    f"({row['consume_mb']:.1f} MB/s, broker {row['consume_broker_cpu']:.1f} "
                    f"client {row['consume_client_cpu']:.1f} CPU-s/M)",
                    flush=True,
                )
    finally:
        broker.stop()
    for phase in ("produce", "consume"):
        ours = sorted(r[phase] for r in rows if r["client"] == "twisted")
        theirs = sorted(r[phase] for r in rows if r["client"] == "confluent")
        mo, mt = ours[len(ours) // 2], theirs[len(theirs) // 2]
        print(
            f"median {phase}: twisted {mo:,.0f} rec/s, confluent {mt:,.0f} rec/s, "
            f"ratio {mo / mt:.0%}"
        )
        ours = sorted(r[f"{phase}_client_cpu"] for r in rows if r["client"] == "twisted")
        theirs = sorted(r[f"{phase}_client_cpu"] for r in rows if r["client"] == "confluent")
        mo, mt = ours[len(ours) // 2], theirs[len(theirs) // 2]
        print(
            f"median {phase} client CPU: twisted {mo:.1f} s/M, confluent {mt:.1f} s/M, "
            f"confluent / twisted {mt / mo:.0%}"
        )


if __name__ == "__main__":
    main()
