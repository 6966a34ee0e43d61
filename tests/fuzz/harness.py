"""Drive fuzzed input at a broker process and check it keeps its promises.

:class:`Target` sends one input on a connection and then probes it with an
ApiVersions request: the broker must either answer the probe (having
answered or, for acks=0, swallowed the input) or close the connection,
within :data:`PROBE_TIMEOUT`; only a request that may legally wait
(:data:`PARKING_APIS`) may hold it longer, and then a fresh connection must
be answered at once ("parked"). Anything else (a hang, a stalled broker, a
dead process) is a failure. Raw byte streams go on their own
connection, which is closed afterwards; only the process's health is
checked for them.

:class:`Verifier` is the bystander: it produces numbered records with
acks=all to :data:`~tests.fuzz.strategies.PROTECTED_TOPIC` between fuzz
rounds and finally reads the topic back; every acknowledged record must be
there (``lost`` counts those missing).

:func:`mutations` makes hostile variants of captured real requests (bit
flips, byte overwrites, inserts, deletions, truncation, int32 fields set
to extremes), always re-framed with a correct size so each is one request.
"""

import os
import random
import socket
import struct
import time

import confluent_kafka

from pluglog import protocol as codec
from tests.fuzz.strategies import PROTECTED_TOPIC

PROBE_TIMEOUT = 10.0
#: Fetch (long poll), JoinGroup and SyncGroup may hold a connection's answers
#: for as long as the request asks (max_wait_ms, rebalance timeout), in Kafka too.
PARKING_APIS = frozenset((1, 11, 14))
_SIZE = struct.Struct(">i")
_PROBE_ID = 0x7FFF0001


def probe_frame():
    return codec.encode_request(codec.API_VERSIONS, 0, _PROBE_ID, "fuzz-probe", {})


class BrokenPromiseError(AssertionError):
    """The broker broke a promise; the message says which and on what input."""


class Target:
    """One broker process under fuzz."""

    def __init__(self, host, port, pid):
        self.address = (host, port)
        self.pid = pid
        self.sock = None
        self.inputs = 0
        self.answered = 0
        self.closed = 0
        self.parked = 0
        self.max_rss_kb = 0
        self.max_fds = 0

    def _connect(self):
        self.sock = socket.create_connection(self.address, timeout=PROBE_TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _drop(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def close(self):
        self._drop()

    def _read_exact(self, count, deadline):
        chunks = []
        while count:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = self.sock.recv(min(count, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def send(self, frame, label="input"):
        """Send one framed request and the probe; raise :class:`BrokenPromiseError` on a hang."""
        self.inputs += 1
        if self.sock is None:
            self._connect()
        deadline = time.monotonic() + PROBE_TIMEOUT
        try:
            self.sock.sendall(frame + probe_frame())
            while True:
                header = self._read_exact(4, deadline)
                if header is None:
                    break
                (size,) = _SIZE.unpack(header)
                payload = self._read_exact(size, deadline)
                if payload is None:
                    break
                if size >= 4 and _SIZE.unpack_from(payload)[0] == _PROBE_ID:
                    self.answered += 1
                    return "answered"
        except (ConnectionResetError, BrokenPipeError):
            pass
        except TimeoutError:
            self._drop()
            self.check_alive()
            api_key = struct.unpack_from(">h", frame, 4)[0] if len(frame) >= 6 else None
            if api_key in PARKING_APIS and self._fresh_probe():
                # A long poll (Fetch max_wait_ms) or a rebalance wait, as
                # Kafka holds it too; the broker is serving everyone else.
                self.parked += 1
                return "parked"
            raise BrokenPromiseError(
                f"no answer and no close within {PROBE_TIMEOUT}s after {label} "
                f"{frame[:64].hex()}..."
            ) from None
        self._drop()
        self.closed += 1
        return "closed"

    def _fresh_probe(self):
        """Does a new connection get ApiVersions answered promptly?"""
        try:
            with socket.create_connection(self.address, timeout=PROBE_TIMEOUT) as sock:
                sock.sendall(probe_frame())
                return len(sock.recv(4)) == 4
        except OSError:
            return False

    def send_raw(self, data):
        """Raw bytes on a fresh connection, then hang up."""
        self.inputs += 1
        with socket.create_connection(self.address, timeout=PROBE_TIMEOUT) as sock:
            try:
                sock.sendall(data)
            except (ConnectionResetError, BrokenPipeError):
                pass

    def check_alive(self):
        if not os.path.exists(f"/proc/{self.pid}"):
            raise BrokenPromiseError(
                f"broker process {self.pid} is gone after {self.inputs} inputs"
            )
        self.sample()

    def sample(self):
        try:
            with open(f"/proc/{self.pid}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        self.max_rss_kb = max(self.max_rss_kb, int(line.split()[1]))
            self.max_fds = max(self.max_fds, len(os.listdir(f"/proc/{self.pid}/fd")))
        except FileNotFoundError:
            pass


class Verifier:
    """Acknowledged records must all be readable at the end."""

    def __init__(self, bootstrap):
        self.bootstrap = bootstrap
        self.acked = set()
        self.errors = []
        self.next = 0
        self.producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1}
        )

    def produce(self, count=20):
        def report(err, msg):
            if err is None:
                self.acked.add(msg.value())
            else:
                self.errors.append(err)

        for _ in range(count):
            self.producer.produce(
                PROTECTED_TOPIC, b"%d" % self.next, partition=0, on_delivery=report
            )
            self.next += 1
        self.producer.flush(30)

    def lost(self, timeout=60):
        """Records acknowledged but not read back (0 is the only good answer)."""
        self.producer.flush(30)
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"fuzz-verify-{os.getpid()}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([confluent_kafka.TopicPartition(PROTECTED_TOPIC, 0, 0)])
        seen = set()
        deadline = time.monotonic() + timeout
        try:
            while not self.acked <= seen and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    seen.add(message.value())
        finally:
            consumer.close()
        return len(self.acked - seen)


def mutations(frame, rng):
    """One hostile variant of a captured request frame (size prefix fixed)."""
    body = bytearray(frame[4:])
    for _ in range(rng.choice((1, 1, 2, 3, 8))):
        kind = rng.randrange(7)
        if not body:
            body = bytearray(rng.randbytes(rng.randrange(1, 16)))
        position = rng.randrange(len(body))
        if kind == 0:
            body[position] ^= 1 << rng.randrange(8)
        elif kind == 1:
            body[position] = rng.choice((0, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif kind == 2:
            body[position:position] = rng.randbytes(rng.randrange(1, 9))
        elif kind == 3:
            del body[position : position + rng.randrange(1, 9)]
        elif kind == 4:
            del body[position:]
        elif kind == 5 and len(body) - position >= 4:
            extreme = rng.choice((-1, 0, 2**31 - 1, -(2**31), 10**6))
            struct.pack_into(">i", body, position, extreme)
        else:
            body += rng.randbytes(rng.randrange(1, 33))
    body = bytes(body[:4]) + bytes(body[4:])  # keep api key/version mostly
    return _SIZE.pack(len(body)) + body


def random_frame(rng):
    """Random bytes behind a valid api key and version, correctly framed."""
    api_key, (lo, hi) = rng.choice(sorted(codec.SUPPORTED.items()))
    head = struct.pack(">hhi", api_key, rng.randint(lo, hi), rng.randrange(2**31))
    body = head + rng.randbytes(rng.randrange(0, 200))
    return _SIZE.pack(len(body)) + body


def raw_stream(rng):
    """Unframed garbage: a size prefix that lies, HTTP, or noise."""
    choice = rng.randrange(3)
    if choice == 0:
        return _SIZE.pack(rng.choice((-1, 0, 2**31 - 1, 10))) + rng.randbytes(rng.randrange(64))
    if choice == 1:
        return b"GET / HTTP/1.1\r\nHost: fuzz\r\n\r\n"
    return rng.randbytes(rng.randrange(1, 256))


def seeded(seed):
    return random.Random(seed)
