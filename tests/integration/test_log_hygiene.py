"""Client-supplied text is escaped in the broker log; bad-connection floods are throttled."""

import re
import socket
import struct
import time

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from pluglog.errors import COORDINATOR_LOAD_IN_PROGRESS

EVIL = "evil\nFORGED LINE [pluglog#critical]\x1b[2J\r"


def _bad_connection(broker, client_id):
    # Metadata v1 with an absurd array count: malformed body, connection closed.
    encoded = client_id.encode()
    body = struct.pack(">hhih", 3, 1, 9, len(encoded)) + encoded + struct.pack(">i", 10**9)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        sock.settimeout(5)
        try:
            assert sock.recv(1) == b""
        except ConnectionResetError:
            pass


def test_control_characters_are_escaped_and_floods_summarised(broker):
    _bad_connection(broker, EVIL)
    with BlockingClient("127.0.0.1", broker.port, client_id=EVIL) as client:
        deadline = time.monotonic() + 30
        while True:
            joined = client.request(
                codec.JOIN_GROUP,
                1,
                {
                    "group_id": "g\x1b[2J\nFORGED",
                    "session_timeout_ms": 6000,
                    "rebalance_timeout_ms": 1000,
                    "member_id": "",
                    "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": b""}],
                },
            )
            # The first group request makes __consumer_offsets; its logs
            # open over the next reactor turns, and clients retry meanwhile.
            if joined["error_code"] != COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert joined["error_code"] == 0
    for _ in range(60):
        _bad_connection(broker, "flood")
    # The throttle's summary line comes when its 10 s window ends.
    deadline = time.monotonic() + 30
    while "similar closed-connection warnings suppressed" not in broker.log():
        assert time.monotonic() < deadline, "no suppression summary within 30 s"
        time.sleep(0.1)
    log = broker.log()
    assert "FORGED LINE" in log and "\nFORGED" not in log
    assert "\x1b" not in log and "\r" not in log
    assert "evil\\x0aFORGED LINE [pluglog#critical]\\x1b[2J\\x0d" in log
    assert "group g\\x1b[2J\\x0aFORGED" in log
    closing = log.count("closing connection from")
    assert closing == 20, closing  # the burst; 41 more were counted, not written
    summary = re.findall(r"(\d+) similar closed-connection warnings suppressed", log)
    assert summary == ["41"], summary
    assert broker.alive()
