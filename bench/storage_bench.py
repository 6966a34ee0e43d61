"""Storage throughput: append then read back 1,000,000 records of 200 bytes.

Batches of 50 records are built up front with the codec (not timed); only
``IPartitionLog.append`` is timed, then ``read`` (plus ``FileRange.read()``,
the copy-through path) over the whole log. Default topic config (1 GiB
segments, 4 KiB index interval) and the default ``interval`` fsync policy,
which with Kafka's default flush.messages/flush.ms leaves flushing to the OS.

    python3 bench/storage_bench.py [--records N] [--fsync never|interval|always]
"""

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pluglog.config import TopicConfig  # noqa: E402
from pluglog.protocol.records import Record, build_batch  # noqa: E402
from pluglog.storage.manager import SegmentLogStorage  # noqa: E402


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--fsync", default="interval")
    parser.add_argument("--max-bytes", type=int, default=1 << 20)
    args = parser.parse_args()

    value = os.urandom(args.size // 2).hex().encode()[: args.size]
    nbatches = args.records // args.batch
    batches = [
        build_batch([Record(None, value, [], 1_700_000_000_000 + i)] * args.batch)
        for i in range(nbatches)
    ]
    total_bytes = sum(map(len, batches))
    records = nbatches * args.batch

    workdir = tempfile.mkdtemp(prefix="pluglog-bench-")
    try:
        store = SegmentLogStorage(workdir, fsync=args.fsync)
        log = store.open_log("bench", 0, TopicConfig())
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        for now_ms, batch in enumerate(batches):
            log.append(batch, now_ms)
        append_s, append_cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
        assert log.log_end_offset == records

        cpu0, t0 = cpu_seconds(), time.perf_counter()
        offset, read_bytes, reads = 0, 0, 0
        end = log.log_end_offset
        while offset < end:
            result = log.read(offset, args.max_bytes)
            data = result.records.read()
            read_bytes += len(data)
            reads += 1
            # Every batch has the same size and record count, so the next
            # offset follows from the byte count without decoding anything.
            offset = result.first_offset + (result.size // len(batches[0])) * args.batch
        read_s, read_cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
        assert read_bytes == total_bytes, (read_bytes, total_bytes)
        store.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    mb = total_bytes / 1e6
    print(f"records={records} record_size={args.size} batch={args.batch} fsync={args.fsync}")
    print(f"log bytes={total_bytes} ({mb:.1f} MB) batches={nbatches}")
    print(
        f"append: {append_s:.3f} s  {mb / append_s:.0f} MB/s  {records / append_s:,.0f} records/s"
        f"  cpu {append_cpu:.2f} s"
    )
    print(
        f"read:   {read_s:.3f} s  {mb / read_s:.0f} MB/s  {records / read_s:,.0f} records/s"
        f"  cpu {read_cpu:.2f} s  ({reads} reads of <= {args.max_bytes} bytes)"
    )


if __name__ == "__main__":
    main()
