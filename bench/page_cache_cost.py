"""What a fresh page of page cache costs on this machine, against a recycled one.

    python3 bench/page_cache_cost.py [--mib 600] [--dir /tmp]

Writes ``--mib`` MiB to a new file in ``--dir`` (6 MiB pwrite calls), deletes
it, and at once writes it again: the first pass takes pages the kernel may
have to get back from the host, the second the pages the first just freed.
Prints the writer's system CPU per GiB for each, and the kernel's free page
reporting settings when it has them.

Why (session 17, issue 24): this machine is a VM whose balloon driver
reports free memory to the host (virtio-balloon's free page reporting,
``/sys/module/page_reporting``), which takes it back within seconds. Each
page the page cache then grows into is faulted in from the host: writing
600 MiB cost 1.7-1.9 s of system CPU against 0.14-0.25 s for pages freed a
moment before, about 12 µs per 4 KiB page, 0.6 µs per 200-byte record. That
is the order of a broker's whole CPU per message, so any bench that writes
more than the page cache already holds measures the host as much as the
broker: the same follower catch-up cost 0.37-0.45 µs/msg in its first three
runs and 0.91-1.15 in the fourth and fifth (``replication_partitions_bench.py
--partitions 1 --runs 5``, the cluster's data growing run by run). Compare
codes in alternating runs on the same machine, and read single figures with
this in mind.
"""

import argparse
import os
import resource
import time

CHUNK = 6 << 20


def write_pass(path, mib):
    """System CPU seconds to write ``mib`` MiB to a new file at ``path``."""
    data = os.urandom(CHUNK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        for n in range(max(1, (mib << 20) // CHUNK)):
            os.pwrite(fd, data, n * CHUNK)
        return resource.getrusage(resource.RUSAGE_SELF).ru_stime - before
    finally:
        os.close(fd)
        os.unlink(path)


def reporting():
    """The kernel's page_reporting parameters, {name: value}, or {}."""
    base = "/sys/module/page_reporting/parameters"
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return {}
    out = {}
    for name in names:
        try:
            with open(os.path.join(base, name)) as handle:
                out[name] = handle.read().strip()
        except OSError:
            continue
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=600)
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument(
        "--settle", type=float, default=10.0, help="seconds to wait first (reporting runs)"
    )
    args = parser.parse_args()
    path = os.path.join(args.dir, f"page-cache-cost-{os.getpid()}.bin")
    time.sleep(args.settle)
    fresh = write_pass(path, args.mib)
    recycled = write_pass(path, args.mib)
    per_gib = 1024 / args.mib
    print(
        f"{args.mib} MiB: fresh pages {fresh:.2f} s system CPU ({fresh * per_gib:.2f} s/GiB), "
        f"recycled pages {recycled:.2f} s ({recycled * per_gib:.2f} s/GiB), "
        f"ratio {fresh / max(recycled, 1e-6):.1f}x"
    )
    settings = reporting()
    if settings:
        print("page_reporting: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    else:
        print("no free page reporting (/sys/module/page_reporting) on this kernel")


if __name__ == "__main__":
    main()
