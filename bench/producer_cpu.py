"""The Twisted producer's own CPU per record, with no broker and no network.

    python3 bench/producer_cpu.py                  # 200k sends of 200 bytes
    python3 bench/producer_cpu.py --n 500000 --gc off

A :class:`pluglog.client.Producer` on a ``task.Clock`` talks to the scripted
in-memory broker of ``tests/unit/client_harness.py`` (StringTransports). The
loop is the one ``bench/client_bench.py`` runs (send until ``buffer.memory``
is full, then wait for room), except that "waiting" answers the Produce
requests written so far. Printed, as process CPU microseconds per record:
``send()`` calls, the acknowledgement (``fire_acks``: RecordMetadata and
firing), building batches, the scripted broker's own work (decoding the
request, encoding the answer: not the client's cost, shown to be subtracted),
and the time the cyclic garbage collector ran (``gc.callbacks``), which falls
into the other figures.
"""

import argparse
import gc
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--gc", choices=["on", "off"], default="on")
    parser.add_argument("--keep", action="store_true", help="hold every Deferred until the end")
    parser.add_argument("--callbacks", action="store_true", help="addCallback on every Deferred")
    args = parser.parse_args()

    from pluglog.client import Producer, batches, sender
    from pluglog.client import cluster as cluster_module
    from tests.unit.client_harness import ScriptedCluster, produce_answer

    cluster = ScriptedCluster({"t": 1})
    cluster_module.connect = cluster.connect
    offsets = {"next": 0}

    def on_produce(conn, version, body):
        base = {}
        for t in body["topic_data"]:
            for p in t["partition_data"]:
                base[(t["name"], p["index"])] = offsets["next"]
                offsets["next"] += 1_000_000  # records per batch are unknown here
        return produce_answer(body, base)

    cluster.handlers[0] = on_produce
    timers = {"ack": 0.0, "build": 0.0, "gc": 0.0, "gc2": 0.0}

    def timed(name, fn):
        def wrapper(*a, **kw):
            t0 = time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                timers[name] += time.process_time() - t0

        return wrapper

    sender.fire_acks = timed("ack", batches.fire_acks)
    sender.build_batch_from_encoded = timed("build", sender.build_batch_from_encoded)
    gc_started = [0.0]

    def on_gc(phase, info):
        if phase == "start":
            gc_started[0] = time.process_time()
        else:
            spent = time.process_time() - gc_started[0]
            timers["gc"] += spent
            if info["generation"] == 2:
                timers["gc2"] += spent

    gc.callbacks.append(on_gc)
    if args.gc == "off":
        gc.disable()

    producer = Producer(
        cluster.clock, bootstrap_servers="b1:9092", acks="all", linger_ms=5, batch_size=1000000
    )
    d = producer.start()
    cluster.pump()
    assert d.called
    value = b"x" * args.size
    send = producer.send
    limit = producer.config["buffer.memory"] - 2 * args.size
    kept = []
    got = []
    send_cpu = pump_cpu = 0.0
    gcs0 = [s["collections"] for s in gc.get_stats()]
    left = args.n
    while left:
        t0 = time.process_time()
        while left:
            left -= 1
            r = send("t", value)
            if args.keep:
                kept.append(r)
            if args.callbacks:
                r.addCallback(got.append)
            if producer.buffered_bytes >= limit:
                break
        t1 = time.process_time()
        send_cpu += t1 - t0
        producer.flush() if not left else None
        cluster.clock.advance(0.01)
        cluster.pump(20)
        pump_cpu += time.process_time() - t1
    assert producer.unacked == 0, producer.unacked
    if args.callbacks:
        assert len(got) == args.n
    gcs = [s["collections"] - g for s, g in zip(gc.get_stats(), gcs0)]
    per = 1e6 / args.n
    ack, build = timers["ack"], timers["build"]
    print(
        f"n={args.n} gc={args.gc} keep={args.keep} callbacks={args.callbacks}: "
        f"send {send_cpu * per:.2f} us, ack {ack * per:.2f} us, build {build * per:.2f} us, "
        f"rest of the answer path {(pump_cpu - ack - build) * per:.2f} us (mostly the "
        f"scripted broker), gc {timers['gc'] * per:.2f} us "
        f"(full collections {timers['gc2'] * per:.2f} us), "
        f"(collections per generation {gcs}); "
        f"client total ~{(send_cpu + ack + build) * per:.2f} us"
    )


if __name__ == "__main__":
    main()
