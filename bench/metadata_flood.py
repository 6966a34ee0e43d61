"""One Metadata v1 request naming N one-character topics against a running
broker: how long until it is answered or the connection closed, and the
broker's RSS before and after (issue #13: 2 M names took 2.2 GB and 11 s).

    python3 bench/metadata_flood.py --bootstrap 127.0.0.1:9092 --pid PID --count 2000000
"""

import argparse
import socket
import struct
import time


def rss_mb(pid, field="VmRSS:"):
    """Resident size, or with field="VmHWM:" the process's peak so far."""
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--pid", type=int, required=True, help="the broker's pid, for RSS")
    parser.add_argument("--count", type=int, default=2_000_000)
    args = parser.parse_args()
    host, port = args.bootstrap.rsplit(":", 1)
    body = struct.pack(">i", args.count) + (struct.pack(">h", 1) + b"x") * args.count
    frame = struct.pack(">hhih", 3, 1, 5, 1) + b"c" + body
    before, hwm_before = rss_mb(args.pid), rss_mb(args.pid, "VmHWM:")
    sock = socket.create_connection((host, int(port)))
    start = time.monotonic()
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    sock.settimeout(600)
    received = 0
    expected = None
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            outcome = "closed"
            break
        if expected is None:
            expected = 4 + struct.unpack(">i", chunk[:4])[0]
        received += len(chunk)
        if received >= expected:
            outcome = "answered"
            break
    elapsed = time.monotonic() - start
    print(
        f"count={args.count} frame={len(frame) / 1e6:.1f}MB {outcome} after {elapsed:.2f}s "
        f"response={received}B rss before={before:.0f}MB after={rss_mb(args.pid):.0f}MB "
        f"peak (VmHWM) before={hwm_before:.0f}MB after={rss_mb(args.pid, 'VmHWM:'):.0f}MB"
    )


if __name__ == "__main__":
    main()
