"""Cost of produce-time record validation for one 50 x 200-byte batch, per codec.

Usage: ``python3 bench/validation_bench.py [--records 50] [--size 200]``.
Prints, per codec, the best-of-5 time of
:func:`pluglog.broker.validation.validate_records` (the C walk of
pluglog._recordwalk, plus bounded decompression) and, for the
uncompressed batch, the pure-Python reference walker and the batch's CRC-32C
check for scale.
"""

import argparse
import os
import random
import sys
import timeit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pluglog.broker.validation import validate_records, walk_records  # noqa: E402
from pluglog.protocol.records import Record, build_batch  # noqa: E402
from pluglog.storage.crc import crc32c  # noqa: E402


def best_us(func, number):
    return min(timeit.repeat(func, number=number, repeat=5)) / number * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=50)
    parser.add_argument("--size", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(1)
    records = [
        Record(b"key-%d" % i, bytes(rng.choice(b"abcdefghij ") for _ in range(args.size)))
        for i in range(args.records)
    ]
    print(f"{args.records} records x {args.size} B values")
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        batch = build_batch(records, compression=codec)
        us = best_us(lambda b=batch: validate_records(b, 1 << 20), 2000)
        print(f"  {codec:7s} batch {len(batch):6d} B: validate_records {us:7.1f} us")
    batch = build_batch(records)
    body = memoryview(batch)[61:]
    py = best_us(lambda: walk_records(body, args.records), 200)
    crc = best_us(lambda: crc32c(memoryview(batch)[21:]), 20000)
    print(f"  none: pure-Python walk_records {py:.1f} us; CRC-32C of the batch {crc:.1f} us")


if __name__ == "__main__":
    main()
