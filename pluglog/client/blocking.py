"""A blocking Kafka-protocol client over pluglog's own codec.

For tools, tests and Spark executors that want one request at a time without
a reactor: connect, ``request(api_key, version, body)`` returns the decoded
response dict. Frames are read whole; correlation ids are checked.
"""

import itertools
import socket
import struct

from pluglog import protocol as codec
from pluglog.config import split_host_port

_SIZE = struct.Struct(">i")


#: Fetch version the tools speak (the highest non-flexible one the broker serves).
FETCH_VERSION = 11


def fetch_body(
    topic,
    offsets,
    max_wait_ms=0,
    max_bytes=52_428_800,
    partition_max_bytes=1_048_576,
    isolation_level=0,
):
    """A Fetch request body for one topic without a fetch session
    (``isolation_level`` 0 read_uncommitted, 1 read_committed);
    ``offsets`` maps partition -> fetch offset."""
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": isolation_level,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "fetch_offset": offset,
                        "partition_max_bytes": partition_max_bytes,
                    }
                    for partition, offset in offsets.items()
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


class ProtocolError(Exception):
    """The broker closed the connection or answered out of order."""


class BlockingClient:
    def __init__(self, host, port, client_id="pluglog-blocking", timeout=30.0):
        self.address = (host, port)
        self.client_id = client_id
        self.sock = socket.create_connection(self.address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._ids = itertools.count(1)

    @classmethod
    def from_bootstrap(cls, bootstrap, **kwargs):
        host, port = split_host_port(bootstrap)
        return cls(host, port, **kwargs)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_raw(self, data):
        self.sock.sendall(data)

    def read_frame(self):
        header = self._read_exact(4)
        (size,) = _SIZE.unpack(header)
        return self._read_exact(size)

    def _read_exact(self, count):
        chunks = []
        while count:
            chunk = self.sock.recv(min(count, 1 << 20))
            if not chunk:
                raise ProtocolError("connection closed by the broker")
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def request(self, api_key, version, body, expect_response=True):
        correlation_id = next(self._ids)
        self.sock.sendall(
            codec.encode_request(api_key, version, correlation_id, self.client_id, body)
        )
        if not expect_response:
            return None
        frame = self.read_frame()
        got, response = codec.decode_response(api_key, version, frame)
        if got != correlation_id:
            raise ProtocolError(f"correlation id {got} != {correlation_id}")
        return response

    def fetch(self, topic, offsets, **limits):
        """Fetch one topic's partitions (``offsets``: partition -> offset);
        returns the response's partition entries. ``limits``: see :func:`fetch_body`."""
        body = fetch_body(topic, offsets, **limits)
        return self.request(codec.FETCH, FETCH_VERSION, body)["responses"][0]["partitions"]
