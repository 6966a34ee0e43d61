"""The paced producer and the timing consumer of bench/latency_bench.py, one per process.

    python latency_client.py produce --system kafka|redis --target HOST:PORT --topic T
                             --rate R --seconds S [--warmup W] [--window N] [--acks all]
    python latency_client.py consume --system kafka|redis --target HOST:PORT --topic T
                             (prints "ready"; reads "SENT FIRST_COUNTED" on stdin)

It runs in the peers harness's venv (redis-py + hiredis, confluent-kafka), the
same interpreter, pacing code and clock for both systems, and imports only the
stdlib until it knows which client library it needs.

Every record is 200 bytes: the sequence number and ``time.monotonic_ns()`` of
the produce call (CLOCK_MONOTONIC, one clock for every process on the host),
then padding. The producer is open-loop: record i is due at
``start + i / rate``; every tick (``--tick-ms``, 1 ms) it sends every record
that is due, in one pipeline (Redis: one write of XADDs) or as produce() calls
(librdkafka), so a slow answer does not slow the schedule, up to ``--window``
records without an answer (then it falls behind, and says by how much).
``--rate 0`` sends as fast as the window allows: the peak. Acknowledgement
latency is produce call to delivery report (librdkafka's callback) or to the
XADD reply (read as soon as the socket is readable); the consumer's is produce
call to the moment the record is in the application's hands (poll /
XREAD BLOCK). Records of the first ``--warmup`` seconds are not counted.
Each process prints one JSON line.
"""

import argparse
import array
import collections
import json
import resource
import struct
import sys
import threading
import time

SIZE = 200
STAMP = struct.Struct(">qq")  # sequence, monotonic ns of the produce call


def summary(samples_ns):
    """p50/p99/p99.9/max in ms of a list of nanosecond latencies."""
    if not samples_ns:
        return None
    ordered = sorted(samples_ns)
    last = len(ordered) - 1

    def at(q):
        return round(ordered[min(last, int(q * len(ordered)))] / 1e6, 3)

    return {
        "n": len(ordered),
        "p50": at(0.5),
        "p99": at(0.99),
        "p999": at(0.999),
        "max": round(ordered[-1] / 1e6, 3),
    }


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class KafkaSide:
    def __init__(self, args):
        import confluent_kafka

        self.ck = confluent_kafka
        self.args = args

    def producer(self, on_ack):
        producer = self.ck.Producer(
            {
                "bootstrap.servers": self.args.target,
                "acks": self.args.acks,
                "linger.ms": self.args.linger_ms,
                "queue.buffering.max.messages": max(100000, 2 * self.args.window),
                "enable.idempotence": False,
                "log_level": 4,
            }
        )
        topic = self.args.topic

        def report(err, msg):
            if err is not None:
                raise SystemExit(f"delivery failed: {err}")
            on_ack(*STAMP.unpack_from(msg.value()))

        def send(values):
            for item in values:
                producer.produce(topic, item, partition=0, on_delivery=report)
            producer.poll(0)

        def wait(seconds):
            producer.poll(seconds)

        def drain():
            if producer.flush(120):
                raise SystemExit("records still unacknowledged 120 s after the end")

        return send, wait, drain

    def consumer(self):
        consumer = self.ck.Consumer(
            {
                "bootstrap.servers": self.args.target,
                "group.id": f"lat-{self.args.topic}",
                "enable.auto.commit": False,
                # librdkafka's default (1000 ms) stops fetching for a second whenever
                # more than queued.min.messages wait in its queue: a client pause, not
                # the broker's latency (bench/README.rst, pluglog-tuned).
                "fetch.queue.backoff.ms": 1,
                "log_level": 4,
            }
        )
        part = self.ck.TopicPartition(self.args.topic, 0, self.ck.OFFSET_BEGINNING)
        consumer.assign([part])

        def poll(timeout):
            # What is there, at once (consume() with a timeout would wait for 1000
            # records); if nothing is, wait for the next one: XREAD BLOCK's behaviour.
            msgs = consumer.consume(1000, 0)
            if not msgs:
                msg = consumer.poll(timeout)
                msgs = [] if msg is None else [msg]
            out = []
            for msg in msgs:
                if msg.error() is None:
                    out.append(msg.value())
                elif msg.error().code() != self.ck.KafkaError._PARTITION_EOF:
                    raise SystemExit(f"consumer error: {msg.error()}")
            return out

        return poll


class RedisSide:
    def __init__(self, args):
        import redis

        host, port = args.target.rsplit(":", 1)
        self.client = redis.Redis(host=host, port=int(port), protocol=2)
        self.args = args

    def producer(self, on_ack):
        conn = self.client.connection_pool.get_connection()
        topic = self.args.topic
        outstanding = collections.deque()

        def send(values):
            conn.send_packed_command(
                conn.pack_commands([("XADD", topic, "*", "d", v) for v in values]),
                check_health=False,
            )
            outstanding.extend(values)

        def wait(seconds):
            # Replies come in order: each is the oldest outstanding XADD's.
            if outstanding and conn.can_read(timeout=seconds):
                while outstanding:
                    conn.read_response()
                    on_ack(*STAMP.unpack_from(outstanding.popleft()))
                    if not conn.can_read(timeout=0):
                        break
            elif seconds > 0:
                time.sleep(seconds)

        def drain():
            deadline = time.monotonic() + 120
            while outstanding and time.monotonic() < deadline:
                wait(0.1)
            if outstanding:
                raise SystemExit("XADDs still unanswered 120 s after the end")

        return send, wait, drain

    def consumer(self):
        last = [b"0-0"]
        topic = self.args.topic

        def poll(timeout):
            block = max(1, int(timeout * 1000))
            got = self.client.xread({topic: last[0]}, count=1000, block=block)
            if not got:
                return []
            entries = got[0][1]
            last[0] = entries[-1][0]
            return [fields[b"d"] for _id, fields in entries]

        return poll


def produce(args, side):
    acks = []
    acked = [0]
    counted = [None]  # first counted seq, once the warm-up is over

    def on_ack(seq, stamp):
        acked[0] += 1
        if counted[0] is not None and seq >= counted[0]:
            acks.append(time.monotonic_ns() - stamp)

    send, wait, drain = side.producer(on_ack)
    late = []  # per tick, ns by which the oldest record sent was behind its schedule
    tick = args.tick_ms / 1000
    pad = b"x" * (SIZE - STAMP.size)
    sent = 0
    c0 = cpu_seconds()
    start = time.monotonic()
    end = start + args.warmup + args.seconds
    t_counted = None
    while True:
        now = time.monotonic()
        if now >= end:
            break
        if t_counted is None and now >= start + args.warmup:
            counted[0], t_counted, acked_at_start = sent, now, acked[0]
        due = int((now - start) * args.rate) if args.rate else sent + args.window
        due = min(due, acked[0] + args.window)
        if due > sent:
            stamp = time.monotonic_ns()
            send([STAMP.pack(seq, stamp) + pad for seq in range(sent, due)])
            if t_counted is not None and args.rate:
                late.append(max(0, int(1e9 * (now - start - sent / args.rate))))
            sent = due
            wait(0)
        else:
            wait(min(tick, max(0.0, end - time.monotonic())))
    counted_end = time.monotonic()
    acked_in_phase = acked[0] - acked_at_start
    drain()
    out = {
        "sent": sent,
        "first_counted": counted[0],
        "rate_target": args.rate,
        # acknowledged msgs/s over the counted phase: the peak when --rate 0
        "rate": round(acked_in_phase / (counted_end - t_counted), 1),
        "ack": summary(acks),
        "late": summary(late),
        "client_cpu_s": round(cpu_seconds() - c0, 3),
    }
    print(json.dumps(out), flush=True)


def consume(args, side):
    poll = side.consumer()
    # the first polls set up the fetch position before the producer starts
    for _ in range(3):
        poll(0.1)
    expect = [None]

    def read_expect():
        # the driver writes "SENT FIRST_COUNTED" once the producer has finished
        line = sys.stdin.readline().split()
        expect[0] = (int(line[0]), int(line[1])) if line else (0, 0)

    threading.Thread(target=read_expect, daemon=True).start()
    print("ready", flush=True)
    seqs, lat = array.array("q"), array.array("q")
    got = 0
    c0 = cpu_seconds()
    deadline = None
    while True:
        values = poll(0.1)
        now = time.monotonic_ns()
        for item in values:
            seq, stamp = STAMP.unpack_from(item)
            seqs.append(seq)
            lat.append(now - stamp)
        got += len(values)
        if expect[0] is not None:
            deadline = deadline or time.monotonic() + args.deadline
            if got >= expect[0][0] or time.monotonic() > deadline:
                break
    first = expect[0][1]
    out = {
        "received": got,
        "e2e": summary([ns for seq, ns in zip(seqs, lat) if seq >= first]),
        "client_cpu_s": round(cpu_seconds() - c0, 3),
    }
    print(json.dumps(out), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["produce", "consume"])
    parser.add_argument("--system", choices=["kafka", "redis"], required=True)
    parser.add_argument("--target", required=True, help="bootstrap HOST:PORT")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--rate", type=float, default=0, help="msgs/s; 0: as fast as possible")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--window", type=int, default=5000)
    parser.add_argument("--tick-ms", type=float, default=1.0)
    parser.add_argument("--acks", default="all")
    parser.add_argument("--linger-ms", type=float, default=0)
    parser.add_argument("--deadline", type=float, default=30, help="consumer: wait for the rest")
    args = parser.parse_args()
    side = (KafkaSide if args.system == "kafka" else RedisSide)(args)
    (produce if args.mode == "produce" else consume)(args, side)
    return 0


if __name__ == "__main__":
    sys.exit(main())
