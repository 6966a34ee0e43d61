"""Broker CPU per batch: one Produce request for P partitions against P one-partition requests.

    python3 bench/multi_partition_produce.py [--partitions 1,10,100] [--blocks 40]
                                             [--block 200] [--root CHECKOUT]

librdkafka sends one partition per Produce request (its issue #1700), and
those take the produce fast lane (pluglog/server/fastlane.py). The Java
client, kafka-python and aiokafka put every partition they have a batch for,
led by the same broker, in one request, and a request of several
partitions takes the general path (header parse, dict decode, handler,
dict encode). This measures whether that shape costs the broker more per
batch, on one broker from ``--root``:

* **multi**: stop-and-wait Produce v8 requests, each one batch of 50 x
  200-byte records for every one of P partitions of a topic;
* **single**: the same batches as P one-partition requests, pipelined (sent
  together, then the P answers read), so both shapes cost the client and
  the kernel one round trip per P batches.

Blocks of ``--block`` rounds alternate (ABBA). The broker's reactor thread
CPU per block comes from ``/proc/PID/schedstat``. Printed per P: the
quartiles of CPU per batch for each shape over the blocks, and the median
ratio of paired blocks (multi / single).
"""

import argparse
import os
import shutil
import statistics
import struct
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [HERE, os.path.join(HERE, "bench")]

from produce_latency import Client, _string, quartiles, schedstat_ns, start_broker  # noqa: E402

from pluglog.protocol.records import Record, build_batch  # noqa: E402

BATCH = build_batch([Record(None, b"x" * 200) for _ in range(50)])


def produce_body(topic, partitions):
    """A Produce v8 body: one batch for each of ``partitions`` of ``topic``, acks=1."""
    body = struct.pack(">hhi", -1, 1, 5000) + struct.pack(">i", 1) + _string(topic)
    body += struct.pack(">i", len(partitions))
    for index in partitions:
        body += struct.pack(">ii", index, len(BATCH)) + BATCH
    return body


def frame(body, correlation_id):
    message = struct.pack(">hhi", 0, 8, correlation_id) + _string("bench") + body
    return struct.pack(">i", len(message)) + message


def create_topic(client, topic, partitions):
    # CreateTopics v0: ``partitions`` partitions, replication factor 1.
    spec = struct.pack(">i", 1) + _string(topic) + struct.pack(">ihii", partitions, 1, 0, 0)
    client.request(19, 0, spec + struct.pack(">i", 30000))


def check(answer, expected_partitions):
    """Every partition of a Produce v8 answer has error code 0."""
    at = 4  # correlation id
    (topics,) = struct.unpack_from(">i", answer, at)
    at += 4
    seen = 0
    for _ in range(topics):
        (name_len,) = struct.unpack_from(">h", answer, at)
        at += 2 + name_len
        (count,) = struct.unpack_from(">i", answer, at)
        at += 4
        for _ in range(count):
            _index, error = struct.unpack_from(">ih", answer, at)
            if error:
                raise SystemExit(f"Produce answered error {error}")
            at += 4 + 2 + 8 + 8 + 8 + 4  # index, error, base, append time, log start, errors
            (message_len,) = struct.unpack_from(">h", answer, at + 0)
            at += 2 + max(0, message_len)
            seen += 1
    if seen != expected_partitions:
        raise SystemExit(f"{seen} partitions answered, {expected_partitions} expected")


def read_answers(client, count):
    answers = []
    for _ in range(count):
        (size,) = struct.unpack(">i", client._read(4))
        answers.append(client._read(size))
    return answers


def measure(client, pid, topic, partitions, blocks, block):
    multi_frame = frame(produce_body(topic, range(partitions)), 1)
    singles = b"".join(frame(produce_body(topic, [p]), 2 + p) for p in range(partitions))

    def multi_round():
        client.sock.sendall(multi_frame)
        return read_answers(client, 1)

    def single_round():
        client.sock.sendall(singles)
        return read_answers(client, partitions)

    check(multi_round()[0], partitions)
    for answer in single_round():
        check(answer, 1)
    for _ in range(50):  # warm-up
        multi_round()
        single_round()
    cpu = {"multi": [], "single": []}
    rounds = {"multi": multi_round, "single": single_round}
    for number in range(blocks):
        for shape in ("multi", "single") if number % 2 == 0 else ("single", "multi"):
            before = schedstat_ns(pid)
            for _ in range(block):
                rounds[shape]()
            cpu[shape].append((schedstat_ns(pid) - before) / block / partitions / 1000)
    return cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="1,10,100")
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--block", type=int, default=200, help="rounds per block")
    parser.add_argument("--root", default=HERE, help="checkout the broker runs from")
    args = parser.parse_args()
    proc, work, port = start_broker(args.root)
    try:
        client = Client(port)
        print(f"one broker from {args.root}; load average {os.getloadavg()[0]:.1f}")
        for partitions in (int(p) for p in args.partitions.split(",")):
            topic = f"m{partitions}"
            create_topic(client, topic, partitions)
            time.sleep(0.5)
            cpu = measure(client, proc.pid, topic, partitions, args.blocks, args.block)
            ratios = [m / s for m, s in zip(cpu["multi"], cpu["single"])]
            for shape in ("multi", "single"):
                low, mid, high = quartiles(cpu[shape])
                print(
                    f"P={partitions:4} {shape:6}: broker CPU per batch "
                    f"{low:6.2f} / {mid:6.2f} / {high:6.2f} µs (blocks' quartiles)"
                )
            print(
                f"P={partitions:4} multi / single, paired blocks: median "
                f"{statistics.median(ratios):.3f}; load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
