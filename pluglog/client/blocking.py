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
