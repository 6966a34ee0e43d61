"""The Twisted client's transactional producer next to its idempotent one,
and its read_committed consumer next to read_uncommitted, against one broker.

    python3 bench/txn_client_bench.py                   # 200,000 records of 200 bytes
    python3 bench/txn_client_bench.py --n 1000000 --txn-sizes 100,10000

One broker (``twistd -n pluglog``, fresh data dir) serves every phase, one
after the other, each client in its own subprocess: the idempotent producer
(no transactions), then the transactional producer committing every
``--txn-sizes`` records, each into a fresh one-partition topic (acks=all,
linger.ms=5, batch.size=1000000); then the topic of the largest transactions
is consumed from the beginning at read_uncommitted and at read_committed.
Printed per phase: records/s, the broker's CPU seconds per million records
(/proc) and the client process's own (rusage).
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


def produce_role(a):
    from twisted.internet import defer, task

    from pluglog.client import Producer

    @defer.inlineCallbacks
    def main(reactor):
        txn = a.txn
        config = {"transactional_id": f"bench-{a.topic}"} if txn else {}
        producer = Producer(
            reactor,
            bootstrap_servers=a.bootstrap,
            acks="all",
            linger_ms=5,
            batch_size=1000000,
            **config,
        )
        if txn:
            yield producer.init_transactions()
        else:
            yield producer.start()
        value = b"x" * a.size
        limit = producer.config["buffer.memory"] - 2 * a.size
        start = time.perf_counter()
        for i in range(a.n):
            if txn and i % txn == 0:
                if i:
                    yield producer.commit_transaction()
                yield producer.begin_transaction()
            producer.send(a.topic, value)
            if producer.buffered_bytes >= limit:
                yield producer.wait_for_room()
        if txn:
            yield producer.commit_transaction()
        else:
            yield producer.flush()
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
        yield producer.stop()

    task.react(main)


def consume_role(a):
    from twisted.internet import defer, task

    from pluglog.client import Consumer, TopicPartition

    @defer.inlineCallbacks
    def main(reactor):
        consumer = Consumer(
            reactor,
            bootstrap_servers=a.bootstrap,
            auto_offset_reset="earliest",
            max_poll_records=100000,
            isolation_level=a.isolation,
        )
        yield consumer.start()
        consumer.assign([TopicPartition(a.topic, 0)])
        got = 0
        start = time.perf_counter()
        while got < a.n:
            batches = yield consumer.getmany(timeout_ms=1000)
            for records in batches.values():
                got += len(records)
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
        yield consumer.stop()

    task.react(main)


def run_role(role, args, topic, **extra):
    cmd = [sys.executable, os.path.abspath(__file__), "--role", role]
    cmd += ["--bootstrap", args.bootstrap, "--topic", topic, "--n", str(args.n)]
    cmd += ["--size", str(args.size)]
    for key, value in extra.items():
        cmd += [f"--{key}", str(value)]
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
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--txn-sizes", default="100,10000")
    parser.add_argument("--work", default="/tmp/pluglog-bench")
    parser.add_argument("--role")
    parser.add_argument("--bootstrap")
    parser.add_argument("--topic")
    parser.add_argument("--txn", type=int, default=0)
    parser.add_argument("--isolation", default="read_uncommitted")
    args = parser.parse_args()
    if args.role:
        {"produce": produce_role, "consume": consume_role}[args.role](args)
        return

    from tests.broker_process import BrokerProcess
    from tests.integration.clients import create_topic

    os.makedirs(args.work, exist_ok=True)
    broker = BrokerProcess(os.path.join(args.work, f"txn-bench-{os.getpid()}")).start()
    args.bootstrap = broker.bootstrap
    sizes = [int(s) for s in args.txn_sizes.split(",")]

    def measure(label, role, topic, **extra):
        cpu0 = cpu_seconds(broker.proc.pid)
        seconds, client_cpu = run_role(role, args, topic, **extra)
        cpu = cpu_seconds(broker.proc.pid) - cpu0
        rate = args.n / seconds
        print(
            f"{label:34s} {rate:>9,.0f} rec/s  broker {cpu * 1e6 / args.n:.1f} "
            f"client {client_cpu * 1e6 / args.n:.1f} CPU-s/M",
            flush=True,
        )
        return rate

    try:
        rates = {}
        for txn in [0, *sizes]:
            topic = f"txn-bench-{txn}"
            create_topic(broker.bootstrap, topic, partitions=1)
            label = f"produce, transactions of {txn:,}" if txn else "produce, idempotent"
            rates[txn] = measure(label, "produce", topic, txn=txn)
        for txn in sizes:
            print(f"transactions of {txn:,}: {rates[txn] / rates[0]:.0%} of idempotent")
        topic = f"txn-bench-{max(sizes)}"
        plain = measure("consume read_uncommitted", "consume", topic)
        committed = measure("consume read_committed", "consume", topic, isolation="read_committed")
        print(f"read_committed: {committed / plain:.0%} of read_uncommitted")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
