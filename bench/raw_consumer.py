"""A consumer that costs as little as a consumer can: raw Fetch v12 with a fetch session.

:func:`consume` reads every record of a topic's partitions from offset 0
over one socket, as a Java consumer's fetcher does against one broker: one
Fetch in flight, a KIP-227 fetch session (the first request lists every
partition; each later one, at the next session epoch, only those whose
fetch offset moved), ``max_bytes`` 50 MiB and 1 MiB per partition
(librdkafka's and Java's defaults), read_uncommitted. Answers are decoded
with pluglog's codec, and records are counted from the record batch
headers (count and last offset delta), never one by one, so the client's
CPU per message stays far below the broker's at any partition count and
the broker's CPU per message is what a figure shows (bench/partitions_bench.py
``--consumer raw``). A batch cut short at the end of an answer is read
again from its offset by the next fetch.
"""

import socket
import struct

from pluglog import protocol as codec

VERSION = 12
_BATCH_HEADER = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA_AT = 23  # int32 last offset delta, from the batch start
_COUNT_AT = 57  # int32 record count, from the batch start
_INT32 = struct.Struct(">i")


def _walk(records, fetch_offset):
    """(records counted, next fetch offset) of the whole batches in ``records``."""
    view = memoryview(records)
    pos = 0
    count = 0
    nxt = fetch_offset
    while pos + 61 <= len(view):
        base, length = _BATCH_HEADER.unpack_from(view, pos)
        end = pos + 12 + length
        if end > len(view):
            break  # cut short: fetched again from its offset
        last = base + _INT32.unpack_from(view, pos + _LAST_DELTA_AT)[0]
        if last >= nxt:
            count += _INT32.unpack_from(view, pos + _COUNT_AT)[0]
            nxt = last + 1
        pos = end
    return count, nxt


def _recv_exact(sock, size):
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if not n:
            raise ConnectionError("the broker closed the connection")
        got += n
    return buf


def consume(host, port, topic, partitions, n, timeout_s=600):
    """Read ``n`` records of ``topic``'s ``partitions`` from offset 0; return
    (records read, fetch requests sent). Fails on any error code."""
    import time

    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    offsets = dict.fromkeys(range(partitions), 0)
    changed = set(offsets)
    session_id, epoch = 0, 0
    got = requests = 0
    deadline = time.monotonic() + timeout_s
    try:
        while got < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{got} of {n} records read in {timeout_s} s")
            wants = [
                {
                    "partition": p,
                    "current_leader_epoch": -1,
                    "fetch_offset": offsets[p],
                    "last_fetched_epoch": -1,
                    "log_start_offset": -1,
                    "partition_max_bytes": 1 << 20,
                }
                for p in sorted(changed)
            ]
            body = {
                "replica_id": -1,
                "max_wait_ms": 500,
                "min_bytes": 1,
                "max_bytes": 52428800,
                "isolation_level": 0,
                "session_id": session_id,
                "session_epoch": epoch,
                "topics": [{"topic": topic, "partitions": wants}] if wants else [],
                "forgotten_topics_data": [],
                "rack_id": "",
            }
            requests += 1
            sock.sendall(codec.encode_request(codec.FETCH, VERSION, requests, "raw", body))
            size = _INT32.unpack(_recv_exact(sock, 4))[0]
            _, answer = codec.decode_response(codec.FETCH, VERSION, _recv_exact(sock, size))
            if answer["error_code"]:
                raise RuntimeError(f"Fetch error {answer['error_code']}")
            session_id, epoch = answer["session_id"], epoch + 1
            changed = set()
            for row in answer["responses"]:
                for part in row["partitions"]:
                    index = part["partition_index"]
                    if part["error_code"]:
                        raise RuntimeError(f"Fetch error {part['error_code']} on {index}")
                    records = part["records"]
                    if not records:
                        continue
                    count, nxt = _walk(records, offsets[index])
                    got += count
                    if nxt != offsets[index]:
                        offsets[index] = nxt
                        changed.add(index)
        return got, requests
    finally:
        sock.close()
